#!/usr/bin/env bash
# The main job on the embedded default: starts draftsvc on loopback (RocksDB
# under ~/.cache/lookahead), asks a RAG question about a real document (the
# Apache License 2.0 shipped by Debian), streams the answer decoded with
# lookahead on SmolLM2-135M-Instruct, and prints EDL and the speedup over
# plain decoding of the same request, measured in the same run. Then stops
# draftsvc cleanly (SIGTERM: it flushes before exiting).
set -euo pipefail
cd "$(dirname "$0")/.."

tools/setup.sh
bazel build //draftsvc:draftsvc //verifysvc:lookahead_demo

work=$(mktemp -d)
draftsvc_pid=
cleanup() {
  if [[ -n "$draftsvc_pid" ]] && kill -0 "$draftsvc_pid" 2>/dev/null; then
    kill -TERM "$draftsvc_pid"
    wait "$draftsvc_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

db="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/draftsvc-db"
.bazel/bin/draftsvc/draftsvc --host=127.0.0.1 --port=0 \
  --port_file="$work/port" --db_path="$db" >"$work/draftsvc.log" 2>&1 &
draftsvc_pid=$!
for _ in $(seq 100); do
  [[ -s "$work/port" ]] && break
  kill -0 "$draftsvc_pid" 2>/dev/null || { cat "$work/draftsvc.log" >&2; exit 1; }
  sleep 0.1
done
[[ -s "$work/port" ]] || { echo "draftsvc did not start" >&2; exit 1; }
echo "draftsvc on 127.0.0.1:$(cat "$work/port"), db $db"
# The global trie persists across runs: a repeated question finds its own
# earlier answer there (higher EDL). Remove the db directory for a cold start.
grep -m1 "rebuilt" "$work/draftsvc.log" || true

# The document: section 3 of the Apache License 2.0 (/usr/share/common-licenses).
awk '/^   3\. Grant of Patent License/,/^   4\. Redistribution/' \
  /usr/share/common-licenses/Apache-2.0 | sed '$d' >"$work/passage.txt"

.bazel/bin/verifysvc/lookahead_demo \
  --draftsvc="127.0.0.1:$(cat "$work/port")" \
  --document="$work/passage.txt" \
  --question="What does each Contributor grant to You? Answer with the exact words of the passage."
