#!/usr/bin/python3
"""Turns bench/run.py's results.json into report.md (a table per workload)
and PNG plots (python3-matplotlib), in the same folder.

    bench/report.py bench/results/results.json

Per workload and mode, over the measured prompts:
  tok/s      output tokens / request seconds (server-side, arrival to last
             token), both summed over the prompts
  EDL        output tokens / decoding steps (tokens per forward pass)
  speedup    plain's summed seconds / the mode's, same prompts, same run
  decode     the same over the decode phase only (seconds - TTFT), which
             is what drafts can speed up; prefill is the same in every mode
  accepted   accepted / verified draft tokens
  p50, p99   per-token latency: the gap between stream messages as the
             client sees them, shared evenly by the tokens of the later
             message; the first token (TTFT) is left out
  identical  outputs token for token equal to plain decoding's
"""

import json
import os
import sys
from collections import defaultdict

MODES = ("plain", "trie-hierarchical", "trie-parallel")


def percentile(values, q):
    """Nearest-rank percentile of `values` (q in [0, 100]); 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def decode_seconds(record):
    return record["total_seconds"] - record["ttft_seconds"]


def summarize(records):
    """{workload: {mode: stats}} over `records`."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[r["workload"]][r["mode"]].append(r)
    summary = {}
    for workload, by_mode in groups.items():
        plain = by_mode.get("plain", [])
        plain_seconds = sum(r["total_seconds"] for r in plain)
        plain_decode = sum(decode_seconds(r) for r in plain)
        summary[workload] = {}
        for mode in MODES:
            rs = by_mode.get(mode, [])
            if not rs:
                continue
            tokens = sum(r["output_tokens"] for r in rs)
            seconds = sum(r["total_seconds"] for r in rs)
            decode = sum(decode_seconds(r) for r in rs)
            drafted = sum(r["draft_tokens"] for r in rs)
            latencies = [x for r in rs for x in r["token_latencies_ms"]]
            summary[workload][mode] = {
                "requests": len(rs), "tokens": tokens,
                "tokens_per_second": tokens / seconds if seconds else 0.0,
                "edl": tokens / max(1, sum(r["decoding_steps"] for r in rs)),
                "speedup": plain_seconds / seconds if seconds else 0.0,
                "decode_speedup": plain_decode / decode if decode else 0.0,
                "acceptance": (sum(r["accepted_draft_tokens"] for r in rs) / drafted
                               if drafted else None),
                "p50_ms": percentile(latencies, 50),
                "p99_ms": percentile(latencies, 99),
                "ttft_p50_s": percentile([r["ttft_seconds"] for r in rs], 50),
                "identical": sum(r["identical"] for r in rs),
                "latencies": latencies,
            }
    return summary


def markdown(results, summary, plots):
    m, machine = results.get("model", {}), results["machine"]
    args = results["args"]
    lines = [
        "# lookahead benchmark" + (" (quick)" if args.get("quick") else ""),
        "",
        f"- commit `{results['commit']}`, started {results['started']}, "
        f"{results.get('seconds', 0):.0f} s",
        f"- machine: {machine.get('cpu', '?')}, {machine['usable_cpus']} of "
        f"{machine['cpus']} CPUs usable, {machine['platform']}; load average "
        f"{machine['load_average_start'][0]:.2f} at start, "
        f"{machine.get('load_average_end', [0])[0]:.2f} at end",
        f"- model: {m.get('name')} ({m.get('file')}, {m.get('file_type')}, "
        f"{m.get('dtype')} on {m.get('device')})",
    ]
    for line in results.get("verifysvc_log", []):
        lines.append(f"- `{line}`")
    extra = args.get("verifysvc_flag", []) + args.get("draftsvc_flag", [])
    lines += [
        f"- batch 1; max_new_tokens {args['max_new_tokens']}; server flags: "
        + (" ".join(f"`{f}`" for f in extra) if extra else "defaults"),
        "- modes run in an order rotating per prompt; each drafted mode has its "
        "own draftsvc namespace per workload, filled by the warm-up split first",
        "",
    ]
    for name, info in results["workloads"].items():
        source = results["sources"].get(name, {})
        lines += [f"## {name}", "",
                  f"{info['description']}; {info['warmup']} warm-up and "
                  f"{info['measured']} measured prompts"
                  + (f"; source: {source.get('source')} [{source.get('package')}]"
                     if source else ""), "",
                  "| mode | tokens | tok/s | EDL | speedup | decode | accepted "
                  "| p50 ms/token | p99 ms/token | TTFT p50 s | identical |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for mode, s in summary.get(name, {}).items():
            accepted = "-" if s["acceptance"] is None else f"{s['acceptance']:.0%}"
            lines.append(
                f"| {mode} | {s['tokens']} | {s['tokens_per_second']:.1f} | "
                f"{s['edl']:.2f} | {s['speedup']:.2f}x | "
                f"{s['decode_speedup']:.2f}x | {accepted} | "
                f"{s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['ttft_p50_s']:.3f} | "
                f"{s['identical']}/{s['requests']} |")
        lines.append("")
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    else:
        lines += ["Plots skipped: python3-matplotlib is not installed.", ""]
    lines.append("Definitions: see bench/report.py's docstring.")
    return "\n".join(lines) + "\n"


def plot(summary, out_dir):
    """Writes throughput.png and latency.png; their names, or [] without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: python3-matplotlib missing; no plots", file=sys.stderr)
        return []
    names = list(summary)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    width = 0.8 / len(MODES)
    for i, mode in enumerate(MODES):
        xs = [j + (i - 1) * width for j in range(len(names))]
        axes[0].bar(xs, [summary[n].get(mode, {}).get("tokens_per_second", 0)
                         for n in names], width, label=mode)
        axes[1].bar(xs, [summary[n].get(mode, {}).get("edl", 0) for n in names],
                    width, label=mode)
    for ax, title in zip(axes, ("tokens/s (batch 1)", "EDL (tokens per step)")):
        ax.set_xticks(range(len(names)), names)
        ax.set_title(title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "throughput.png"), dpi=100)
    plt.close(fig)

    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.4),
                             squeeze=False)
    for ax, name in zip(axes[0], names):
        for mode in MODES:
            values = sorted(summary[name].get(mode, {}).get("latencies", []))
            if values:
                ax.plot(values, [(k + 1) / len(values) for k in range(len(values))],
                        label=mode)
        ax.set_title(name)
        ax.set_xlabel("ms per token")
    axes[0][0].set_ylabel("fraction of tokens")
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "latency.png"), dpi=100)
    plt.close(fig)
    return ["throughput.png", "latency.png"]


def write(results, out_dir):
    summary = summarize(results["records"])
    plots = plot(summary, out_dir)
    with open(os.path.join(out_dir, "report.md"), "w") as f:
        f.write(markdown(results, summary, plots))


def main(argv):
    if len(argv) != 1:
        sys.exit("usage: bench/report.py RESULTS_JSON")
    with open(argv[0]) as f:
        results = json.load(f)
    write(results, os.path.dirname(os.path.abspath(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
