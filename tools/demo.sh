#!/usr/bin/env bash
# The main job on the embedded default: starts draftsvc (RocksDB under
# ~/.cache/lookahead) and verifysvc (SmolLM2-135M-Instruct) on loopback,
# asks a RAG question about real documents (BM25 over the licenses Debian
# ships in /usr/share/common-licenses), streams the answer, and prints EDL and
# the speedup over the same request with drafts off, measured in the same
# run (the two answers must be token for token identical). Then stops both
# services cleanly (SIGTERM: verifysvc drains, draftsvc flushes).
#
#   tools/demo.sh ["another question"]
set -euo pipefail
cd "$(dirname "$0")/.."

readonly QUESTION="${1:-What does each Contributor grant to You under the patent license? Answer with the exact words of the passage.}"

tools/setup.sh
bazel build //draftsvc:draftsvc //verifysvc:verifysvc
clients/python/gen_protos.sh >/dev/null

work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    if kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

# Starts a server in the background and waits for the port it bound.
start() {
  local name=$1
  shift
  "$@" --host=127.0.0.1 --port=0 --port_file="$work/$name.port" \
    >"$work/$name.log" 2>&1 &
  pids=("$!" "${pids[@]}")  # Stop in reverse order: verifysvc first.
  for _ in $(seq 600); do
    [[ -s "$work/$name.port" ]] && return 0
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  echo "$name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

db="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/draftsvc-db"
start draftsvc .bazel/bin/draftsvc/draftsvc --db_path="$db"
draftsvc="127.0.0.1:$(cat "$work/draftsvc.port")"
echo "draftsvc on $draftsvc, db $db"
# The global trie persists across runs: a repeated question finds its own
# earlier answer there (higher EDL). Remove the db directory for a cold start.
grep -m1 "rebuilt" "$work/draftsvc.log" || true
start verifysvc .bazel/bin/verifysvc/verifysvc --draftsvc="$draftsvc"
verifysvc="127.0.0.1:$(cat "$work/verifysvc.port")"
echo "verifysvc on $verifysvc"
grep -m2 -E "model|forward ms" "$work/verifysvc.log" || true
echo

/usr/bin/python3 clients/python/examples/rag.py --server="$verifysvc" \
  --question="$QUESTION" --stats

echo
cleanup_msg() { tail -n1 "$work/verifysvc.log"; tail -n1 "$work/draftsvc.log"; }
kill -TERM "${pids[@]}"
wait "${pids[@]}" || true
pids=()
cleanup_msg
