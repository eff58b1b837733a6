#!/usr/bin/env python3
"""A/B of two verifysvc flag sets on the bench's workloads.

Two service pairs (each a draftsvc with a fresh database and a verifysvc)
run side by side; only one works at a time. Every measured prompt runs in
plain decoding and in each draft mode on both, in an order that rotates
per prompt, so drift in the machine's speed (this VM's varies by 15%
between minutes) falls on both sides alike. Per side and mode: tok/s, the
speedup over that side's plain decoding on the same prompts, EDL, and the
verifier's draftsvc round trips (count, mean ms). Every drafted output
must equal its side's plain one (exit 1 otherwise).

    tools/bench.sh --help >/dev/null   # builds, fetches the workloads
    /usr/bin/python3 bench/ab.py --common_flag=--activations=int8 \\
        --a_flag=--pace_repeats=false --b_flag=--pace_repeats=true \\
        --out=bench/results/pace_repeats/run1

Two builds: --a_bin_dir and --b_bin_dir name folders laid out as
.bazel/bin (draftsvc/draftsvc, verifysvc/verifysvc).
"""
import argparse
import contextlib
import datetime
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "clients", "python"))
import fetch_workloads  # noqa: E402
import harness  # noqa: E402
import workloads  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RPC = "lookahead_draft_rpc_duration_seconds"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--a_flag", action="append", default=[],
                   help="a verifysvc flag of side A (repeatable)")
    p.add_argument("--b_flag", action="append", default=[],
                   help="a verifysvc flag of side B (repeatable)")
    p.add_argument("--common_flag", action="append", default=[],
                   help="a verifysvc flag of both sides (repeatable)")
    p.add_argument("--draftsvc_flag", action="append", default=[],
                   help="a draftsvc flag of both sides (repeatable), e.g. "
                        "--self_draft for the assistant and mixed modes")
    p.add_argument("--workloads", default="rag,code,chat")
    p.add_argument("--modes", default="trie,default",
                   help="draft modes (bench/harness.py SOURCE_MODES)")
    p.add_argument("--limit", type=int, default=16,
                   help="measured prompts per workload")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--max_new_tokens", type=int, default=128)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--bin_dir", default=os.path.join(ROOT, ".bazel", "bin"))
    p.add_argument("--a_bin_dir", help="side A's draftsvc/ and verifysvc/ "
                   "binaries (default --bin_dir): A/B two builds")
    p.add_argument("--b_bin_dir", help="side B's, as --a_bin_dir")
    p.add_argument("--cache", default=fetch_workloads.default_cache())
    p.add_argument("--out", help="folder for results.json and report.md")
    args = p.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.modes = args.modes.split(",")
    unknown = [m for m in args.modes if m not in harness.SOURCE_MODES]
    if unknown or "plain" in args.modes:
        p.error(f"--modes: pick drafted modes of {list(harness.SOURCE_MODES)}")
    return args


def scrape(service):
    """The verifier's draftsvc round trips so far: (count, seconds)."""
    count = total = 0.0
    for line in service.metrics().splitlines():
        if line.startswith(RPC + "_count"):
            count = float(line.split()[-1])
        elif line.startswith(RPC + "_sum"):
            total = float(line.split()[-1])
    return count, total


def start_side(stack, args, name, flags):
    """Side `name`'s service pair: (its connection, its verifysvc)."""
    bin_dir = getattr(args, f"{name.lower()}_bin_dir") or args.bin_dir
    address, verifysvc = harness.start_services(
        stack, bin_dir, draftsvc_flags=args.draftsvc_flag,
        verifysvc_flags=[*args.common_flag, *flags])
    return harness.Connection(address), verifysvc


def main(argv):
    args = parse_args(argv)
    runs = [(side, mode) for mode in ["plain", *args.modes]
            for side in ("A", "B")]
    results = {"started": datetime.datetime.now().isoformat(),
               "a_flags": args.a_flag, "b_flags": args.b_flag,
               "a_bin_dir": args.a_bin_dir, "b_bin_dir": args.b_bin_dir,
               "common_flags": args.common_flag,
               "draftsvc_flags": args.draftsvc_flag, "records": []}
    mismatches = 0
    with contextlib.ExitStack() as stack:
        sides = {"A": start_side(stack, args, "A", args.a_flag),
                 "B": start_side(stack, args, "B", args.b_flag)}
        for connection, _ in sides.values():
            connection.client.wait_ready(timeout=60)
        info = sides["A"][0].client.model_info()
        selected = workloads.load(args.cache, args.workloads, info.vocab_size,
                                  args.warmup, args.limit)

        def run(side, mode, prompt, namespace):
            spec = harness.SOURCE_MODES[mode]
            connection, verifysvc = sides[side]
            before = scrape(verifysvc)
            start = time.perf_counter()
            usage, ids, _ = harness.measure(
                connection, prompt, spec["draft_mode"], namespace,
                args.max_new_tokens, args.timeout,
                sources=spec.get("sources", ()), lookahead=spec["lookahead"])
            seconds = time.perf_counter() - start
            after = scrape(verifysvc)
            return {"seconds": seconds, "tokens": len(ids), "ids": ids,
                    "edl": usage.edl, "rpc": after[0] - before[0],
                    "rpc_seconds": after[1] - before[1]}

        lines = []
        for w in selected:
            namespace = {r: f"ab-{w.name}-{r[0]}-{r[1]}" for r in runs}
            for prompt in w.warmup:
                for r in runs:
                    run(*r, prompt, namespace[r])
            for i, prompt in enumerate(w.measured):
                plain_ids = {}
                for r in runs[i % len(runs):] + runs[:i % len(runs)]:
                    m = run(*r, prompt, namespace[r])
                    m.update(workload=w.name, prompt=prompt.id, side=r[0],
                             mode=r[1])
                    results["records"].append(m)
                for m in results["records"]:
                    if m["prompt"] == prompt.id and m["mode"] == "plain":
                        plain_ids[m["side"]] = m["ids"]
                for m in results["records"]:
                    if m["prompt"] == prompt.id and m["workload"] == w.name:
                        m["identical"] = m["ids"] == plain_ids[m["side"]]
                        if not m["identical"]:
                            mismatches += 1
                            print(f"MISMATCH {w.name} {prompt.id} "
                                  f"{m['side']} {m['mode']}", flush=True)
            lines += report_rows(w.name, results["records"], runs)
            print("\n".join(lines[-len(runs):]), flush=True)
    for m in results["records"]:
        del m["ids"]
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(results, f, indent=1)
        with open(os.path.join(args.out, "report.md"), "w") as f:
            f.write(f"# A/B: {side_name(args, 'A')} vs {side_name(args, 'B')}"
                    "\n\n"
                    f"- started {results['started']}, common flags "
                    f"`{' '.join(args.common_flag)}`\n"
                    f"- `bench/ab.py {' '.join(argv)}`\n\n"
                    "| workload | side | mode | tok/s | vs plain | EDL | "
                    "round trips (ms) | identical |\n"
                    "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n"
                    + "\n".join(lines) + "\n")
    return 1 if mismatches else 0


def side_name(args, side):
    """A side's flags and, if its own, its binaries' folder."""
    flags = " ".join(getattr(args, f"{side.lower()}_flag")) or "(defaults)"
    bin_dir = getattr(args, f"{side.lower()}_bin_dir")
    return f"{flags} ({bin_dir})" if bin_dir else flags


def report_rows(workload, records, runs):
    """One markdown row per (side, mode) of `workload`."""
    rows = []
    mine = [m for m in records if m["workload"] == workload]
    plain = {side: sum(m["seconds"] for m in mine
                       if m["side"] == side and m["mode"] == "plain")
             for side in ("A", "B")}
    for side, mode in runs:
        ms = [m for m in mine if m["side"] == side and m["mode"] == mode]
        seconds = sum(m["seconds"] for m in ms)
        tokens = sum(m["tokens"] for m in ms)
        steps = sum(m["tokens"] / max(m["edl"], 1e-9) for m in ms)
        rpc = sum(m["rpc"] for m in ms)
        rpc_ms = 1e3 * sum(m["rpc_seconds"] for m in ms) / max(rpc, 1)
        same = sum(m["identical"] for m in ms)
        rows.append(f"| {workload} | {side} | {mode} | {tokens / seconds:.1f} "
                    f"| {plain[side] / seconds:.3f}x | "
                    f"{tokens / max(steps, 1e-9):.2f} | {rpc:.0f} "
                    f"({rpc_ms:.2f}) | {same}/{len(ms)} |")
    return rows


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
