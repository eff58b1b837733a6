"""EDL of the two drafted main modes split by which ran first on each
prompt, from a tools/bench.sh results.json:

  python3 order_edl.py shared_verifier/results.json

A mode that drafts from what another mode's run of the same prompt taught
the verifier shows a higher EDL when it runs second.
"""
import collections
import json
import sys


def main(path):
    with open(path) as f:
        records = json.load(f)["records"]
    by_prompt = collections.defaultdict(dict)
    for r in records:
        by_prompt[(r["workload"], r["prompt"])][r["mode"]] = r
    tally = collections.defaultdict(lambda: [0, 0, 0])
    for (workload, _), modes in by_prompt.items():
        h, p = modes["trie-hierarchical"], modes["trie-parallel"]
        for name, r, second in (("hierarchical", h, h["position"] > p["position"]),
                                ("parallel", p, p["position"] > h["position"])):
            t = tally[(workload, name, "second" if second else "first")]
            t[0] += r["output_tokens"]
            t[1] += r["decoding_steps"]
            t[2] += 1
    print("| workload | mode | ran first: EDL (prompts) | ran second: EDL (prompts) |")
    print("|---|---|---:|---:|")
    for workload in sorted({k[0] for k in tally}):
        for name in ("hierarchical", "parallel"):
            cells = []
            for when in ("first", "second"):
                t = tally[(workload, name, when)]
                cells.append(f"{t[0] / t[1]:.2f} ({t[2]})" if t[1] else "-")
            print(f"| {workload} | {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main(sys.argv[1])
