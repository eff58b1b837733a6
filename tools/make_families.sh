#!/usr/bin/env bash
# Regenerates tests/families/: tiny random-weight GGUFs of the model families
# users bring (Llama 3.1 "llama3" RoPE scaling, Qwen2 with QKV biases,
# Mistral), converted by llama.cpp's own convert_hf_to_gguf.py, and HF
# transformers' logits and greedy tokens for them (families.json), which
# //tests/families:families_test checks. ~30 s on 2 cores. Needs PyPI once
# (the venv, and the llama-cpp-python sdist whose vendor/llama.cpp holds the
# converter and its gguf-py); nothing is fetched from the Hugging Face hub.
#
#   tools/make_families.sh                  # rewrites tests/families/
#   LLAMA_CPP_DIR=DIR tools/make_families.sh
#                                           # a llama.cpp checkout instead
#   tools/make_families.sh --out_dir DIR    # elsewhere (args go to the .py)
#
# The venv is make_golden.sh's: $LOOKAHEAD_GOLDEN_VENV, default
# <repo>/.venv-golden (gitignored); this adds sentencepiece, which the
# converter imports for every Llama and Qwen2 model.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly VENV="${LOOKAHEAD_GOLDEN_VENV:-$PWD/.venv-golden}"
# Pinned so that a regeneration is reproducible; the shared ones as in
# make_golden.sh. Bump together, rerun, and review the diff of the JSON.
readonly PINS=(
  "torch==2.5.1"
  "transformers==4.57.6"
  "numpy==1.26.4"
  "sentencepiece==0.2.0"
)
readonly LLAMA_CPP_PYTHON="llama-cpp-python==0.3.36"
readonly SDIST_SHA256="832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
readonly PYTHON="${PYTHON:-python3}"

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import torch, transformers, sentencepiece' \
    2>/dev/null; then
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PINS[@]}"
fi

llama_cpp="${LLAMA_CPP_DIR:-}"
version="$LLAMA_CPP_PYTHON (sdist vendor/llama.cpp)"
if [[ -z "$llama_cpp" ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$VENV/bin/python" -m pip download -q --disable-pip-version-check \
    --no-deps --no-binary :all: -d "$tmp" "$LLAMA_CPP_PYTHON"
  sdist=("$tmp"/llama_cpp_python-*.tar.gz)
  echo "$SDIST_SHA256  ${sdist[0]}" | sha256sum --check --quiet
  tar xzf "${sdist[0]}" -C "$tmp" --wildcards \
    '*/vendor/llama.cpp/convert_hf_to_gguf.py' \
    '*/vendor/llama.cpp/conversion/*' '*/vendor/llama.cpp/gguf-py/*'
  llama_cpp=$(echo "$tmp"/llama_cpp_python-*/vendor/llama.cpp)
else
  version="llama.cpp at $(git -C "$llama_cpp" rev-parse HEAD 2>/dev/null ||
    echo "$llama_cpp")"
fi

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$VENV/bin/python" tools/make_families.py --llama_cpp "$llama_cpp" \
  --llama_cpp_version "$version" "$@"
