#!/usr/bin/env bash
# The CUDA build of verifysvc (issue 7), on a development machine with the
# CUDA 13 toolkit at /usr/local/cuda and no GPU:
#
#   tools/cuda_build.sh            # fetch LibTorch, bazel build --config=cuda
#   tools/cuda_build.sh --bundle   # ... and pack .gpu/ for a GPU machine
#   tools/cuda_build.sh --check    # ... and run its CPU path here (CI):
#                                  # engine and service lossless suites
#
# LibTorch with CUDA comes from the PyPI torch 2.11.0 wheel (CUDA 13.0, the
# GPU machines' own torch): its include/ and lib/ are unpacked into
# ~/.cache/lookahead/torch-cuda and linked as third_party/torch_cuda. The
# build has its own Bazel output base, so it never invalidates the CPU
# build. Binaries land in .bazel-cuda/bin/.
#
# --bundle writes .gpu/ (git-ignored; carried to the GPU machine by the
# device tool, see tools/gpu_check.sh): stripped binaries and the Debian
# libraries they need that a GPU machine lacks (binaries.tar.xz), the Python
# client stubs and the benchmark workloads; and .gpu-model/, the model in
# two parts (a device call carries at most 64 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TORCH_VERSION=2.11.0
readonly CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead"
readonly TORCH_DIR="$CACHE/torch-cuda"
# One output base per checkout, as Bazel's own default.
readonly OUTPUT_BASE="$CACHE/bazel-cuda/$(pwd -P | md5sum | cut -c1-12)"
readonly TARGETS=(
  //verifysvc:verifysvc //draftsvc:draftsvc //engine/bench:engine_bench
  //engine/model:lossless_test //tests:service_lossless_test
  //kernels/cuda:kernels_test
)

fetch_torch() {
  if [[ -f "$TORCH_DIR/torch/lib/libtorch_cuda.so" &&
        "$(cat "$TORCH_DIR/version" 2>/dev/null)" == "$TORCH_VERSION" ]]; then
    echo "cuda_build: LibTorch $TORCH_VERSION present in $TORCH_DIR"
  else
    local tmp
    tmp=$(mktemp -d)
    echo "cuda_build: fetching torch==$TORCH_VERSION (CUDA 13.0) from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --dest "$tmp" "torch==$TORCH_VERSION"
    rm -rf "$TORCH_DIR"
    mkdir -p "$TORCH_DIR"
    unzip -q -o "$tmp"/torch-*.whl 'torch/include/*' 'torch/lib/*' -d "$TORCH_DIR"
    # The wheel ships protobuf headers of another version than Debian's,
    # which the services compile against; LibTorch's C++ API needs none.
    mv "$TORCH_DIR/torch/include/google" "$TORCH_DIR/torch/unused-protobuf-headers"
    echo "$TORCH_VERSION" >"$TORCH_DIR/version"
    rm -rf "$tmp"
  fi
  ln -sfn "$TORCH_DIR/torch" third_party/torch_cuda
}

build() {
  command -v /usr/local/cuda/bin/nvcc >/dev/null || {
    echo "cuda_build: needs the CUDA 13 toolkit at /usr/local/cuda" >&2
    exit 1
  }
  bazel --output_base="$OUTPUT_BASE" build --config=cuda "${TARGETS[@]}"
}

# Libraries of the binaries that neither glibc nor the GPU machine's
# torch/CUDA provide: Debian's gRPC, protobuf, RocksDB, abseil, RE2, ...
bundle_libs() {
  local dest=$1
  shift
  ldd "$@" | awk '/=> \// {print $1, $3}' | sort -u |
    while read -r name path; do
      case "$name" in
        libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | \
        ld-linux* | libstdc++.so* | libgcc_s.so* | libgomp.so* | \
        libtorch*.so | libc10*.so | libcuda*.so* | libcublas*.so* | \
        libcudnn*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so* | \
        libcusolver*.so* | libnccl*.so* | libnvrtc*.so* | libnvJitLink*.so* | \
        libcupti*.so* | libnvshmem*.so* | libcufile*.so* | libnvToolsExt*.so*) ;;
        *) cp -L "$path" "$dest/$name" ;;
      esac
    done
}

# CUDA libraries libtorch_cuda.so loads that the CUDA 13 toolkit here lacks,
# for running the CUDA build's CPU path on this machine (PyPI wheels).
readonly EXTRA_LIBS="$CACHE/cuda-extra-libs"
fetch_extra_libs() {
  [[ -f "$EXTRA_LIBS/libcusparseLt.so.0" && -f "$EXTRA_LIBS/libnvshmem_host.so.3" &&
     -f "$EXTRA_LIBS/libcufile.so.0" ]] && return
  local tmp
  tmp=$(mktemp -d)
  python3 -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux2014_x86_64 --dest "$tmp" \
    nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile
  mkdir -p "$EXTRA_LIBS"
  for w in "$tmp"/*.whl; do unzip -q -o -j "$w" '*.so*' -d "$EXTRA_LIBS"; done
  rm -rf "$tmp"
}

# The CUDA build's CPU path: the same lossless suites as the CPU build.
check() {
  fetch_extra_libs
  tools/setup.sh --model >/dev/null
  export LD_LIBRARY_PATH="$TORCH_DIR/torch/lib:$EXTRA_LIBS:/usr/local/cuda/lib64"
  local bin=.bazel-cuda/bin
  "$bin/engine/model/lossless_test" --gtest_filter='*/0:*/1'
  VERIFYSVC_BINARY="$bin/verifysvc/verifysvc" DRAFTSVC_BINARY="$bin/draftsvc/draftsvc" \
    "$bin/tests/service_lossless_test" --gtest_filter='ServiceLosslessTest.*'
  echo "cuda_build: the CUDA build's CPU path is lossless"
}

bundle() {
  local gpu=.gpu stage
  stage=$(mktemp -d)
  rm -rf "$gpu" .gpu-model
  mkdir -p "$gpu" .gpu-model "$stage/bin/verifysvc" "$stage/bin/draftsvc" "$stage/lib"
  local bin=.bazel-cuda/bin
  local binaries=(
    "$bin/verifysvc/verifysvc" "$bin/draftsvc/draftsvc"
    "$bin/engine/bench/engine_bench" "$bin/engine/model/lossless_test"
    "$bin/tests/service_lossless_test" "$bin/kernels/cuda/kernels_test_bin"
  )
  # bench/run.py --bin_dir wants <dir>/<name>/<name> for the two services.
  for b in "${binaries[@]}"; do
    local name dest
    name=$(basename "$b")
    dest="$stage/bin/$name"
    [[ $name == verifysvc || $name == draftsvc ]] && dest="$stage/bin/$name/$name"
    strip -o "$dest" "$b"
  done
  bundle_libs "$stage/lib" "${binaries[@]}"
  tar -C "$stage" -cJf "$gpu/binaries.tar.xz" bin lib
  rm -rf "$stage"
  clients/python/gen_protos.sh >/dev/null
  cp -r clients/python/lookahead_client/proto "$gpu/proto"
  python3 bench/fetch_workloads.py >/dev/null
  mkdir -p "$gpu/workloads"
  (cd "$CACHE/bench" && cp -r manifest.json rag chat.jsonl code.jsonl "$OLDPWD/$gpu/workloads/")
  tools/setup.sh --model >/dev/null
  local model="${LOOKAHEAD_MODEL_DIR:-$CACHE/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
  split -n 2 -d "$model" .gpu-model/model.part
  (cd "$(dirname "$model")" && sha256sum "$(basename "$model")") >"$gpu/model.sha256"
  du -sh "$gpu" .gpu-model/*
}

case "${1:-}" in
  "" | --bundle | --check) ;;
  *) echo "usage: tools/cuda_build.sh [--bundle|--check]" >&2; exit 2 ;;
esac
fetch_torch
build
case "${1:-}" in
  --bundle) bundle ;;
  --check) check ;;
esac
