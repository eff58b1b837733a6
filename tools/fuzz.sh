#!/usr/bin/env bash
# Fuzzes, with libFuzzer and AddressSanitizer for a bounded time split
# between them, the GGUF reader (engine/gguf/gguf.cc + dequant.cc) and the
# OpenAI JSON -> request mapping of verifysvc's HTTP front
# (verifysvc/api/openai_api.cc, target verifysvc/api/fuzz/openai_fuzz.cc).
# Exits non-zero iff a build fails or a fuzzer finds a crash (the reproducer
# is kept under $WORK/artifacts or $WORK/openai/artifacts).
#
#   tools/fuzz.sh [SECONDS]        # default 60, half to each target
#
# Built directly with clang++ (no Bazel). The corpus starts from files made
# by engine/testing/gguf_writer (every value type, every tensor type id) plus the
# first 4 KiB of the real model when it is present; it persists in
# $LOOKAHEAD_FUZZ_DIR (default ${TMPDIR:-/tmp}/lookahead-gguf-fuzz) so later
# runs continue from it.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly TOTAL_SECONDS="${1:-60}"
readonly SECONDS_TO_RUN=$(((TOTAL_SECONDS + 1) / 2))  # the GGUF target's
readonly OPENAI_SECONDS=$((TOTAL_SECONDS / 2 > 0 ? TOTAL_SECONDS / 2 : 1))
readonly WORK="${LOOKAHEAD_FUZZ_DIR:-${TMPDIR:-/tmp}/lookahead-gguf-fuzz}"
readonly CXX="${CXX_FUZZ:-clang++}"
readonly MODEL="${LOOKAHEAD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/models}/SmolLM2-135M-Instruct.Q4_1.gguf"

for tool in "$CXX" pkg-config; do
  command -v "$tool" >/dev/null ||
    { echo "fuzz: $tool not found (run tools/setup.sh)" >&2; exit 1; }
done
mkdir -p "$WORK/corpus" "$WORK/seeds" "$WORK/artifacts"
ABSL_LIBS_TEXT="$(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format)"
read -r -a ABSL_LIBS <<<"$ABSL_LIBS_TEXT"
readonly SRCS=(engine/gguf/gguf.cc engine/gguf/dequant.cc)
readonly FLAGS=(-std=c++17 -O1 -g -I. -Wno-deprecated-declarations)

# run_fuzzer NAME DIR SECONDS MAX_LEN: runs DIR/NAME on DIR/corpus and
# DIR/seeds; on a crash prints the log's tail and the reproducers and exits.
run_fuzzer() {
  local name=$1 dir=$2 seconds=$3 max_len=$4 rc=0
  echo "fuzz: running $name for ${seconds}s (log $dir/fuzz.log)"
  "$dir/$name" -max_total_time="$seconds" -max_len="$max_len" \
    -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$dir/artifacts/" \
    "$dir/corpus" "$dir/seeds" >"$dir/fuzz.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    tail -n 80 "$dir/fuzz.log" >&2
    echo "fuzz: $name FAILED (exit $rc); reproducers in $dir/artifacts:" >&2
    ls -l "$dir/artifacts" >&2
    echo "replay one with: $dir/$name <file>" >&2
    exit "$rc"
  fi
  grep '^stat::' "$dir/fuzz.log" || true
}

echo "fuzz: building seed writer and fuzz target with $CXX"
"$CXX" "${FLAGS[@]}" -DLOOKAHEAD_GGUF_FUZZ_SEEDS \
  engine/fuzz/gguf_fuzz.cc engine/testing/gguf_writer.cc "${SRCS[@]}" \
  "${ABSL_LIBS[@]}" -o "$WORK/gguf_seed_writer"
"$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined \
  engine/fuzz/gguf_fuzz.cc "${SRCS[@]}" "${ABSL_LIBS[@]}" -o "$WORK/gguf_fuzz"

"$WORK/gguf_seed_writer" "$WORK/seeds"
if [[ -f "$MODEL" ]]; then
  head -c 4096 "$MODEL" >"$WORK/seeds/model_header.gguf"
fi

run_fuzzer gguf_fuzz "$WORK" "$SECONDS_TO_RUN" 8192
echo "fuzz: GGUF OK, no crash in ${SECONDS_TO_RUN}s"

# --- the OpenAI JSON mapping ---
readonly OWORK="$WORK/openai"
mkdir -p "$OWORK/corpus" "$OWORK/seeds" "$OWORK/artifacts"
OPENAI_LIBS_TEXT="$(pkg-config --libs absl_status absl_statusor absl_strings \
  absl_raw_hash_set absl_hash \
  absl_str_format absl_cord absl_random_random)"
read -r -a OPENAI_LIBS <<<"$OPENAI_LIBS_TEXT"
echo "fuzz: building the OpenAI mapping target with $CXX"
"$CXX" "${FLAGS[@]}" -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined \
  verifysvc/api/fuzz/openai_fuzz.cc verifysvc/api/openai_api.cc \
  verifysvc/serving/field_error.cc engine/model/draft_tree.cc \
  engine/text/tokenizer.cc engine/text/pre_tokenizer.cc \
  engine/text/chat_template.cc engine/text/text_stream.cc "${SRCS[@]}" \
  "${OPENAI_LIBS[@]}" -lre2 -o "$OWORK/openai_fuzz"
# Seeds: the first byte picks the endpoint (even: chat, odd: completions).
seed() { printf '%s%s' "$2" "$3" >"$OWORK/seeds/$1"; }
seed chat 0 '{"model":"model","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":8,"temperature":0.7,"top_p":0.9,"seed":3,"stop":["a","b"],"n":1,"logprobs":false,"user":"u","stream":true,"stream_options":{"include_usage":true},"lookahead":{"sources":["trie","ngram","assistant"],"decoding_length":8,"branch_length":4,"mode":"parallel","namespace":"ns","lookahead_window":2}}'
seed text 1 '{"model":"model","prompt":"hello","max_completion_tokens":4,"stop":"x","echo":false,"best_of":1,"suffix":""}'
seed ids 1 '{"model":"model","prompt":[[1,2,3]],"max_tokens":null,"logprobs":0}'
seed wrong_types 0 '{"model":7,"messages":"x","max_tokens":"8","n":2,"logprobs":true,"top_logprobs":3,"logit_bias":{"1":2},"tools":[{}]}'
seed bad_model 0 '{"model":"gpt-4","messages":[]}'
seed bad_json 1 '{"model":"model","prompt":["a","b"],"max_tokens":-1,'
seed nested 0 '{"model":"model","x":[[[[[[[[[[{"a":[1e999]}]]]]]]]]]]}'
printf '0{"model":"model","messages":[{"role":"user","content":"\xff\xfe"}]}' \
  >"$OWORK/seeds/bad_utf8"
run_fuzzer openai_fuzz "$OWORK" "$OPENAI_SECONDS" 4096
echo "fuzz: OK, no crash in ${SECONDS_TO_RUN}s (GGUF) + ${OPENAI_SECONDS}s (OpenAI mapping)"
