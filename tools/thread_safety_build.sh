#!/usr/bin/env bash
# Builds the code that carries ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED
# annotations with clang's -Wthread-safety as an error, so the annotations
# mean something (GCC ignores them). Its own Bazel output base, so the GCC
# build's cache stays warm; the targets are those whose sources hold
# annotations, plus their tests. The analysis is clang's front end: objects
# are compiled without optimization or debug info and nothing is linked.
#
#   tools/thread_safety_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."

# One output base per checkout, as Bazel's own default.
readonly OUTPUT_BASE="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/bazel-thread-safety/$(pwd -P | md5sum | cut -c1-12)"
readonly TARGETS=(
  //common:metrics //common:metrics_test
  //common:shutdown_signal //common:wire_request
  //draftsvc/testing:fault_file_system
  //draftsvc/index:draft_index //draftsvc/index:draft_index_test
  //draftsvc/index:draft_index_ngram_test
  //draftsvc/index:draft_index_offset_test //draftsvc/index:session_source_test
  //draftsvc/service:draft_service
  //draftsvc/sources:ngram_pool //draftsvc/sources:ngram_pool_test
  //draftsvc/storage:trie_store
  //draftsvc/sources/assistant:assistant_drafter
  //draftsvc/sources/assistant:assistant_drafter_test
  //draftsvc/mix:source_calibration
  //engine/model:prefix_cache //engine/model:prefix_cache_test
  //tests:draftsvc_crash_test
  //verifysvc/api:generation_service
  //verifysvc/api:api_keys //verifysvc/api:api_keys_test
  //verifysvc/draftsvc_client:draftsvc_sessions
  //verifysvc/serving:scheduler //verifysvc/serving:scheduler_unit_test
)

# Every file with an annotation must be covered by a target above. (A
# here-string, not a pipe: under pipefail, grep -q closing the pipe early
# made printf's SIGPIPE read as "not covered" now and then.)
covered=$(printf '%s\n' "${TARGETS[@]}")
missing=0
while IFS= read -r file; do
  pkg=$(dirname "$file")
  if ! grep -q "^//$pkg:" <<<"$covered"; then
    echo "thread_safety_build: $file has annotations but no target of //$pkg is built" >&2
    missing=1
  fi
done < <(grep -rlE 'ABSL_(GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|LOCKS_EXCLUDED)' \
           --include='*.h' --include='*.cc' common draftsvc engine verifysvc tests)
((missing == 0)) || exit 1

command -v clang++ >/dev/null || { echo "thread_safety_build: clang++ missing (tools/setup.sh)" >&2; exit 1; }
echo "thread_safety_build: clang -Wthread-safety -Werror on ${#TARGETS[@]} targets"
bazel --output_base="$OUTPUT_BASE" build \
  --repo_env=CC=clang --repo_env=CXX=clang++ \
  --symlink_prefix=/ \
  --copt=-Wthread-safety --copt=-Werror=thread-safety \
  --copt=-Wno-unknown-warning-option \
  --copt=-O0 --copt=-g0 --output_groups=compilation_outputs \
  --keep_going "${TARGETS[@]}"
echo "thread_safety_build: no thread-safety warnings"
