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

Other sections, when results.json has them (run.py --concurrency,
--ablations, --peer; the worst case always):
  Concurrency  per client count, drafts off vs trie-hierarchical:
               throughput = all output tokens / wall seconds of the run
               (first request sent to last token), per-token p50/p99 as
               above (queueing included), TTFT p50, and outputs equal to
               plain decoding's at batch 1
  Ablations    per cell, the columns above against the same prompts'
               plain decoding; drafted/step = draft tokens verified per
               decoding step (the scheduler may give fewer than the
               decoding_length asked for); cost = the cell's wall seconds,
               service start and warm-up included. The grid's best cell
               (decode speedup) is the default it suggests
  Worst case   each drafted mode's speedup on the adversarial workload, and
               its worst single prompt, against the 0.95x target (drafts
               may not cost more than 5% where they cannot help)
  Peer         Hugging Face transformers on the same GGUF and prompt ids:
               greedy and prompt lookup decoding, tok/s = output tokens /
               generate() seconds (in-process, prefill included; ours are
               server-side), speedup against the same engine's plain or
               greedy run, and outputs compared with our plain decoding
  llama.cpp    llama.cpp on the same GGUF as shipped (a column named by its
               quant type, e.g. Q4_1 or Q4_K_M) and, when run, dequantized
               (F32), ours beside it, same run, same threads: decode tok/s
               after 64/1000/4000 context tokens (llama-bench tg128 at that
               depth; ours: (output tokens - 1) / (seconds - TTFT) on a
               prompt that long), prompt tok/s (llama-bench pp; ours:
               prompt tokens / TTFT), peak RSS (ours: verifysvc's VmHWM;
               theirs: the processes' ru_maxrss), and request tok/s on the
               peer prompts: output tokens / request seconds (ours
               server-side; theirs llama.cpp's prompt + decode timings, load
               left out), greedy vs prompt lookup (llama-lookup) and ours
               plain vs trie-hierarchical (cold), outputs compared as text
               with our plain decoding. Then:
               forward cost  ms of one forward pass of N tokens after 128
                             in the context, and that / the 1-token pass:
                             ours = verifysvc's start-up measure of one
                             tree-verify pass (every node's logits; its
                             "forward ms by tokens" line, median of 5),
                             llama.cpp = N / tok/s of llama-bench pp N at
                             depth 128 (one batch, the last token's logits;
                             fastest repetition)
               plain decode  per workload, tok/s of the decode phase only:
                             decode tokens / decode seconds summed over the
                             prompts; ours plain (output tokens - 1) /
                             (seconds - TTFT), llama.cpp greedy eval runs /
                             eval seconds (llama-completion's "eval time"),
                             and ours / the file as shipped
"""

import json
import os
import sys
from collections import defaultdict

import ceiling

MODES = ("plain", "trie-hierarchical", "trie-parallel")
# Drafts may cost at most 5% where they cannot help (the adversarial
# workload): speedup >= TARGET.
TARGET = 0.95


def percentile(values, q):
    """Nearest-rank percentile of `values` (q in [0, 100]); 0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n * q / 100)
    return ordered[int(rank) - 1]


def decode_seconds(record):
    return record["total_seconds"] - record["ttft_seconds"]


def group_stats(rs, plain):
    """The table columns over records `rs`, against `plain`'s records of the
    same prompts (speedups)."""
    plain_seconds = sum(r["total_seconds"] for r in plain)
    plain_decode = sum(decode_seconds(r) for r in plain)
    tokens = sum(r["output_tokens"] for r in rs)
    seconds = sum(r["total_seconds"] for r in rs)
    decode = sum(decode_seconds(r) for r in rs)
    drafted = sum(r["draft_tokens"] for r in rs)
    steps = sum(r["decoding_steps"] for r in rs)
    latencies = [x for r in rs for x in r["token_latencies_ms"]]
    return {
        "requests": len(rs), "tokens": tokens,
        "tokens_per_second": tokens / seconds if seconds else 0.0,
        "edl": tokens / max(1, steps),
        "drafted_per_step": drafted / max(1, steps),
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


def summarize(records):
    """{workload: {mode: group_stats}} over the main table's `records`."""
    groups = defaultdict(lambda: defaultdict(list))
    for r in records:
        groups[r["workload"]][r["mode"]].append(r)
    summary = {}
    for workload, by_mode in groups.items():
        plain = by_mode.get("plain", [])
        summary[workload] = {mode: group_stats(by_mode[mode], plain)
                             for mode in MODES if by_mode.get(mode)}
    return summary


def summarize_concurrency(concurrency):
    """[(clients, mode, stats)] of the concurrency sweep; stats as
    group_stats plus throughput (tokens / the run's wall seconds) and
    throughput_speedup (against plain at the same level)."""
    by_run = defaultdict(list)
    for r in concurrency["records"]:
        by_run[(r["concurrency"], r["mode"])].append(r)
    walls = {(run["concurrency"], run["mode"]): run["wall_seconds"]
             for run in concurrency["runs"]}
    rows = []
    for level in concurrency["levels"]:
        plain = by_run.get((level, "plain"), [])
        plain_throughput = None
        for mode in ("plain", "trie-hierarchical"):
            rs = by_run.get((level, mode))
            if not rs:
                continue
            stats = group_stats(rs, plain)
            wall = walls[(level, mode)]
            stats["wall_seconds"] = wall
            stats["throughput"] = stats["tokens"] / wall if wall else 0.0
            if mode == "plain":
                plain_throughput = stats["throughput"]
            stats["throughput_speedup"] = (
                stats["throughput"] / plain_throughput if plain_throughput
                else None)
            rows.append((level, mode, stats))
    return rows


def ablation_rows(ablations, name):
    """[(params, stats, cost seconds)] of ablation table `name`, each cell
    against plain decoding of the same prompts."""
    plain = ablations["plain"]
    return [(cell["params"], group_stats(cell["records"], plain),
             cell["seconds"]) for cell in ablations["tables"][name]["cells"]]


def best_grid_cell(rows):
    """The grid row (params, stats, cost) with the highest decode speedup,
    ties to higher tok/s, then to the smaller decoding_length and
    branch_length (cheaper drafts); None without rows."""
    if not rows:
        return None
    return max(rows, key=lambda row: (
        row[1]["decode_speedup"], row[1]["tokens_per_second"],
        -row[0]["decoding_length"], -row[0]["branch_length"]))


# Two grid cells closer than this (relative decode speedup) are a tie on
# the few prompts an ablation cell runs.
GRID_NOISE = 0.05


def grid_noise_note(best, current, prompts):
    """A sentence saying whether the grid separates its best cell from the
    servers' defaults (`current`, None if not in the grid)."""
    if best is None or current is None:
        return ""
    ratio = best[1]["decode_speedup"] / max(current[1]["decode_speedup"], 1e-9)
    if ratio - 1.0 <= GRID_NOISE:
        return (f" The two are within {GRID_NOISE:.0%} ({ratio:.2f}x), inside "
                f"the noise of {prompts} prompts per cell: this grid gives no "
                "reason to change the defaults.")
    return (f" The best cell leads the defaults by {ratio:.2f}x, beyond "
            f"{GRID_NOISE:.0%}: worth confirming on more prompts before "
            "changing the defaults.")


def prompt_speedups(records):
    """{(workload, mode): [plain seconds / mode seconds, per prompt]} over
    the main table's records."""
    plain = {(r["workload"], r["prompt"]): r["total_seconds"]
             for r in records if r["mode"] == "plain"}
    ratios = defaultdict(list)
    for r in records:
        key = (r["workload"], r["prompt"])
        if r["mode"] != "plain" and key in plain and r["total_seconds"]:
            ratios[(r["workload"], r["mode"])].append(
                plain[key] / r["total_seconds"])
    return ratios


def worst_case(summary, records, target=TARGET, workload="adversarial"):
    """[(mode, speedup, worst prompt's speedup, meets target)] of the drafted
    modes on `workload`; the aggregate speedup must reach `target`."""
    ratios = prompt_speedups(records)
    rows = []
    for mode, stats in summary.get(workload, {}).items():
        if mode == "plain":
            continue
        worst = min(ratios.get((workload, mode), [0.0]))
        rows.append((mode, stats["speedup"], worst, stats["speedup"] >= target))
    return rows


def peer_rows(peer, workload=None):
    """[(engine, stats)] of the peer run (of one workload's prompts, or all):
    tokens, seconds, tok/s, speedup against the same engine's plain/greedy
    run, outputs identical to our plain decoding, and the first
    divergences."""
    by_engine = defaultdict(list)
    for r in peer["records"]:
        if workload is None or r["workload"] == workload:
            by_engine[r["engine"]].append(r)
    base = {"ours": "ours plain", "hf": "hf greedy"}
    rows = []
    for engine, rs in by_engine.items():
        tokens = sum(r["output_tokens"] for r in rs)
        seconds = sum(r["seconds"] for r in rs)
        baseline = sum(r["seconds"] for r in by_engine[base[engine.split()[0]]])
        rows.append((engine, {
            "requests": len(rs), "tokens": tokens,
            "tokens_per_second": tokens / seconds if seconds else 0.0,
            "speedup": baseline / seconds if seconds else 0.0,
            "identical": sum(r["identical"] for r in rs),
            "diverged_at": [r["diverged_at"] for r in rs if not r["identical"]],
        }))
    return rows


def _accepted(stats):
    return "-" if stats["acceptance"] is None else f"{stats['acceptance']:.0%}"


def _params(params):
    return ", ".join(f"{k} {v}" for k, v in params.items())


def header_lines(results):
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
    for mode, curve in results.get("served_cost_curves", {}).items():
        lines.append(f"- {mode}'s verifier after the main run, its cost "
                     "model's forward ms by tokens: `"
                     + ceiling.describe_curve(curve) + "`")
    if "error" in results:
        lines.append(f"- **run failed: {results['error']}**; only the sections "
                     "finished before it are here")
    extra = args.get("verifysvc_flag", []) + args.get("draftsvc_flag", [])
    lines.append("- server flags: " + (" ".join(f"`{f}`" for f in extra)
                                       if extra else "defaults"))
    if results.get("records"):
        lines += [
            f"- workload tables: batch 1, max_new_tokens {args['max_new_tokens']}, "
            + (f"sampled at temperature {args['temperature']} with a seed per "
               "prompt (the adversarial soup at its own 1.5); "
               if args.get("temperature") else "greedy; ")
            + "modes run in an order rotating per prompt; each drafted mode has "
            "its own draftsvc namespace per workload, filled by the warm-up "
            "split first"]
    return lines + [""]


def main_table_lines(results, summary):
    lines = []
    for name, info in results.get("workloads", {}).items():
        if name not in summary:
            continue
        source = results["sources"].get(name, {})
        lines += [f"## {name}", "",
                  f"{info['description']}; {info['warmup']} warm-up and "
                  f"{info['measured']} measured prompts"
                  + (f"; source: {source.get('source')} [{source.get('package')}]"
                     if source else ""), "",
                  "| mode | tokens | tok/s | EDL | speedup | decode | accepted "
                  "| p50 ms/token | p99 ms/token | TTFT p50 s | identical |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for mode, st in summary[name].items():
            lines.append(
                f"| {mode} | {st['tokens']} | {st['tokens_per_second']:.1f} | "
                f"{st['edl']:.2f} | {st['speedup']:.2f}x | "
                f"{st['decode_speedup']:.2f}x | {_accepted(st)} | "
                f"{st['p50_ms']:.1f} | {st['p99_ms']:.1f} | {st['ttft_p50_s']:.3f} | "
                f"{st['identical']}/{st['requests']} |")
        lines.append("")
    return lines


def concurrency_lines(concurrency):
    lines = [
        "## Concurrency", "",
        f"{concurrency['prompts']} requests per run (mixed over the workloads' "
        f"measured prompts), max_new_tokens {concurrency['max_new_tokens']}, "
        "spread over N client threads; drafts off vs trie-hierarchical at the "
        "same N, in an order alternating per level; each drafted run has a "
        f"fresh namespace warmed by {concurrency['warmup']} warm-up requests at "
        "the same N. Throughput = output tokens / the run's wall seconds; "
        "identical = equal to plain decoding at batch 1. "
        f"Cost {concurrency.get('seconds', 0):.0f} s.", "",
        "| clients | mode | tokens | throughput tok/s | vs plain | EDL | "
        "accepted | p50 ms/token | p99 ms/token | TTFT p50 s | identical |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for level, mode, st in summarize_concurrency(concurrency):
        vs = ("-" if st["throughput_speedup"] is None
              else f"{st['throughput_speedup']:.2f}x")
        lines.append(
            f"| {level} | {mode} | {st['tokens']} | {st['throughput']:.1f} | "
            f"{vs} | {st['edl']:.2f} | {_accepted(st)} | {st['p50_ms']:.1f} | "
            f"{st['p99_ms']:.1f} | {st['ttft_p50_s']:.3f} | "
            f"{st['identical']}/{st['requests']} |")
    return lines + [""]


def grid_matrix_lines(rows):
    """Decode speedup (EDL) as a decoding_length x branch_length matrix."""
    decoding = sorted({p["decoding_length"] for p, _, _ in rows})
    branch = sorted({p["branch_length"] for p, _, _ in rows})
    cells = {(p["decoding_length"], p["branch_length"]): st for p, st, _ in rows}
    lines = ["| decoding \\ branch | " + " | ".join(map(str, branch)) + " |",
             "|---:|" + "---:|" * len(branch)]
    for d in decoding:
        lines.append(f"| {d} | " + " | ".join(
            f"{cells[(d, b)]['decode_speedup']:.2f}x ({cells[(d, b)]['edl']:.2f})"
            if (d, b) in cells else "-" for b in branch) + " |")
    return lines


def ablation_lines(ablations):
    defaults = ablations.get("defaults", {})
    lines = [
        "## Ablations", "",
        f"{ablations['prompts']} measured prompts per cell (mixed over the "
        f"workloads), max_new_tokens {ablations['max_new_tokens']}, batch 1, "
        "trie-hierarchical. Each cell has a fresh namespace warmed by "
        f"{ablations['warmup']} warm-up prompts with the cell's settings; "
        "speedups are against plain decoding of the same prompts "
        f"({ablations.get('plain_seconds', 0):.0f} s). Server defaults: "
        + ", ".join(f"{k} {v}" for k, v in defaults.items())
        + f". Total cost {ablations.get('seconds', 0):.0f} s; few prompts, so "
        "differences of a few percent are noise.", ""]
    for name, table in ablations["tables"].items():
        rows = ablation_rows(ablations, name)
        lines += [f"### {name}", "",
                  f"{table['description']}; cost {table['seconds']:.0f} s "
                  "(cells shared with an earlier table cost 0 here).", "",
                  "| setting | tok/s | speedup | decode | EDL | drafted/step | "
                  "accepted | p99 ms/token | identical | cost s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for params, st, cost in rows:
            lines.append(
                f"| {_params(params)} | {st['tokens_per_second']:.1f} | "
                f"{st['speedup']:.2f}x | {st['decode_speedup']:.2f}x | "
                f"{st['edl']:.2f} | {st['drafted_per_step']:.1f} | "
                f"{_accepted(st)} | {st['p99_ms']:.1f} | "
                f"{st['identical']}/{st['requests']} | {cost:.0f} |")
        lines.append("")
        if name == "grid" and rows:
            lines += ["Decode speedup (EDL) by decoding_length (rows) and "
                      "branch_length (columns):", ""]
            lines += grid_matrix_lines(rows) + [""]
            best = best_grid_cell(rows)
            current = next((row for row in rows if
                            str(row[0]["decoding_length"]) == str(defaults.get("decoding_length"))
                            and str(row[0]["branch_length"]) == str(defaults.get("branch_length"))),
                           None)
            lines.append(
                f"Defaults from the grid: decoding_length "
                f"{best[0]['decoding_length']}, branch_length "
                f"{best[0]['branch_length']} has the best decode speedup "
                f"({best[1]['decode_speedup']:.2f}x, {best[1]['tokens_per_second']:.1f} "
                "tok/s)" + (
                    f"; the servers' defaults ({defaults.get('decoding_length')}, "
                    f"{defaults.get('branch_length')}) give "
                    f"{current[1]['decode_speedup']:.2f}x" if current else
                    f"; the servers' defaults ({defaults.get('decoding_length')}, "
                    f"{defaults.get('branch_length')}) are not in the grid")
                + "." + grid_noise_note(best, current,
                                        ablations.get("prompts")))
            lines.append("")
    lines += ["Hierarchical vs parallel draft trees (the paper's ablation): "
              "the main tables' trie-hierarchical and trie-parallel rows.", ""]
    return lines


def worst_case_lines(summary, records):
    rows = worst_case(summary, records)
    if not rows:
        return ["## Worst case", "", "No adversarial workload in this run.", ""]
    prompts = summary["adversarial"]["plain"]["requests"] \
        if "plain" in summary["adversarial"] else 0
    lines = ["## Worst case: adversarial vs the 0.95x target", "",
             "Drafts that cannot help must cost at most 5%: speedup (plain "
             "seconds / drafted seconds, summed over the "
             f"{prompts} measured prompts) >= {TARGET:.2f}x. Worst prompt = "
             "the lowest single-prompt ratio (noisier).", "",
             "| mode | speedup | worst prompt | target |",
             "|---|---:|---:|---|"]
    for mode, speedup, worst, meets in rows:
        lines.append(f"| {mode} | {speedup:.2f}x | {worst:.2f}x | "
                     + ("met" if meets else "**NOT met**") + " |")
    others = [(w, m, st["speedup"]) for w, by_mode in summary.items()
              for m, st in by_mode.items() if m != "plain"]
    if others:
        w, m, sp = min(others, key=lambda x: x[2])
        lines += ["", f"Lowest speedup of any workload: {w} {m}, {sp:.2f}x."]
    return lines + [""]


def peer_lines(peer):
    lines = [
        "## Peer: Hugging Face transformers", "",
        f"transformers {peer['transformers']}, torch {peer['torch']}, "
        f"{peer['threads']} threads, the same GGUF dequantized to float32 "
        f"(loaded in {peer['load_seconds']:.0f} s); the same prompt token ids "
        f"(our Tokenize RPC), max_new_tokens {peer['max_new_tokens']}, one "
        "request at a time. hf prompt lookup = generate(prompt_lookup_num_tokens="
        f"{peer['prompt_lookup_num_tokens']}). Ours trie-hierarchical runs with a "
        "fresh namespace per request (drafts from the prompt and its own "
        "output only, as prompt lookup). Our seconds are server-side, "
        "theirs generate()'s; each speedup is against the same engine's "
        "plain/greedy run. Identical = equal to our plain decoding; near "
        "ties can flip between two float32 implementations, so HF "
        f"mismatches are reported, not failed. Cost {peer.get('seconds', 0):.0f} s.",
        "",
        "| engine | requests | tokens | tok/s | speedup | identical to ours "
        "| first divergences |",
        "|---|---:|---:|---:|---:|---:|---|"]
    for engine, st in peer_rows(peer):
        lines.append(
            f"| {engine} | {st['requests']} | {st['tokens']} | "
            f"{st['tokens_per_second']:.1f} | {st['speedup']:.2f}x | "
            f"{st['identical']}/{st['requests']} | "
            + (", ".join(map(str, st["diverged_at"])) or "-") + " |")
    workloads = list(dict.fromkeys(r["workload"] for r in peer["records"]))
    lines += ["", "By workload (speedup over the same engine's plain run, "
              "tok/s in brackets; few prompts each):", "",
              "| workload | prompts | ours trie (cold) | hf prompt lookup | "
              "ours beats hf |", "|---|---:|---:|---:|---|"]
    for w in workloads:
        st = dict(peer_rows(peer, w))
        ours = st.get("ours trie-hierarchical (cold)")
        hf = st.get("hf prompt lookup")
        if not ours or not hf:
            continue
        lines.append(
            f"| {w} | {ours['requests']} | {ours['speedup']:.2f}x "
            f"({ours['tokens_per_second']:.1f}) | {hf['speedup']:.2f}x "
            f"({hf['tokens_per_second']:.1f}) | "
            + ("yes" if ours["speedup"] > hf["speedup"] else "no") + " |")
    return lines + [""]


def llamacpp_models(section):
    """The llama.cpp section's model labels in column order: the served
    file's first (its quant type), then its F32 copy if it ran."""
    return [m for m in section.get("models", {}) if m in section["bench"]]


def bench_row(rows, kind, size):
    """The speed row (llama-bench's or ours) of `kind` "tg" at context depth
    `size`, or "pp" of `size` prompt tokens; None if absent."""
    for row in rows:
        if kind == "tg" and row["n_gen"] and not row["n_prompt"] \
                and row["n_depth"] == size:
            return row
        if kind == "pp" and row["n_prompt"] == size and not row["n_gen"]:
            return row
    return None


def _rate(row):
    """A speed row as "mean ± sd" tok/s, "n/a" when skipped or absent."""
    if row is None or row.get("skipped"):
        return "n/a"
    samples = row.get("samples") or []
    if len(samples) > 1:
        mean = sum(samples) / len(samples)
        sd = (sum((x - mean) ** 2 for x in samples) / (len(samples) - 1)) ** 0.5
        return f"{row['tokens_per_second']:.1f} ± {sd:.1f}"
    return f"{row['tokens_per_second']:.1f}"


def llamacpp_request_stats(section, workload=None):
    """{engine: stats} over the llama.cpp section's request records (of one
    workload, or all): requests, tokens, tok/s (summed tokens / summed
    seconds), decode tok/s (summed decode_tokens / summed decode_seconds
    of the records that have them; None without), outputs identical to
    our plain decoding, prompts tokenized as ours, lookup's acceptance and
    outputs equal to its own greedy's."""
    by_engine = defaultdict(list)
    for r in section["records"]:
        if workload is None or r["workload"] == workload:
            by_engine[r["engine"]].append(r)
    stats = {}
    for engine, rs in by_engine.items():
        tokens = sum(r["output_tokens"] for r in rs)
        seconds = sum(r["seconds"] for r in rs)
        drafted = sum(r.get("drafted") or 0 for r in rs)
        decoded = [r for r in rs if r.get("decode_seconds") is not None]
        decode_seconds = sum(r["decode_seconds"] for r in decoded)
        stats[engine] = {
            "requests": len(rs), "tokens": tokens,
            "tokens_per_second": tokens / seconds if seconds else 0.0,
            "decode_tokens_per_second": (
                sum(r["decode_tokens"] for r in decoded) / decode_seconds
                if decode_seconds > 0 else None),
            "identical": sum(r["identical"] for r in rs),
            "prompt_identical": sum(r.get("prompt_identical", False) for r in rs),
            "same_as_greedy": sum(r.get("same_as_greedy", False) for r in rs),
            "acceptance": (sum(r.get("accepted") or 0 for r in rs) / drafted
                           if drafted else None),
            "peak_rss": max((r.get("peak_rss") or 0 for r in rs), default=0),
        }
    return stats


def _mib(n):
    return f"{n / 2 ** 20:.0f}" if n else "n/a"


def llamacpp_comparison_rows(section):
    """[(measure, ours, llama.cpp per llamacpp_models)] of the section's
    main table, formatted."""
    ours_rows = section["ours_bench"]
    bench = section["bench"]
    models = llamacpp_models(section)
    rows = []
    for depth in sorted({r["n_depth"] for r in ours_rows if r["n_gen"]}
                        | {r["n_depth"] for m in models
                           for r in bench[m]["rows"] if r["n_gen"]}):
        rows.append((f"decode tok/s, context {depth}",
                     _rate(bench_row(ours_rows, "tg", depth)),
                     *[_rate(bench_row(bench[m]["rows"], "tg", depth))
                       for m in models]))
    for size in sorted({r["n_prompt"] for r in ours_rows if not r["n_gen"]}
                       | {r["n_prompt"] for m in models
                          for r in bench[m]["rows"] if not r["n_gen"]}):
        rows.append((f"prompt tok/s, {size} tokens",
                     _rate(bench_row(ours_rows, "pp", size)),
                     *[_rate(bench_row(bench[m]["rows"], "pp", size))
                       for m in models]))
    stats = llamacpp_request_stats(section)
    get = lambda engine, key, fmt: (  # noqa: E731
        fmt(stats[engine][key]) if engine in stats else "n/a")
    rows.append((f"peak RSS MiB, requests (-c {section['context']})",
                 _mib(section.get("ours_peak_rss")),
                 *[_mib(max((st["peak_rss"] for engine, st in stats.items()
                             if engine.startswith(f"llama.cpp {m} ")),
                            default=0)) for m in models]))
    rows.append(("peak RSS MiB, llama-bench", "-",
                 *[_mib(bench[m]["peak_rss"]) for m in models]))
    rate = lambda x: f"{x:.1f}"  # noqa: E731
    rows.append(("request tok/s, plain / greedy",
                 get("ours plain", "tokens_per_second", rate),
                 *[get(f"llama.cpp {m} greedy", "tokens_per_second", rate)
                   for m in models]))
    rows.append(("request tok/s, trie-hierarchical (cold) / prompt lookup",
                 get("ours trie-hierarchical (cold)", "tokens_per_second", rate),
                 *[get(f"llama.cpp {m} lookup", "tokens_per_second", rate)
                   for m in models]))
    for kind in section.get("speculative") or []:
        rows.append((f"request tok/s, {kind} ({section['draft_model']})", "-",
                     *[get(f"llama.cpp {m} {kind}", "tokens_per_second", rate)
                       for m in models]))
    best = best_llamacpp_mode(section)
    if best:
        ours = stats.get("ours trie-hierarchical (cold)", {}).get(
            "tokens_per_second")
        rows.append(("ours drafted / llama.cpp's best mode "
                     f"({best[0]}, {best[1]:.1f} tok/s)",
                     f"{ours / best[1]:.2f}x" if ours else "n/a",
                     *["-" for _ in models]))
    share = lambda engine, key: (  # noqa: E731
        f"{stats[engine][key]}/{stats[engine]['requests']}"
        if engine in stats else "n/a")
    rows.append(("outputs = our plain decoding's (ours: trie's)",
                 share("ours trie-hierarchical (cold)", "identical"),
                 *[share(f"llama.cpp {m} greedy", "identical") for m in models]))
    rows.append(("prompt token ids = ours", "-",
                 *[share(f"llama.cpp {m} greedy", "prompt_identical")
                   for m in models]))
    rows.append(("prompt lookup output = own greedy's", "-",
                 *[share(f"llama.cpp {m} lookup", "same_as_greedy")
                   for m in models]))
    return rows


def llamacpp_engines(section):
    """The llama.cpp request engines of the section, in report order (the
    speculative kinds ran on the served file, the first model, alone)."""
    models = llamacpp_models(section)
    speculative = list(section.get("speculative") or [])
    return [f"llama.cpp {m} {k}" for i, m in enumerate(models)
            for k in ["greedy", "lookup"] + (speculative if i == 0 else [])]


def best_llamacpp_mode(section):
    """(engine, request tok/s) of the fastest llama.cpp mode over all the
    section's requests, or None without llama.cpp records."""
    stats = llamacpp_request_stats(section)
    rates = [(e, stats[e]["tokens_per_second"])
             for e in llamacpp_engines(section) if e in stats]
    return max(rates, key=lambda r: r[1]) if rates else None


def llamacpp_decode_rows(section):
    """[(workload, prompts, ours plain, llama.cpp greedy per
    llamacpp_models..., ours / the first of them)] of plain decoding's
    decode-phase tok/s, a row per workload and one over "all"; None where
    an engine has none."""
    models = llamacpp_models(section)
    rows = []
    for w in list(dict.fromkeys(r["workload"] for r in section["records"])) \
            + [None]:
        st = llamacpp_request_stats(section, w)
        rate = lambda engine: st.get(engine, {}).get(  # noqa: E731
            "decode_tokens_per_second")
        ours = rate("ours plain")
        theirs = [rate(f"llama.cpp {m} greedy") for m in models]
        served = theirs[0] if theirs else None
        rows.append((w or "all", st.get("ours plain", {}).get("requests", 0),
                     ours, *theirs,
                     ours / served if ours and served else None))
    return rows


def llamacpp_forward_lines(section):
    """The forward-cost curve's table (ms per pass and relative to 1 token,
    ours and each model), or [] without it."""
    rows = section.get("forward_cost") or []
    if not any(row["ms"] for row in rows):
        return []
    engines = ["ours"] + llamacpp_models(section)
    depth = section.get("forward_depth", {})
    context = depth.get("ours", 128)
    other = ", ".join(f"llama.cpp {e} after {depth[e]}" for e in engines[1:]
                      if depth.get(e) is not None and depth[e] != context)
    lines = [
        "Forward cost by tokens per pass (the critical decoding length: a "
        "step verifies that many tree tokens in one pass). Ours: one "
        f"tree-verify forward pass of N tokens after {context} cached "
        "tokens, every node's logits, measured by verifysvc at start (its "
        "`forward ms by tokens` line: median of 5 after a warm-up, before "
        "any request). llama.cpp: one batch of N prompt tokens after "
        f"{context} in the context (llama-bench pp N -d {context}; only the "
        "last token's logits), ms = N / tok/s of the fastest repetition"
        + (f" ({other}: this llama-bench has no -d)" if other else "")
        + ". x1 = ms / the same engine's 1-token pass: what a wider tree "
        "costs.", "",
        "| tokens | " + " | ".join(
            f"{'ours' if e == 'ours' else 'llama.cpp ' + e} ms | x1"
            for e in engines) + " |",
        "|---:|" + "---:|---:|" * len(engines)]
    for row in rows:
        cells = []
        for e in engines:
            ms, rel = row["ms"].get(e), row["relative"].get(e)
            cells += ["n/a" if ms is None else f"{ms:.1f}",
                      "n/a" if rel is None else f"{rel:.2f}"]
        lines.append(f"| {row['tokens']} | " + " | ".join(cells) + " |")
    return lines + [""]


def llamacpp_decode_lines(section):
    """The plain decode table by workload, or [] without decode rates."""
    rows = llamacpp_decode_rows(section)
    if not any(any(rates[2:-1]) for rates in rows):
        return []
    models = llamacpp_models(section)
    served = models[0]
    fmt = lambda x: "n/a" if x is None else f"{x:.1f}"  # noqa: E731
    lines = [
        "Plain decode by workload: tok/s of decoding, prompt time excluded "
        "(decode tokens / decode seconds, summed over the prompts). Ours: "
        "plain (drafts off), (output tokens - 1) / (request seconds - "
        "TTFT), server-side; llama.cpp: greedy llama-completion, eval runs "
        "/ eval seconds of its own timings (sampling excluded). ours / "
        f"{served} >= 1.00 is issue 14's target.", "",
        "| workload | prompts | ours plain | " + " | ".join(
            f"llama.cpp {m} greedy" for m in models)
        + f" | ours / {served} |",
        "|---|---:|---:|" + "---:|" * len(models) + "---:|"]
    for w, prompts, ours, *theirs, ratio in rows:
        lines.append(f"| {w} | {prompts} | {fmt(ours)} | "
                     + " | ".join(fmt(x) for x in theirs) + " | "
                     + ("n/a" if ratio is None else f"{ratio:.2f}x") + " |")
    return lines + [""]


def llamacpp_lines(section):
    models = llamacpp_models(section)
    served = models[0]
    drafts = sorted({r["n_draft"] for r in section["records"]
                     if r.get("n_draft") is not None})
    cached = max((r.get("cached_prompt_tokens") or 0
                  for r in section["ours_bench"]), default=0)
    lines = [
        "## Peer: llama.cpp", "",
        f"{section['version']}; `-t {section['threads']}`; the same GGUF "
        "(" + (f"{section['model_name']}, " if section.get("model_name")
               else "")
        + f"{section['models'][served]}, run as {served} by llama.cpp's "
        "quantized kernels"
        + (") and its F32 copy (llama-quantize --allow-requantize: the same "
           "weights without llama.cpp's quantized kernels)"
           if "F32" in models[1:] else ")" if served == "F32" else
           "; no F32 copy: bench/run.py --llamacpp_f32=on makes one)")
        + ". Speeds: mean ± sd over "
        f"{section['repetitions']} runs, decode = "
        f"{section['decode_tokens']} tokens after that many context tokens "
        "(llama-bench -d; ours: a tokens= prompt of real text that long, "
        "drafts off, (output tokens - 1) / (seconds - TTFT)), prompt = "
        "llama-bench pp (ours: prompt tokens / TTFT; each repetition's "
        "prompt a different rotation of the text, so that the prefix cache "
        "serves none of it"
        + (f", yet up to {cached} tokens came from it" if cached else "")
        + "); n/a = past verifysvc's "
        f"--max_context_tokens ({section['context_limit']}). Requests: the "
        f"{len({(r['workload'], r['prompt']) for r in section['records']})} "
        "peer prompts ("
        + (f"{section['peer_prompts']} per workload, " if "peer_prompts"
           in section else "")
        + "with text: token soup has none), their text from our Detokenize "
        f"RPC, max_new_tokens {section['max_new_tokens']}, greedy; tok/s = "
        "output tokens / request seconds (ours server-side, llama.cpp's "
        "prompt + decode timings, model load left out); prompt lookup = "
        "llama-lookup (n-grams of the request only"
        + (f", its default n_draft {drafts[0]}" if len(drafts) == 1 else "")
        + ("" if section.get("lookup") else "; not in this version")
        + "), ours trie-hierarchical with a fresh namespace"
        + (f" (with draftsvc's sources: an --assistant_model drafts too); "
           f"{' and '.join('llama-' + k for k in section['speculative'])} "
           f"draft with {section['draft_model']} (llama.cpp's default draft "
           "size, the models one after the other on the same threads)"
           if section.get("speculative") else "")
        + ". Outputs are "
        "compared as text with ours; near ties can flip between "
        "implementations, so differences are reported, not failed. "
        f"Cost {section.get('seconds', 0):.0f} s.", "",
        "| measure | ours | " + " | ".join(f"llama.cpp {m}" for m in models)
        + " |", "|---|---:|" + "---:|" * len(models)]
    for row in llamacpp_comparison_rows(section):
        lines.append("| " + " | ".join(row) + " |")
    engines = [("ours plain", "ours plain"),
               ("ours trie-hierarchical (cold)", "ours trie (cold)")] + [
        (e, e[len("llama.cpp "):]) for e in llamacpp_engines(section)]
    lines += [""] + llamacpp_forward_lines(section)
    lines += llamacpp_decode_lines(section)
    trie = [r for r in section["records"]
            if r["engine"] == "ours trie-hierarchical (cold)"
            and r.get("prompt_tokens")]
    reused = (sum(r["cached_prompt_tokens"] for r in trie)
              / sum(r["prompt_tokens"] for r in trie)) if trie else 0.0
    lines += ["Request tok/s by workload (whole requests, prompt included"
              + (f"; ours trie (cold) runs right after ours plain on the "
                 f"same prompt, and {reused:.0%} of its prompt tokens came "
                 "from the prefix cache" if reused else "") + "):", "",
              "| workload | prompts | " + " | ".join(t for _, t in engines)
              + " |", "|---|---:|" + "---:|" * len(engines)]
    for w in dict.fromkeys(r["workload"] for r in section["records"]):
        st = llamacpp_request_stats(section, w)
        lines.append(
            f"| {w} | {st['ours plain']['requests']} | " + " | ".join(
                f"{st[e]['tokens_per_second']:.1f}" if e in st else "n/a"
                for e, _ in engines) + " |")
    stats = llamacpp_request_stats(section)
    accept = [f"{e[len('llama.cpp '):]} {stats[e]['acceptance']:.0%}"
              for e in llamacpp_engines(section)
              if e in stats and stats[e]["acceptance"] is not None]
    if accept:
        lines += ["", "llama.cpp draft acceptance (accepted / drafted): "
                  + ", ".join(accept) + "."]
    for engine, error in sorted(section.get("errors", {}).items()):
        lines += ["", f"{engine} failed (its requests are left out): "
                  f"`{error.splitlines()[-1] if error else ''}`"]
    return lines + [""]


def source_ablation_lines(section):
    """The draft-source ablation (run.py --source_modes): per workload and
    mode, EDL, tok/s, speedup over plain on the same prompts, and each
    source's accepted/verified draft tokens (a node several sources proposed
    counts for each)."""
    w, n, g = section.get("jacobi_window", (0, 0, 0))
    lines = ["## Draft sources", "",
             "Each mode is a DraftParams.sources choice (bench/harness.py "
             "SOURCE_MODES): trie = the prompt and output tries, ngram = the "
             "n-gram pool from recycled predictions, jacobi = the pool with a "
             f"Jacobi window W={w} N={n} G={g}, assistant = draftsvc's "
             "assistant model, default = trie and ngram (draftsvc's default "
             "sources), local = the verifier's defaults (with no draftsvc: "
             "the sequence's own text and recycled predictions), assisted = "
             "trie, ngram and assistant, mixed = all of them; only jacobi and "
             "mixed run the window, the others ask for none (W=0). Speedup: "
             "plain's summed "
             "seconds over the mode's on the same prompts.", ""]
    groups = defaultdict(lambda: defaultdict(list))
    for r in section.get("records", []):
        groups[r["workload"]][r["mode"]].append(r)
    for name, by_mode in groups.items():
        plain = by_mode.get("plain", [])
        lines += [f"### {name}", "",
                  "| mode | tokens | tok/s | EDL | speedup | identical | "
                  "accepted/verified per source |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | --- |"]
        for mode in section.get("modes", []):
            rs = by_mode.get(mode)
            if not rs:
                continue
            st = group_stats(rs, [p for p in plain
                                  if p["prompt"] in {r["prompt"] for r in rs}])
            per_source = defaultdict(lambda: [0, 0])
            for r in rs:
                for source, (drafted, accepted) in r.get("sources", {}).items():
                    per_source[source][0] += drafted
                    per_source[source][1] += accepted
            cells = ", ".join(
                f"{source} {a}/{d} ({a / d:.0%})" if d else f"{source} 0/0"
                for source, (d, a) in sorted(per_source.items())) or "-"
            lines.append(
                f"| {mode} | {st['tokens']} | {st['tokens_per_second']:.1f} | "
                f"{st['edl']:.2f} | {st['speedup']:.2f}x | "
                f"{st['identical']}/{st['requests']} | {cells} |")
        for mode, error in section.get("errors", {}).get(name, {}).items():
            lines.append(f"| {mode} | failed: {error} | | | | | |")
        lines.append("")
    return lines


def ceiling_lines(section, results):
    """run.py --ceiling: per workload, the EDL drafts made of seen text
    reach at best (ceiling.py), beside the source ablation's measured EDL
    of the trie and default modes when the same run has it."""
    curve = ceiling.cost_curve(results.get("verifysvc_log"))
    served = results.get("served_cost_curves", {}).get(
        ceiling.SERVED_CURVE_MODE, {})
    lines = ["## EDL ceilings of drafts made of seen text", "",
             "Plain decoding's outputs, drafted by a simulated drafter that "
             "knows them, at most "
             f"{section['max_draft']} tokens a step (bench/ceiling.py): "
             "pairs = every drafted token follows its predecessor somewhere "
             "in the seen text (no trie or n-gram pool over that text "
             "accepts more), copy = one earlier occurrence continued "
             "verbatim (a trie path at best), suffix = the longest-suffix "
             "match's continuation (prompt-lookup drafting). session: the "
             "prompt and the output so far; namespace: also the warm-up and "
             "earlier prompts and outputs. Speedup bound: each step charged "
             "the startup cost curve's pass over exactly the accepted tokens "
             "+ 1. replay: a fresh draftsvc's own prompt and output trie "
             "trees of that many nodes, stepped through the same outputs "
             "after the same warm-up, accepted as far as their best branch "
             "matches (the trie's tree quality without the verifier's "
             "pacing, trimming and deadlines; its bound charges exactly the "
             "accepted tokens + 1, not the tree). cut by score: the same "
             "replay of the verifier's draft_ask_tokens tree, cut where its "
             "node scores say it stops paying on the cost curve (the "
             "verifier's own rule), charged for what it keeps: the value of "
             "the scores, without the round trip and the pacing. measured: "
             "the source "
             "ablation's EDL on the same prompts." + ("" if curve else " (No cost curve in this run.)")
             + (" served curve: the same cut and charge on the cost model "
                f"the {ceiling.SERVED_CURVE_MODE} mode's verifier held after "
                "the main run (its startup curve kept current from the "
                "passes it served, the lookahead_step_cost_seconds gauges): "
                + ceiling.describe_curve(served)
                + " ms." if served else ""), ""]
    measured = defaultdict(dict)
    for r in results.get("source_ablation", {}).get("records", []):
        cell = measured[r["workload"]].setdefault(r["mode"], [0, 0])
        cell[0] += r["output_tokens"]
        cell[1] += r["decoding_steps"]
    rows = ceiling.summary_rows(section, curve)
    for workload in dict.fromkeys(r["workload"] for r in rows):
        lines += [f"### {workload}", "",
                  "| scope | drafter | steps | EDL | speedup bound |",
                  "| --- | --- | ---: | ---: | ---: |"]
        for r in rows:
            if r["workload"] != workload:
                continue
            bound = (f"{r['speedup_bound']:.2f}x"
                     if r["speedup_bound"] is not None else "-")
            lines.append(f"| {r['scope']} | {r['policy']} | {r['steps']} | "
                         f"{r['edl']:.2f} | {bound} |")
        replayed = section.get("replay", {}).get(workload, {})
        for budget, lengths in replayed.items():
            accepted = [a for per_prompt in lengths for a in per_prompt]
            if not accepted:
                continue
            bound = ceiling.speedup_bound(accepted, curve)
            tokens = sum(a + 1 for a in accepted)
            # Verifying every tree whole instead: budget + 1 rows a step.
            whole = (tokens * ceiling.forward_ms(curve, 1) / len(accepted) /
                     ceiling.forward_ms(curve, int(budget) + 1)
                     if curve else None)
            lines.append(
                f"| replay | draftsvc trie, {budget} nodes | {len(accepted)} | "
                f"{tokens / len(accepted):.2f} | "
                + (f"{bound:.2f}x ({whole:.2f}x verifying whole trees) |"
                   if bound is not None else "- |"))
        for key, cut_curve, how in (
                ("trimmed", curve, "cut by score"),
                ("trimmed_served", served, "cut by score, served curve")):
            trimmed = section.get(key, {}).get(workload, {})
            for budget, lengths in trimmed.items():
                steps = [tuple(s) for per_prompt in lengths
                         for s in per_prompt]
                if not steps or not cut_curve:
                    continue
                edl, kept, speedup = ceiling.trimmed_summary(steps, cut_curve)
                lines.append(
                    f"| replay | {budget} nodes {how} | {len(steps)} | "
                    f"{edl:.2f} | {speedup:.2f}x ({kept:.1f} kept a step) |")
        for mode in ("trie", "default", "mixed"):
            tokens, steps = measured[workload].get(mode, (0, 0))
            if steps:
                lines.append(f"| measured | {mode} mode | {steps} | "
                             f"{tokens / steps:.2f} | |")
        lines.append("")
    return lines


def split_cores_lines(shared, split):
    """The drafted source modes with draftsvc and verifysvc on one core each
    (run.py --split_cores), against plain decoding on both cores (the first
    draft-source table's plain records of the same prompts)."""
    lines = ["## Draft sources, split cores", "",
             f"draftsvc pinned to CPU {split.get('draftsvc_cpus')}, "
             f"verifysvc to CPU {split.get('verifysvc_cpus')} "
             f"({' '.join(split.get('verifysvc_flags', []))}). Speedup: "
             "plain decoding on BOTH cores (the table above) over the mode "
             "here, same prompts; plain (1 core) is the verifier alone on "
             "its core.", ""]
    shared_plain = defaultdict(list)
    for r in shared.get("records", []):
        if r["mode"] == "plain":
            shared_plain[r["workload"]].append(r)
    groups = defaultdict(lambda: defaultdict(list))
    for r in split.get("records", []):
        groups[r["workload"]][r["mode"]].append(r)
    for name, by_mode in groups.items():
        lines += [f"### {name}", "",
                  "| mode | tok/s | EDL | speedup vs plain on 2 cores | "
                  "identical |", "| --- | ---: | ---: | ---: | ---: |"]
        for mode in split.get("modes", []):
            rs = by_mode.get(mode)
            if not rs:
                continue
            prompts = {r["prompt"] for r in rs}
            st = group_stats(rs, [p for p in shared_plain[name]
                                  if p["prompt"] in prompts])
            label = "plain (1 core)" if mode == "plain" else mode
            lines.append(f"| {label} | {st['tokens_per_second']:.1f} | "
                         f"{st['edl']:.2f} | {st['speedup']:.2f}x | "
                         f"{st['identical']}/{st['requests']} |")
        for mode, error in split.get("errors", {}).get(name, {}).items():
            lines.append(f"| {mode} | failed: {error} | | | |")
        lines.append("")
    return lines


def markdown(results, summary, plots):
    records = results.get("records", [])
    lines = header_lines(results) + main_table_lines(results, summary)
    if "concurrency" in results:
        lines += concurrency_lines(results["concurrency"])
    if "ablations" in results:
        lines += ablation_lines(results["ablations"])
    if "source_ablation" in results:
        lines += source_ablation_lines(results["source_ablation"])
    if "source_ablation_split" in results:
        lines += split_cores_lines(results.get("source_ablation", {}),
                                   results["source_ablation_split"])
    if "ceiling" in results:
        lines += ceiling_lines(results["ceiling"], results)
    if summary:
        lines += worst_case_lines(summary, records)
    if "peer" in results:
        lines += peer_lines(results["peer"])
    if "llamacpp" in results:
        lines += llamacpp_lines(results["llamacpp"])
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    elif summary or "concurrency" in results:
        lines += ["Plots skipped: python3-matplotlib is not installed.", ""]
    lines.append("Definitions: see bench/report.py's docstring.")
    return "\n".join(lines) + "\n"


def plot(summary, out_dir, concurrency=None, records=(), ablations=None):
    """Writes throughput.png, latency.png (per-token latency CDF) and edl.png
    (per-request EDL distribution) for the main table, concurrency.png for
    the sweep, grid.png (decode speedup vs decoding length) for the grid;
    their names, or [] without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: python3-matplotlib missing; no plots", file=sys.stderr)
        return []
    written = []
    if summary:
        plot_main(plt, summary, out_dir)
        plot_edl(plt, records, out_dir)
        written += ["throughput.png", "latency.png", "edl.png"]
    if ablations and ablation_rows(ablations, "grid"):
        plot_grid(plt, ablation_rows(ablations, "grid"), out_dir)
        written.append("grid.png")
    if concurrency:
        plot_concurrency(plt, concurrency, out_dir)
        written.append("concurrency.png")
    return written


def plot_main(plt, summary, out_dir):
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


def plot_edl(plt, records, out_dir):
    """Per-request EDL (output tokens / steps) of the drafted modes, one box
    per workload and mode."""
    by_key = defaultdict(list)
    for r in records:
        if r["mode"] != "plain" and r.get("decoding_steps"):
            by_key[(r["workload"], r["mode"])].append(
                r["output_tokens"] / r["decoding_steps"])
    keys = sorted(by_key)
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(keys)), 4))
    ax.boxplot([by_key[k] for k in keys], whis=(0, 100))
    ax.set_xticks(range(1, len(keys) + 1),
                  [f"{w}\n{m.replace('trie-', '')}" for w, m in keys],
                  fontsize="small")
    ax.set_ylabel("EDL per request")
    ax.set_title("EDL distribution (box: quartiles, whiskers: min/max)")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "edl.png"), dpi=100)
    plt.close(fig)


def plot_grid(plt, rows, out_dir):
    """Decode speedup vs decoding_length, one line per branch_length."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for branch in sorted({p["branch_length"] for p, _, _ in rows}):
        points = sorted((p["decoding_length"], st["decode_speedup"])
                        for p, st, _ in rows if p["branch_length"] == branch)
        ax.plot([d for d, _ in points], [v for _, v in points], "o-",
                label=f"branch_length {branch}")
    ax.set_xscale("log", base=2)
    decoding = sorted({p["decoding_length"] for p, _, _ in rows})
    ax.set_xticks(decoding, decoding)
    ax.set_xlabel("decoding_length (draft tokens per step, at most)")
    ax.set_ylabel("decode speedup vs plain")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "grid.png"), dpi=100)
    plt.close(fig)


def plot_concurrency(plt, concurrency, out_dir):
    rows = summarize_concurrency(concurrency)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for mode, color in (("plain", "C0"), ("trie-hierarchical", "C1")):
        points = [(level, st) for level, m, st in rows if m == mode]
        levels = [level for level, _ in points]
        axes[0].plot(levels, [st["throughput"] for _, st in points], "o-",
                     color=color, label=mode)
        axes[1].plot(levels, [st["p50_ms"] for _, st in points], "o-",
                     color=color, label=f"{mode} p50")
        axes[1].plot(levels, [st["p99_ms"] for _, st in points], "s--",
                     color=color, label=f"{mode} p99")
    axes[0].set_title("throughput, tokens/s")
    axes[1].set_title("per-token latency, ms")
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrency["levels"], concurrency["levels"])
        ax.set_xlabel("concurrent clients")
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "concurrency.png"), dpi=100)
    plt.close(fig)


def write(results, out_dir):
    summary = summarize(results.get("records", []))
    plots = plot(summary, out_dir, results.get("concurrency"),
                 results.get("records", []), results.get("ablations"))
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
