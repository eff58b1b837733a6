#!/usr/bin/env bash
# The benchmark suite (bench/README.md): RAG, chat, code and adversarial
# workloads through the real service pair on loopback, plain vs
# trie-hierarchical vs trie-parallel at batch 1; fails if any drafted output
# differs from plain decoding. Report and plots in bench/results/.
#
#   tools/bench.sh            # workload tables (~15 minutes on 2 cores)
#   tools/bench.sh --all      # plus concurrency 1,4,8,16 and the ablations
#                             # (~30 minutes)
#   tools/bench.sh --peer=hf  # plus Hugging Face transformers on the same
#                             # GGUF (sets up its own venv; not in CI)
#   tools/bench.sh --peer=llamacpp --no_main
#                             # llama.cpp on the same GGUF beside ours:
#                             # decode/prompt speeds, forward-cost curve,
#                             # plain decode per workload (builds llama.cpp
#                             # on first use; not in CI)
#   tools/bench.sh --model=qwen2.5-coder-1.5b --peer=llamacpp --no_main
#                             # any model of tools/models.sh (fetch it first:
#                             # tools/setup.sh --model=NAME) or a GGUF path:
#                             # verifysvc serves it, llama.cpp runs the file
#   tools/bench.sh --quick    # CI: 2 prompts per workload, checks outputs only
#
# Every flag goes to bench/run.py as it is (bench/run.py --help), e.g.
# --model=NAME, --limit=4, --concurrency=1,4, --ablations=grid, --no_main.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //draftsvc:draftsvc //verifysvc:verifysvc
clients/python/gen_protos.sh >/dev/null
/usr/bin/python3 bench/fetch_workloads.py
exec /usr/bin/python3 bench/run.py "$@"
