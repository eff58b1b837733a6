#!/usr/bin/env bash
# The benchmark suite (bench/README.md): RAG, chat, code and adversarial
# workloads through the real service pair on loopback, plain vs
# trie-hierarchical vs trie-parallel at batch 1; fails if any drafted output
# differs from plain decoding. Report and plots in bench/results/.
#
#   tools/bench.sh            # full suite (~15 minutes on the 2-core machine)
#   tools/bench.sh --quick    # CI: 2 prompts per workload, checks outputs only
#
# Other flags go to bench/run.py (bench/run.py --help), e.g. --limit=4.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //draftsvc:draftsvc //verifysvc:verifysvc
clients/python/gen_protos.sh >/dev/null
/usr/bin/python3 bench/fetch_workloads.py
exec /usr/bin/python3 bench/run.py "$@"
