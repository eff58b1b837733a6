"""Decode-phase tok/s of each drafted mode against plain, per workload, from
bench/run.py --source_modes results (plain and the mode on the same
prompts, same run):

  python3 decode_ratios.py run1/results.json [run2/results.json ...]

Decode phase: output tokens after the first over the seconds after it.
"""
import collections
import json
import sys


def main(paths):
    for path in paths:
        with open(path) as f:
            records = json.load(f)["source_ablation"]["records"]
        agg = collections.defaultdict(lambda: [0, 0.0])
        for r in records:
            a = agg[(r["workload"], r["mode"])]
            a[0] += r["output_tokens"] - 1
            a[1] += r["total_seconds"] - r["ttft_seconds"]
        out = []
        for (workload, mode), (tokens, seconds) in sorted(agg.items()):
            plain = agg.get((workload, "plain"))
            if mode == "plain" or not plain:
                continue
            ratio = (tokens / seconds) / (plain[0] / plain[1])
            out.append(f"{workload} {mode} {ratio:.3f}x")
        print(path, "; ".join(out))


if __name__ == "__main__":
    main(sys.argv[1:])
