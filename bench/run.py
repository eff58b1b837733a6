#!/usr/bin/python3
"""Runs the benchmark suite through the real gRPC services and writes
results.json, report.md and PNG plots (bench/report.py).

    bench/run.py                  # full suite, into bench/results/
    bench/run.py --quick          # CI: a few prompts, into bench/results/quick/
    bench/run.py --verifysvc=HOST:PORT   # use running services instead

Without --verifysvc it starts draftsvc (fresh RocksDB in a temp folder) and
verifysvc from the built binaries (.bazel/bin/...) on loopback, and stops
them at the end. Each workload's prompts run at batch 1 in three modes:
plain (drafts off), trie-hierarchical and trie-parallel, in an order that
rotates per prompt so no mode always goes first. Each drafted mode has its
own draftsvc namespace per workload, filled by the warm-up split first, so
no mode ever sees another mode's output of the same prompt.

Exit status 1 when any drafted output differs from plain decoding's (the
service must be lossless); the quick mode asserts nothing else.
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, os.path.join(REPO_ROOT, "clients", "python"))
sys.path.insert(0, BENCH_DIR)

import fetch_workloads  # noqa: E402
import report  # noqa: E402
import workloads  # noqa: E402

# Client.generate's draft_mode per benchmark mode, in rotation order.
MODES = {"plain": "off", "trie-hierarchical": "hierarchical",
         "trie-parallel": "parallel"}
DRAFTED = [m for m in MODES if m != "plain"]


def parse_args(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="CI mode: defaults --limit=2 --warmup=1 "
                             "--max_new_tokens=32, output under results/quick")
    parser.add_argument("--limit", type=int,
                        help="measured prompts per workload (16; quick 2)")
    parser.add_argument("--warmup", type=int,
                        help="warm-up prompts per workload (4; quick 1)")
    parser.add_argument("--max_new_tokens", type=int,
                        help="output tokens per request (128; quick 32)")
    parser.add_argument("--workloads", default=",".join(workloads.NAMES),
                        help="comma-separated subset of %(default)s")
    parser.add_argument("--out", help="output folder (bench/results, quick: "
                                      "bench/results/quick)")
    parser.add_argument("--cache", default=fetch_workloads.default_cache(),
                        help="workload cache (default %(default)s)")
    parser.add_argument("--verifysvc", help="address of a running verifysvc; "
                        "default: start both services here")
    parser.add_argument("--bin_dir", default=os.path.join(REPO_ROOT, ".bazel", "bin"))
    parser.add_argument("--verifysvc_flag", action="append", default=[],
                        help="extra verifysvc flag, e.g. --verifysvc_flag="
                             "--decoding_length=16 (repeatable)")
    parser.add_argument("--draftsvc_flag", action="append", default=[],
                        help="extra draftsvc flag (repeatable)")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="deadline of each request, seconds")
    args = parser.parse_args(argv)
    quick = args.quick
    args.limit = args.limit if args.limit is not None else (2 if quick else 16)
    args.warmup = args.warmup if args.warmup is not None else (1 if quick else 4)
    args.max_new_tokens = args.max_new_tokens or (32 if quick else 128)
    args.out = args.out or os.path.join(
        BENCH_DIR, "results", "quick" if quick else "")
    args.workloads = [w for w in args.workloads.split(",") if w]
    return args


class Service:
    """One server process on loopback, with its log in `work`."""

    def __init__(self, name, argv, work):
        self.name = name
        self.log_path = os.path.join(work, f"{name}.log")
        self.port_file = os.path.join(work, f"{name}.port")
        argv = argv + ["--host=127.0.0.1", "--port=0",
                       f"--port_file={self.port_file}", "--metrics_port=0"]
        with open(self.log_path, "w") as log:
            # Own session: a Ctrl-C reaches only us, and we stop the servers
            # in order (verifysvc drains before draftsvc goes).
            self.process = subprocess.Popen(argv, stdout=log, stderr=log,
                                            start_new_session=True)

    def wait_address(self, timeout=300.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.path.exists(self.port_file) and os.path.getsize(self.port_file):
                with open(self.port_file) as f:
                    return f"127.0.0.1:{f.read().strip()}"
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} did not start (exit "
                           f"{self.process.poll()}):\n{self.log()}")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_services(stack, args):
    """Starts draftsvc and verifysvc; returns verifysvc's address and log."""
    work = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench."))
    binary = lambda name: os.path.join(args.bin_dir, name, name)  # noqa: E731
    for name in ("draftsvc", "verifysvc"):
        if not os.access(binary(name), os.X_OK):
            raise RuntimeError(f"{binary(name)} is missing: bazel build "
                               f"//draftsvc:draftsvc //verifysvc:verifysvc")
    draftsvc = Service("draftsvc", [binary("draftsvc"), f"--db_path={work}/db",
                                    *args.draftsvc_flag], work)
    stack.callback(draftsvc.stop)
    draftsvc_address = draftsvc.wait_address()
    verifysvc = Service("verifysvc", [binary("verifysvc"),
                                      f"--draftsvc={draftsvc_address}",
                                      *args.verifysvc_flag], work)
    stack.callback(verifysvc.stop)  # Runs before draftsvc.stop.
    return verifysvc.wait_address(), verifysvc


def measure(client, prompt, draft_mode, namespace, args):
    """Runs `prompt` once; its usage, token ids and per-token latencies (the
    gap between stream messages, shared evenly by the tokens of the later
    one; the first message, i.e. time to first token, is left out)."""
    arrivals, token_ids, usage = [], [], None
    for message in client.generate(**prompt.request, draft_mode=draft_mode,
                                   namespace=namespace,
                                   max_new_tokens=args.max_new_tokens,
                                   timeout=args.timeout):
        now = time.perf_counter()
        if message.token_ids:
            arrivals.append((now, len(message.token_ids)))
            token_ids.extend(message.token_ids)
        if message.HasField("usage"):
            usage = message.usage
    if usage is None:
        raise RuntimeError("a Generate stream ended without usage")
    latencies = []
    for (before, _), (after, tokens) in zip(arrivals, arrivals[1:]):
        latencies += [round((after - before) / tokens * 1e3, 4)] * tokens
    return usage, token_ids, latencies


def first_difference(a, b):
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y),
                min(len(a), len(b)))


def run_workload(client, workload, namespace_prefix, args):
    """Warm-up, then the measured prompts in every mode; their records."""
    namespace = {m: f"{namespace_prefix}-{workload.name}-{m}" for m in DRAFTED}
    for prompt in workload.warmup:
        for mode in DRAFTED:
            measure(client, prompt, MODES[mode], namespace[mode], args)
    records = []
    names = list(MODES)
    for i, prompt in enumerate(workload.measured):
        order = names[i % len(names):] + names[:i % len(names)]
        results = {}
        for position, mode in enumerate(order):
            results[mode] = measure(client, prompt, MODES[mode],
                                    namespace.get(mode, ""), args), position
        plain_ids = results["plain"][0][1]
        line = []
        for mode in names:
            (usage, ids, latencies), position = results[mode]
            identical = ids == plain_ids
            records.append({
                "workload": workload.name, "prompt": prompt.id, "mode": mode,
                "position": position, "identical": identical,
                "diverged_at": None if identical else first_difference(ids, plain_ids),
                "prompt_tokens": usage.prompt_tokens,
                "output_tokens": usage.output_tokens,
                "decoding_steps": usage.decoding_steps,
                "draft_tokens": usage.draft_tokens,
                "accepted_draft_tokens": usage.accepted_draft_tokens,
                "ttft_seconds": usage.time_to_first_token_seconds,
                "total_seconds": usage.total_seconds,
                "finish_reason": usage.finish_reason,
                "token_latencies_ms": latencies})
            line.append(f"{mode} {usage.output_tokens / usage.total_seconds:.1f} "
                        f"tok/s EDL {usage.edl:.2f}"
                        + ("" if identical else " MISMATCH"))
        print(f"  {workload.name} {i + 1}/{len(workload.measured)} {prompt.id}: "
              + " | ".join(line), flush=True)
    return records


def machine_info():
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
            "load_average_start": os.getloadavg()}
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((line.split(":", 1)[1].strip() for line in f
                                if line.startswith("model name")), "")
    return info


def git_commit():
    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=REPO_ROOT, capture_output=True,
                              text=True).stdout.strip()
    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("-dirty" if git("status", "--porcelain") else "")


def main(argv):
    args = parse_args(argv)
    import grpc  # after argparse, so --help works without grpc
    from lookahead_client import Client

    # A SIGTERM (CI timeout) unwinds like Ctrl-C, so the servers are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {"started": started.isoformat(timespec="seconds"),
               "commit": git_commit(), "machine": machine_info(),
               "args": {k: v for k, v in vars(args).items() if k != "cache"}}
    with open(os.path.join(args.cache, "manifest.json")) as f:
        results["sources"] = json.load(f)
    with contextlib.ExitStack() as stack:
        verifysvc = None
        address = args.verifysvc
        if address is None:
            address, verifysvc = start_services(stack, args)
        client = stack.enter_context(Client(address))
        client.wait_ready(timeout=30)
        info = client.model_info()
        results["model"] = {"name": info.name, "file": os.path.basename(info.model_file),
                            "file_type": info.file_type, "dtype": info.dtype,
                            "device": info.device}
        if verifysvc is not None:
            # The model it loaded and its measured forward cost by tokens.
            results["verifysvc_log"] = [
                line for line in verifysvc.log().splitlines()
                if line.startswith(("verifysvc: model", "verifysvc: forward"))]
        selected = workloads.load(args.cache, args.workloads, info.vocab_size,
                                  args.warmup, args.limit)
        # One throwaway request: first-call costs stay out of the numbers.
        measure(client, workloads.Prompt("warm", {"prompt": "Hello"}), "off", "", args)
        prefix = "bench-" + started.strftime("%Y%m%dT%H%M%S")
        records = []
        try:
            for workload in selected:
                print(f"{workload.name}: {len(workload.warmup)} warm-up, "
                      f"{len(workload.measured)} measured prompts", flush=True)
                records += run_workload(client, workload, prefix, args)
        except grpc.RpcError as e:
            if verifysvc is not None:
                print(verifysvc.log()[-4000:], file=sys.stderr)
            print(f"run: Generate failed: {e.code().name}: {e.details()}",
                  file=sys.stderr)
            return 1
    results["machine"]["load_average_end"] = os.getloadavg()
    results["workloads"] = {w.name: {"description": w.description,
                                     "warmup": len(w.warmup),
                                     "measured": len(w.measured)} for w in selected}
    results["records"] = records
    results["seconds"] = round(time.time() - started.timestamp(), 1)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report.write(results, args.out)
    mismatches = [r for r in records if not r["identical"]]
    for r in mismatches:
        print(f"run: NOT LOSSLESS: {r['workload']} {r['prompt']} {r['mode']} "
              f"diverges from plain at output token {r['diverged_at']}",
              file=sys.stderr)
    print(f"run: {len(records) - len(mismatches)} identical, {len(mismatches)} "
          f"different from plain; report in {os.path.relpath(args.out)}"
          f"/report.md ({results['seconds']} s)")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
