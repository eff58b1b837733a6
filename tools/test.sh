#!/usr/bin/env bash
# Runs every test: installs what is missing (tools/setup.sh), builds with
# Bazel offline, runs the unit, integration and golden tests, then the GGUF
# fuzz target for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel test --test_output=errors //...
if [[ -x tools/fuzz.sh ]]; then
  tools/fuzz.sh "${LOOKAHEAD_FUZZ_SECONDS:-60}"
fi
