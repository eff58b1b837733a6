#!/usr/bin/env bash
# The clients against the real service pair on loopback: the Python unit
# tests (BM25, passages), the Python client's end-to-end test, the RAG
# example and the C++ CLI, each with --stats, which fails unless drafts-on
# and drafts-off outputs are token for token identical. Expects the
# binaries built (tools/test.sh builds them) and the model (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

clients/python/gen_protos.sh >/dev/null
/usr/bin/python3 -m unittest discover -s clients/python

work=$(mktemp -d)
source tools/servers.sh
trap 'stop_servers; rm -rf "$work"' EXIT

start_server draftsvc .bazel/bin/draftsvc/draftsvc --db_path="$work/db"
start_server verifysvc .bazel/bin/verifysvc/verifysvc \
  --draftsvc="127.0.0.1:$(cat "$work/draftsvc.port")"
addr="127.0.0.1:$(cat "$work/verifysvc.port")"

VERIFYSVC_ADDR="$addr" /usr/bin/python3 clients/python/tests/client_e2e_test.py
/usr/bin/python3 clients/python/examples/rag.py --server="$addr" \
  --question="What is a Derivative Work?" --max_new_tokens=48 --stats
.bazel/bin/clients/cli/lookahead generate --server="$addr" \
  --prompt="The GNU General Public License is" --max_new_tokens=32 \
  --temperature=0.8 --top_p=0.95 --seed=7 --stats
echo "What is copyleft?" | .bazel/bin/clients/cli/lookahead chat \
  --server="$addr" --max_new_tokens=32 --stats
echo "client_test: OK"
