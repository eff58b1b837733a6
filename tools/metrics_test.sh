#!/usr/bin/env bash
# Metrics end to end (tests/prometheus_test.py): starts draftsvc, verifysvc
# and a real Prometheus (Debian's, 1 s scrapes, dashboards/rules/) on
# loopback, runs generations and checks every dashboard and rule query
# against Prometheus' HTTP API. Expects the binaries built (tools/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

clients/python/gen_protos.sh >/dev/null
work=$(mktemp -d)
source tools/servers.sh
trap 'stop_servers; rm -rf "$work"' EXIT

start_server draftsvc .bazel/bin/draftsvc/draftsvc --db_path="$work/db"
start_server verifysvc .bazel/bin/verifysvc/verifysvc \
  --draftsvc="127.0.0.1:$(cat "$work/draftsvc.port")"

cat >"$work/prometheus.yml" <<YAML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - $PWD/dashboards/rules/lookahead.rules.yml
scrape_configs:
  - job_name: verifysvc
    static_configs:
      - targets: ["127.0.0.1:$(cat "$work/verifysvc.metrics_port")"]
        labels: {namespace: lookahead-test}
  - job_name: draftsvc
    static_configs:
      - targets: ["127.0.0.1:$(cat "$work/draftsvc.metrics_port")"]
        labels: {namespace: lookahead-test}
YAML
prom_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket();
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
prometheus --config.file="$work/prometheus.yml" \
  --storage.tsdb.path="$work/prometheus" \
  --web.listen-address="127.0.0.1:$prom_port" >"$work/prometheus.log" 2>&1 &
server_pids=("$!" "${server_pids[@]}")
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$prom_port/-/ready" >/dev/null && break
  sleep 0.2
done

VERIFYSVC_ADDR="127.0.0.1:$(cat "$work/verifysvc.port")" \
PROMETHEUS_URL="http://127.0.0.1:$prom_port" \
  /usr/bin/python3 tests/prometheus_test.py || {
    tail -n 20 "$work/prometheus.log" >&2
    exit 1
  }
