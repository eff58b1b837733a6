#!/usr/bin/env bash
# Regenerates a golden file of tests/golden/: reference tokens and logits for
# one model of tools/models.sh, computed by HF transformers (an
# implementation we did not write) on the same GGUF weights, in float32. Needs
# PyPI once (a few GB: the PyPI torch wheel pulls its CUDA libraries even
# though we only use the CPU); nothing is fetched from the Hugging Face hub.
# The model must be in the model cache (tools/setup.sh --model=NAME).
#
#   tools/make_golden.sh                 # smollm2-135m: tests/golden/smollm2_q4_1.json
#   tools/make_golden.sh --model=qwen2.5-coder-1.5b
#                                        # tests/golden/qwen2.5-coder-1.5b_q4_k_m.json
#                                        # (~10 min on 2 cores)
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

# The model (--model=NAME or --model NAME; default the embedded one) and its
# file, checked before the venv so that a missing model fails fast.
source tools/models.sh
model=$DEFAULT_MODEL
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --model=*) model=${args[i]#--model=} ;;
    --model) model=${args[i + 1]:-} ;;
  esac
done
gguf=$(model_path "$model") || exit 1

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import torch, transformers, gguf' 2>/dev/null ||
   [[ "$("$VENV/bin/python" -m pip freeze 2>/dev/null | grep -cxF "${PINS[@]/#/-e}")" != "${#PINS[@]}" ]]; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$VENV/bin/python" tools/make_golden.py --model="$model" --gguf="$gguf" "$@"
