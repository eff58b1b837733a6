#!/usr/bin/env bash
# Regenerates tests/golden/smollm2_q4_1.json: reference tokens and logits for
# the embedded default model, computed by HF transformers (an implementation
# we did not write) on the same GGUF weights. Needs PyPI once (a few GB: the
# PyPI torch wheel pulls its CUDA libraries even though we only use the CPU);
# nothing is fetched from the Hugging Face hub.
#
#   tools/make_golden.sh                 # writes tests/golden/smollm2_q4_1.json
#   tools/make_golden.sh --out FILE      # elsewhere (extra args go to the .py)
#
# The venv is $LOOKAHEAD_GOLDEN_VENV, default <repo>/.venv-golden (gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VENV="${LOOKAHEAD_GOLDEN_VENV:-$PWD/.venv-golden}"
# Pinned so that a regeneration is reproducible; bump together, then rerun and
# review the diff of the JSON.
readonly PINS=(
  "torch==2.5.1"
  "transformers==4.57.6"
  "gguf==0.17.1"
  "numpy==1.26.4"
  "tokenizers==0.22.2"
  "accelerate==1.10.1"  # transformers needs it to load a GGUF
)
readonly PYTHON="${PYTHON:-python3}"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import torch, transformers, gguf' 2>/dev/null ||
   [[ "$("$VENV/bin/python" -m pip freeze 2>/dev/null | grep -cxF "${PINS[@]/#/-e}")" != "${#PINS[@]}" ]]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$VENV/bin/python" tools/make_golden.py "$@"
