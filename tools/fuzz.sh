#!/usr/bin/env bash
# Fuzzes the GGUF reader (engine/gguf/gguf.cc + dequant.cc) with libFuzzer and
# AddressSanitizer for a bounded time. Exits non-zero iff the build fails or
# the fuzzer finds a crash (the reproducer is kept under $WORK/artifacts).
#
#   tools/fuzz.sh [SECONDS]        # default 60
#
# Built directly with clang++ (no Bazel). The corpus starts from files made
# by engine/testing/gguf_writer (every value type, every tensor type id) plus the
# first 4 KiB of the real model when it is present; it persists in
# $LOOKAHEAD_FUZZ_DIR (default ${TMPDIR:-/tmp}/lookahead-gguf-fuzz) so later
# runs continue from it.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly SECONDS_TO_RUN="${1:-60}"
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

echo "fuzz: running for ${SECONDS_TO_RUN}s (work dir $WORK, log $WORK/fuzz.log)"
rc=0
"$WORK/gguf_fuzz" -max_total_time="$SECONDS_TO_RUN" -max_len=8192 \
  -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$WORK/artifacts/" \
  "$WORK/corpus" "$WORK/seeds" >"$WORK/fuzz.log" 2>&1 || rc=$?
if ((rc != 0)); then
  tail -n 80 "$WORK/fuzz.log" >&2
  echo "fuzz: FAILED (exit $rc); reproducers in $WORK/artifacts:" >&2
  ls -l "$WORK/artifacts" >&2
  echo "replay one with: $WORK/gguf_fuzz <file>" >&2
  exit "$rc"
fi
grep '^stat::' "$WORK/fuzz.log" || true
echo "fuzz: OK, no crash in ${SECONDS_TO_RUN}s"
