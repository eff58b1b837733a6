#!/usr/bin/env bash
# The OpenAI-compatible HTTP front of verifysvc, end to end with the official
# `openai` package (tests/openai_test.py): it starts draftsvc and verifysvc
# (plus a keyed, an HTTPS and a still-loading verifysvc) on loopback from the
# built binaries. Expects the binaries built (tools/test.sh builds them), the
# model and the project .venv with openai and httpx (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

[[ -x .venv/bin/python ]] || { echo "openai_test: no .venv (run tools/setup.sh)" >&2; exit 1; }
clients/python/gen_protos.sh >/dev/null
.venv/bin/python tests/openai_test.py
echo "openai_test: OK"
