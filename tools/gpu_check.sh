#!/usr/bin/env bash
# Issue 7's checks on a GPU machine (H100/H200 through the device tool),
# from the working tree plus what tools/cuda_build.sh --bundle packed.
# Each step fits one device call (10 minutes); run them back to back so the
# machine stays warm (what is staged lives in /tmp/lookahead):
#
#   run(carry=[".gpu-model/model.part00"], "tools/gpu_check.sh stage 0")
#   run(carry=[".gpu-model/model.part01"], "tools/gpu_check.sh stage 1")
#   run(carry=[".gpu"], "tools/gpu_check.sh kernels")   # kernels_test + dev
#   run(carry=[".gpu"], "tools/gpu_check.sh engine")    # forward latency,
#                                                       # engine lossless
#   run(carry=[".gpu"], "tools/gpu_check.sh services")  # golden prompts
#                                                       # through the pair
#   run(carry=[".gpu"], "tools/gpu_check.sh bench")     # workloads, batch
#                                                       # 1 and 16
#
# kernels needs no bundle (it builds from source with nvcc and the
# machine's LibTorch). Logs and tables go to $OUT (default /tmp/gpu_out).
set -uo pipefail
cd "$(dirname "$0")/.."

readonly OUT_DIR="${OUT:-/tmp/gpu_out}"
readonly STAGE=/tmp/lookahead
readonly MODEL="$STAGE/SmolLM2-135M-Instruct.Q4_1.gguf"
mkdir -p "$OUT_DIR" "$STAGE"
TORCH_LIB=${TORCH_LIB:-$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')}
TORCH_INC=${TORCH_INC:-$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "include"))')}
readonly BUNDLE="$STAGE/bundle"  # .gpu/binaries.tar.xz unpacked
export LD_LIBRARY_PATH="$BUNDLE/lib:$TORCH_LIB:${LD_LIBRARY_PATH:-}"
export LOOKAHEAD_MODEL_DIR="$STAGE"
# GPU_CHECK_DEVICE=cpu dry-runs the steps on a development machine.
readonly DEVICE="${GPU_CHECK_DEVICE:-cuda}"
readonly BENCH_LIMIT="${GPU_CHECK_BENCH_LIMIT:-8}"
status=0

# Runs "$@", its output to $OUT_DIR/<name>.log and to the terminal.
step() {
  local name=$1
  shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$OUT_DIR/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc"
  ((rc == 0)) || status=1
}

# The model from its two staged parts, and the bundle's binaries.
need_bundle() {
  if [[ ! -f "$MODEL" ]]; then
    [[ -f "$STAGE/model.part00" && -f "$STAGE/model.part01" ]] || {
      echo "gpu_check: model not staged: run 'tools/gpu_check.sh stage 0' and 'stage 1' first" >&2
      exit 1
    }
    cat "$STAGE/model.part00" "$STAGE/model.part01" >"$MODEL"
  fi
  echo "$(cut -d' ' -f1 .gpu/model.sha256)  $MODEL" | sha256sum --check --status || {
    echo "gpu_check: $MODEL does not match .gpu/model.sha256; stage it again" >&2
    rm -f "$MODEL"
    exit 1
  }
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE"
  tar -C "$BUNDLE" -xJf .gpu/binaries.tar.xz
}

NVCC="nvcc -std=c++17 -O3 -I. -gencode arch=compute_90,code=sm_90"
KERNELS="kernels/cuda/tree_attention.cu kernels/cuda/kv_compact.cu kernels/cuda/select_tokens.cu"

case "${1:-}" in
  stage)
    cp ".gpu-model/model.part0${2:?stage 0 or stage 1}" "$STAGE/" && ls -la "$STAGE"
    ;;
  kernels)
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT_DIR/gpu.txt"
    step build_kernels_test $NVCC -o /tmp/kernels_test kernels/cuda/kernels_test.cu kernels/cuda/reference.cc $KERNELS
    step kernels_test /tmp/kernels_test
    step build_dev bash -c "$NVCC -Xcompiler -fPIC -c kernels/cuda/tree_attention.cu -o /tmp/ta.o &&
      $NVCC -Xcompiler -fPIC -c kernels/cuda/dev/tree_attention_v1.cu -o /tmp/ta_v1.o &&
      g++ -std=c++17 -O2 -I. -I$TORCH_INC -I$TORCH_INC/torch/csrc/api/include -I/usr/local/cuda/include \
        kernels/cuda/dev/tree_attention_dev.cc /tmp/ta.o /tmp/ta_v1.o -o /tmp/tree_attention_dev \
        -L$TORCH_LIB -Wl,-rpath,$TORCH_LIB -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda \
        -L/usr/local/cuda/lib64 -lcudart -Wl,--allow-shlib-undefined"
    step tree_attention_dev /tmp/tree_attention_dev
    ;;
  engine)
    need_bundle
    sizes=1,2,4,8,16,32,64,128,256
    for dtype in float32 bfloat16; do
      for kernels in true false; do
        step "engine_bench_${dtype}_kernels_${kernels}" $BUNDLE/bin/engine_bench \
          --device=$DEVICE --dtype=$dtype --cuda_kernels=$kernels --thread_sweep= \
          --contexts=256,2048 --tree_sizes=$sizes --reps=20
      done
    done
    step lossless_float32 env LOOKAHEAD_TEST_DEVICE=$DEVICE LOOKAHEAD_TEST_DTYPE=float32 $BUNDLE/bin/lossless_test
    step lossless_bfloat16 env LOOKAHEAD_TEST_DEVICE=$DEVICE LOOKAHEAD_TEST_DTYPE=bfloat16 $BUNDLE/bin/lossless_test
    ;;
  services)
    need_bundle
    export VERIFYSVC_BINARY=$BUNDLE/bin/verifysvc/verifysvc \
      DRAFTSVC_BINARY=$BUNDLE/bin/draftsvc/draftsvc
    for dtype in float32 bfloat16; do
      step "service_lossless_$dtype" env "LOOKAHEAD_VERIFYSVC_FLAGS=--device=$DEVICE --dtype=$dtype" \
        $BUNDLE/bin/service_lossless_test
    done
    ;;
  bench)
    need_bundle
    rm -rf clients/python/lookahead_client/proto
    cp -r .gpu/proto clients/python/lookahead_client/proto
    for dtype in float32 bfloat16; do
      step "bench_$dtype" python3 bench/run.py --bin_dir="$BUNDLE/bin" --cache=.gpu/workloads \
        --verifysvc_flag=--device=$DEVICE --verifysvc_flag=--dtype=$dtype \
        --limit=$BENCH_LIMIT --warmup=4 --concurrency=1,16 --out="$OUT_DIR/bench_$dtype"
    done
    ;;
  *)
    echo "usage: tools/gpu_check.sh stage 0|stage 1|kernels|engine|services|bench" >&2
    exit 2
    ;;
esac
exit "$status"
