#!/usr/bin/env bash
# The load test of verifysvc's fronts (bench/load.py): 256 concurrent
# streaming clients through the OpenAI-compatible HTTP front (the official
# `openai` async client) and then through the gRPC front, a bounded time
# each, against one service pair on loopback. Fails on any error, any output
# that differs from the request sent alone, or leaked threads or memory.
# Report in bench/results/load/.
#
#   tools/load.sh                          # 256 streams, 60 s per round
#   tools/load.sh --streams=32 --seconds=10
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //draftsvc:draftsvc //verifysvc:verifysvc
clients/python/gen_protos.sh >/dev/null
/usr/bin/python3 bench/fetch_workloads.py
exec .venv/bin/python bench/load.py "$@"
