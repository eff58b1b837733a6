# Sourced by scripts that run the service pair on loopback (demo.sh,
# client_test.sh). Servers log to $work/<name>.log and bind a free port,
# which start_server waits for and leaves in $work/<name>.port (a verifysvc's
# HTTP port in $work/<name>.http_port).
#
#   work=$(mktemp -d); source tools/servers.sh
#   trap 'stop_servers; rm -rf "$work"' EXIT
#   start_server draftsvc .bazel/bin/draftsvc/draftsvc --db_path="$work/db"

server_pids=()

# start_server NAME BINARY [FLAGS...]: starts it in the background and waits
# (up to 2 minutes) for its port; prints its log and fails if it dies first.
start_server() {
  local name=$1
  shift
  local http=()  # verifysvc's OpenAI HTTP front: a free port, never 8000
  [[ $name == verifysvc* ]] &&
    http=(--http_port=0 --http_port_file="$work/$name.http_port")
  "$@" --host=127.0.0.1 --port=0 --port_file="$work/$name.port" \
    --metrics_port=0 --metrics_port_file="$work/$name.metrics_port" \
    "${http[@]}" >"$work/$name.log" 2>&1 &
  server_pids=("$!" "${server_pids[@]}")  # Stopped newest first.
  for _ in $(seq 1200); do
    [[ -s "$work/$name.port" ]] && return 0
    kill -0 "${server_pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "$name did not start:" >&2
  cat "$work/$name.log" >&2
  return 1
}

# stop_servers: SIGTERM to each server, newest first, waiting for each (a
# verifysvc drains its streams, a draftsvc flushes).
stop_servers() {
  local pid
  for pid in "${server_pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid"
      wait "$pid" || true
    fi
  done
  server_pids=()
}
