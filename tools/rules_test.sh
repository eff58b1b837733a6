#!/usr/bin/env bash
# Checks the monitoring files in dashboards/: the Prometheus rules parse
# (promtool check rules), their unit tests pass (promtool test rules), and
# the Grafana dashboard agrees with the rules and with queries.txt
# (dashboards/check_dashboard.py). Exits non-zero if any of them fails.
# Needs promtool (Debian package prometheus) and python3-yaml.
set -uo pipefail
cd "$(dirname "$0")/.."

if ! command -v promtool >/dev/null; then
  echo "rules_test: promtool not found; install the Debian package" \
       "prometheus (tools/setup.sh)" >&2
  exit 1
fi

status=0
run() {
  echo "+ $*"
  if ! "$@"; then
    echo "rules_test: FAILED: $*" >&2
    status=1
  fi
}
run promtool check rules dashboards/rules/lookahead.rules.yml
run promtool test rules dashboards/rules/lookahead.rules.test.yml
run /usr/bin/python3 dashboards/check_dashboard.py
((status == 0)) && echo "rules_test: OK"
exit "$status"
