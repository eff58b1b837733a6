#!/usr/bin/env bash
# Runs every test: installs what is missing (tools/setup.sh), builds with
# Bazel offline, runs the unit, integration, golden and fault tests (the
# fault suite: //tests:fault_suite), the clients against the real service
# pair (tools/client_test.sh), the OpenAI-compatible HTTP front through the
# `openai` package (tools/openai_test.sh), the metrics against
# a real Prometheus (tools/metrics_test.sh), the Prometheus rules and the
# dashboard (tools/rules_test.sh), the Kubernetes manifests' policy
# (tools/deploy_test.sh), the benchmark suite's quick mode (identical
# outputs only, tools/bench.sh --quick), the CUDA build of verifysvc and its
# CPU path's lossless suites (tools/cuda_build.sh --check: no GPU needed),
# the layering rules (tools/layering_test.py: no generated proto headers
# below the edges, arrows point down, short serving functions), clang's
# thread-safety analysis of the annotated code (tools/thread_safety_build.sh),
# no compiler warning from the kernels (tools/warnings_check.sh //kernels/...;
# the whole tree takes ~20 minutes: run it by hand), then the GGUF fuzz
# target for a bounded time (LOOKAHEAD_FUZZ_SECONDS, default 60). CI
# (.ci/run) runs this full suite.
#
#   tools/test.sh            # everything (CI)
#   tools/test.sh --quick    # the everyday tier, a few minutes when warm
#
# --quick runs the Bazel tests that are not size "large" (unit tests and
# the quick service tests) and those tagged "quick" (one real-model lossless
# test: //tests:lookahead_lossless_test, the real draftsvc and model, token
# for token), then only the steps that check files (tools/layering_test.py,
# tools/docs_test.py): ~3 minutes warm on 2 cores when every test reruns.
# To move a test into the quick tier, tag it "quick"; a new large test
# stays out.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
case "${1:-}" in
  "") ;;
  --quick) quick=1 ;;
  *)
    echo "usage: tools/test.sh [--quick]" >&2
    exit 2
    ;;
esac

tools/setup.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
targets=(//...)
if ((quick)); then
  all='tests(//...) except attr(tags, manual, tests(//...))'
  quick_tests=$(bazel query "($all except attr(size, large, $all))
    + attr(tags, '\bquick\b', $all)")
  mapfile -t targets <<<"$quick_tests"
fi
bazel test --test_output=errors "${targets[@]}" 2>&1 | tee "$log" || status=$?
echo "test.sh: setup and bazel test of ${#targets[@]} patterns took $SECONDS s"
passed=$(grep -cE '^//.* PASSED' "$log" || true)
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log" || true)
# Each extra step counts as one test; its wall time goes to the log, so a
# slow CI run says which step, and the last lines name each failed one (CI
# shows only the tail).
failed_steps=()
run_step() {
  local start=$SECONDS
  if "$@"; then
    passed=$((passed + 1))
  else
    status=1
    failed=$((failed + 1))
    failed_steps+=("$*")
  fi
  echo "test.sh: $* took $((SECONDS - start)) s (total $SECONDS s)"
}
tests_passed=$((status == 0))
if ((tests_passed)); then
  run_step /usr/bin/python3 tools/layering_test.py --bazel
  run_step /usr/bin/python3 tools/docs_test.py
fi
if ((tests_passed && !quick)); then
  run_step tools/thread_safety_build.sh
  run_step tools/warnings_check.sh //kernels/...
  run_step tools/client_test.sh
  run_step tools/openai_test.sh
  run_step tools/metrics_test.sh
  run_step tools/rules_test.sh
  run_step tools/deploy_test.sh
  run_step /usr/bin/python3 -m unittest discover -s bench -p '*_test.py'
  run_step tools/bench.sh --quick
  run_step tools/cuda_build.sh --check
  run_step tools/fuzz.sh "${LOOKAHEAD_FUZZ_SECONDS:-60}"
fi
for step in "${failed_steps[@]}"; do
  echo "test.sh: FAILED: $step"
done
if ((!tests_passed)); then
  grep -E '^//.* (FAILED|TIMEOUT|NO STATUS|INCOMPLETE)' "$log" || true
fi
echo "${passed} passed, ${failed} failed"
exit "$status"
