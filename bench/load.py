#!/usr/bin/python3
"""Load test of verifysvc's fronts: many concurrent streaming clients for a
bounded time, through the OpenAI-compatible HTTP front (the official
`openai` async client) and through the gRPC front (grpc.aio), in one run
against one service pair.

    tools/load.sh                      # 256 streams, 60 s per front
    tools/load.sh --streams=64 --seconds=20

What it checks, and exits non-zero unless all hold:
  - zero errors on either front;
  - every output identical to the same request sent alone (greedy and
    seeded sampling; the references are taken one at a time first);
  - no leaked threads: no HTTP round adds a verifysvc thread (the front
    has one I/O thread; gRPC's own executor pool grows with demand, so the
    gRPC rounds' thread counts are reported, not checked);
  - no leaked memory: no later HTTP round ends with verifysvc's resident
    memory more than --max_rss_growth_mib above the first round's end (the
    first round fills the prefix cache, KV blocks and allocator arenas,
    which then churn by tens of MiB; a leak keeps growing). A coarse bound:
    it catches leaks of ~100 KiB per request, not a few bytes.
What it reports (and writes to --out as JSON and Markdown): p50/p99 time
to first token and inter-token latency per front, requests and tokens/s
per front, resident memory and threads of verifysvc at each point.
"""

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time

import harness
import workloads

VERIFYSVC_FLAGS = (
    # Every stream is admitted or queued: a load of N streams must not be
    # turned away by the default queue (64).
    "--max_queued=1024",
)


def percentile(values, q):
    if not values:
        return 0.0
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q / 100 * (len(values) - 1))))
    return values[k]


def proc_status(pid):
    """verifysvc's resident memory (MiB) and thread count."""
    rss_kib, threads = 0, 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return {"rss_mib": round(rss_kib / 1024, 1), "threads": threads}


def make_requests(cache, count, max_tokens):
    """`count` distinct requests: RAG and chat prompts, alternately greedy
    and seeded sampling (temperature 0.8, top_p 0.95)."""
    loaded = workloads.load(cache, ["rag", "chat"], vocab_size=0, warmup=0,
                            limit=(count + 1) // 2)
    prompts = [p for pair in zip(loaded[0].measured, loaded[1].measured)
               for p in pair][:count]
    requests = []
    for i, p in enumerate(prompts):
        r = {"id": f"{i}:{p.id}", "messages": p.request["chat"],
             "max_tokens": max_tokens}
        if i % 2:
            r.update(temperature=0.8, top_p=0.95, seed=1000 + i)
        else:
            r.update(temperature=0.0)
        requests.append(r)
    return requests


class Tally:
    """One front's results in one round."""

    def __init__(self):
        self.requests = 0
        self.tokens = 0
        self.errors = []
        self.mismatches = []
        self.ttft = []
        self.itl = []

    def summary(self, seconds):
        ms = lambda v: round(v * 1e3, 1)  # noqa: E731
        return {
            "requests": self.requests, "tokens": self.tokens,
            "errors": len(self.errors), "first_errors": self.errors[:5],
            "mismatches": len(self.mismatches),
            "first_mismatches": self.mismatches[:5],
            "seconds": round(seconds, 1),
            "tokens_per_second": round(self.tokens / seconds, 1),
            "requests_per_second": round(self.requests / seconds, 2),
            "ttft_ms_p50": ms(percentile(self.ttft, 50)),
            "ttft_ms_p99": ms(percentile(self.ttft, 99)),
            "itl_ms_p50": ms(percentile(self.itl, 50)),
            "itl_ms_p99": ms(percentile(self.itl, 99)),
        }


class Stream:
    """One streamed answer as it arrives: text, time to first text, the
    gaps between later texts, and the completion tokens usage reports."""

    def __init__(self):
        self.start = time.perf_counter()
        self.text, self.ttft, self.last, self.gaps, self.tokens = (
            [], None, None, [], 0)

    def add(self, text):
        now = time.perf_counter()
        if not text:
            return
        self.text.append(text)
        if self.ttft is None:
            self.ttft = now - self.start
        else:
            self.gaps.append(now - self.last)
        self.last = now

    def result(self):
        return "".join(self.text), self.ttft, self.gaps, self.tokens


def sampling(r):
    return {k: r[k] for k in ("temperature", "top_p", "seed") if k in r}


async def http_one(client, model, r):
    """Streams request `r` through the OpenAI API; (text, ttft, gaps,
    completion tokens)."""
    s = Stream()
    stream = await client.chat.completions.create(
        model=model, messages=r["messages"], max_tokens=r["max_tokens"],
        stream=True, stream_options={"include_usage": True}, **sampling(r))
    async for chunk in stream:
        if chunk.usage is not None:
            s.tokens = chunk.usage.completion_tokens
        s.add(chunk.choices[0].delta.content if chunk.choices else None)
    return s.result()


async def grpc_one(stub, r):
    """Streams request `r` through the gRPC front; as http_one."""
    from lookahead_client.client import build_request
    request = build_request(chat=r["messages"], max_new_tokens=r["max_tokens"],
                            **sampling(r))
    s = Stream()
    async for message in stub.Generate(request):
        if message.HasField("usage"):
            s.tokens = message.usage.output_tokens
        s.add(message.text)
    return s.result()


async def drive(one, requests, references, streams, seconds, tally):
    """`streams` clients, each sending its share of `requests` in a loop
    until `seconds` pass (a request running then finishes)."""
    deadline = time.perf_counter() + seconds

    async def client(k):
        i = k
        while time.perf_counter() < deadline:
            r = requests[i % len(requests)]
            i += streams
            try:
                text, ttft, gaps, tokens = await one(r)
            except Exception as e:  # noqa: BLE001: every error counts
                tally.errors.append(f"{r['id']}: {type(e).__name__}: {e}")
                continue
            tally.requests += 1
            tally.tokens += tokens
            if ttft is not None:
                tally.ttft.append(ttft)
            tally.itl.extend(gaps)
            if references is not None and text != references[r["id"]]:
                tally.mismatches.append(r["id"])

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(streams)))
    return time.perf_counter() - started


async def run(args, http_base, grpc_address, pid):
    import grpc
    import httpx
    import openai
    from lookahead_client.proto import generation_pb2_grpc

    requests = make_requests(args.cache, args.requests, args.max_tokens)
    client = openai.AsyncOpenAI(
        base_url=http_base, api_key="unused", max_retries=0, timeout=600,
        http_client=httpx.AsyncClient(limits=httpx.Limits(
            max_connections=args.streams + 16,
            max_keepalive_connections=args.streams + 16), timeout=600))
    model = (await client.models.list()).data[0].id
    report = {"streams": args.streams, "seconds_per_round": args.seconds,
              "distinct_requests": len(requests),
              "max_tokens": args.max_tokens, "model": model, "process": {}}
    report["process"]["start"] = proc_status(pid)

    # The references: each request alone, one at a time.
    references = {}
    for r in requests:
        text, _, _, _ = await http_one(client, model, r)
        references[r["id"]] = text
    report["process"]["after_references"] = proc_status(pid)
    print(f"load: {len(references)} references taken one at a time",
          flush=True)

    rounds = {}
    for n in range(args.http_rounds):
        tally = Tally()
        seconds = await drive(lambda r: http_one(client, model, r), requests,
                              references, args.streams, args.seconds, tally)
        rounds[f"http_{n + 1}"] = tally.summary(seconds)
        report["process"][f"after_http_{n + 1}"] = proc_status(pid)
        print(f"load: http round {n + 1}: {json.dumps(rounds[f'http_{n + 1}'])}",
              flush=True)
    await client.close()

    async with grpc.aio.insecure_channel(grpc_address) as channel:
        stub = generation_pb2_grpc.GenerationServiceStub(channel)
        for n in range(args.grpc_rounds):
            tally = Tally()
            seconds = await drive(lambda r: grpc_one(stub, r), requests,
                                  references, args.streams, args.seconds,
                                  tally)
            rounds[f"grpc_{n + 1}"] = tally.summary(seconds)
            report["process"][f"after_grpc_{n + 1}"] = proc_status(pid)
            print(f"load: grpc round {n + 1}: "
                  f"{json.dumps(rounds[f'grpc_{n + 1}'])}", flush=True)
    report["rounds"] = rounds
    return report


def verdict(report, max_rss_growth_mib):
    """The failed checks, as messages."""
    failed = []
    for name, r in report["rounds"].items():
        if r["errors"]:
            failed.append(f"{name}: {r['errors']} errors, e.g. "
                          f"{r['first_errors'][:2]}")
        if r["mismatches"]:
            failed.append(f"{name}: {r['mismatches']} outputs differ from the "
                          f"request alone, e.g. {r['first_mismatches'][:2]}")
        if r["requests"] == 0:
            failed.append(f"{name}: no request finished")
    p = report["process"]
    # The HTTP front runs on one I/O thread whatever its load: no round may
    # add a thread. (gRPC's callback executor grows and shrinks its own
    # pool with demand: its rounds' counts are reported, not checked.)
    for point in (k for k in p if k.startswith("after_http_")):
        if p[point]["threads"] != p["after_references"]["threads"]:
            failed.append(f"threads {p['after_references']['threads']} before "
                          f"the load, {p[point]['threads']} {point}")
    # Caches (prefix cache, KV blocks, allocator arenas) fill during the
    # first round and then churn (RSS moves by tens of MiB between rounds);
    # a leak keeps growing: no later round may end more than
    # max_rss_growth_mib above the first.
    http_rounds = [k for k in p if k.startswith("after_http_")]
    if len(http_rounds) > 1:
        growth = (max(p[k]["rss_mib"] for k in http_rounds[1:]) -
                  p[http_rounds[0]]["rss_mib"])
        report["rss_growth_mib"] = round(growth, 1)
        if growth > max_rss_growth_mib:
            failed.append(f"resident memory grew {growth:.1f} MiB after the "
                          f"first HTTP round (limit {max_rss_growth_mib})")
    return failed


def markdown(report, failed, command):
    lines = [
        "# Load test: verifysvc's HTTP (OpenAI) and gRPC fronts",
        "",
        f"`{command}`",
        "",
        f"{report['streams']} concurrent streaming clients per front, "
        f"{report['seconds_per_round']} s per round, "
        f"{report['distinct_requests']} distinct requests (RAG and chat, "
        f"alternately greedy and seeded sampling), max_tokens "
        f"{report['max_tokens']}, model {report['model']}, drafts at the "
        "server default. Outputs compared with the same request sent alone.",
        "verifysvc runs its defaults (16 sequences per batch) with "
        f"{' '.join(VERIFYSVC_FLAGS)}, so past 16 streams requests queue and "
        "time to first token is mostly queueing; the load client (one "
        "asyncio process) shares the machine's cores with both services.",
        "",
        "| round | requests | errors | mismatches | tokens/s | TTFT p50 ms "
        "| TTFT p99 ms | ITL p50 ms | ITL p99 ms |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, r in report["rounds"].items():
        lines.append(
            f"| {name} | {r['requests']} | {r['errors']} | {r['mismatches']} "
            f"| {r['tokens_per_second']} | {r['ttft_ms_p50']} "
            f"| {r['ttft_ms_p99']} | {r['itl_ms_p50']} | {r['itl_ms_p99']} |")
    lines += ["", "verifysvc process:", "",
              "| point | RSS MiB | threads |", "| --- | ---: | ---: |"]
    for point, s in report["process"].items():
        lines.append(f"| {point} | {s['rss_mib']} | {s['threads']} |")
    lines += ["", f"RSS growth after the first HTTP round (peak of the later ones): "
              f"{report.get('rss_growth_mib', 0)} MiB.", "",
              "Verdict: " + ("PASS" if not failed else
                             "FAIL: " + "; ".join(failed)), ""]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--http_rounds", type=int, default=3)
    parser.add_argument("--grpc_rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=48,
                        help="distinct requests the clients cycle through")
    parser.add_argument("--max_tokens", type=int, default=48)
    parser.add_argument("--max_rss_growth_mib", type=float, default=64)
    parser.add_argument("--bin_dir", default=os.path.join(harness.REPO_ROOT,
                                                          ".bazel", "bin"))
    parser.add_argument("--cache", default=os.path.expanduser(
        "~/.cache/lookahead/bench"))
    parser.add_argument("--out", default=os.path.join(
        harness.BENCH_DIR, "results", "load"))
    args = parser.parse_args()

    with contextlib.ExitStack() as stack:
        work = stack.enter_context(harness.tempfile.TemporaryDirectory(
            prefix="load."))
        http_port_file = os.path.join(work, "http.port")
        grpc_address, verifysvc = harness.start_services(
            stack, args.bin_dir, verifysvc_flags=(
                *VERIFYSVC_FLAGS, "--http_port=0",
                f"--http_port_file={http_port_file}"))
        with open(http_port_file) as f:
            http_base = f"http://127.0.0.1:{f.read().strip()}/v1"
        print(f"load: verifysvc gRPC {grpc_address}, HTTP {http_base}",
              flush=True)
        report = asyncio.run(run(args, http_base, grpc_address,
                                 verifysvc.process.pid))
    failed = verdict(report, args.max_rss_growth_mib)
    command = "tools/load.sh " + " ".join(sys.argv[1:])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "load.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(args.out, "report.md"), "w") as f:
        f.write(markdown(report, failed, command.strip()))
    print(markdown(report, failed, command.strip()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
