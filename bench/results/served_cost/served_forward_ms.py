#!/usr/bin/env python3
"""Served forward cost by tokens in the pass, from verifysvc logs.

Reads verifysvc logs written with --log_every_steps=1 and prints, per log,
the median forward ms of the steps with one decoding sequence and no
prefill, by tokens in the pass (root + draft rows), with the step count:

    served_forward_ms.py /tmp/diag1/verifysvc.log ...
    /tmp/diag1/verifysvc.log 1:3.00(1273) 2:4.10(85) 3:5.00(43) ...
"""
import collections
import re
import statistics
import sys

STEP = re.compile(r"(\d+) decoding \+ (\d+) prefilling, (\d+) tokens "
                  r"\((\d+) prefill\).*forward ([\d.]+) ms")


def served_ms(lines, largest=8):
    """{tokens: (median ms, steps)} of one-sequence decoding steps."""
    by_tokens = collections.defaultdict(list)
    for line in lines:
        m = STEP.search(line)
        if not m or m.group(1) != "1" or m.group(4) != "0":
            continue
        by_tokens[int(m.group(3))].append(float(m.group(5)))
    return {t: (statistics.median(v), len(v))
            for t, v in sorted(by_tokens.items()) if t <= largest}


def main(paths):
    for path in paths:
        with open(path, errors="replace") as f:
            cells = served_ms(f)
        print(path, " ".join(f"{t}:{ms:.2f}({n})"
                             for t, (ms, n) in cells.items()))


if __name__ == "__main__":
    main(sys.argv[1:])
