#!/usr/bin/env bash
# The main job on the embedded default: starts draftsvc (RocksDB under
# ~/.cache/lookahead) and verifysvc (SmolLM2-135M-Instruct, or the model
# --model=NAME names: tools/models.sh) on loopback,
# asks a RAG question about real documents (BM25 over the licenses Debian
# ships in /usr/share/common-licenses), streams the answer, and prints EDL and
# the speedup over the same request with drafts off, measured in the same
# run (the two answers must be token for token identical), with the draft
# tokens each source (trie, ngram, assistant) got accepted. Then stops both
# services cleanly (SIGTERM: verifysvc drains, draftsvc flushes).
#
#   tools/demo.sh ["another question"]
#   tools/demo.sh --http ["another question"]  # through the OpenAI API
#   tools/demo.sh --model=qwen2.5-coder-1.5b ["another question"]
#                               # after tools/setup.sh --model=NAME
#   LOOKAHEAD_DEMO_SOURCES=trie,ngram tools/demo.sh   # choose the sources
#
# With --http the same job goes through verifysvc's OpenAI-compatible HTTP
# front with the official `openai` package (clients/python/examples/
# rag_openai.py): EDL from the response's usage.lookahead, times from the
# client's clock.
set -euo pipefail
cd "$(dirname "$0")/.."
source tools/models.sh

front=grpc
model_name=$DEFAULT_MODEL
while [[ ${1:-} == --* ]]; do
  case $1 in
    --http) front=http ;;
    --model=*) model_name=${1#--model=} ;;
    *)
      echo "usage: tools/demo.sh [--http] [--model=NAME] [question]; NAME: ${MODEL_NAMES[*]}" >&2
      exit 2
      ;;
  esac
  shift
done
readonly QUESTION="${1:-What may you add as a Front-Cover Text to a Modified Version?}"

tools/setup.sh  # Fetches the default model, never another.
model=$(model_path "$model_name")
bazel build //draftsvc:draftsvc //verifysvc:verifysvc
clients/python/gen_protos.sh >/dev/null

work=$(mktemp -d)
source tools/servers.sh
trap 'stop_servers; rm -rf "$work"' EXIT

db="${XDG_CACHE_HOME:-$HOME/.cache}/lookahead/draftsvc-db"
# The trie holds token ids, and a namespace keeps the vocab_size it was made
# with: each other model gets a db of its own.
[[ $model_name == "$DEFAULT_MODEL" ]] || db+="-$model_name"
start_server draftsvc .bazel/bin/draftsvc/draftsvc --db_path="$db"
draftsvc="127.0.0.1:$(cat "$work/draftsvc.port")"
echo "draftsvc on $draftsvc, db $db"
# The global trie persists across runs: a repeated question finds its own
# earlier answer there (higher EDL). Remove the db directory for a cold start.
grep -m1 "rebuilt" "$work/draftsvc.log" || true
start_server verifysvc .bazel/bin/verifysvc/verifysvc --draftsvc="$draftsvc" --model="$model"
verifysvc="127.0.0.1:$(cat "$work/verifysvc.port")"
echo "verifysvc on $verifysvc"
grep -m2 -E "model|forward ms" "$work/verifysvc.log" || true
echo

if [[ $front == http ]]; then
  base_url="http://127.0.0.1:$(cat "$work/verifysvc.http_port")/v1"
  echo "OpenAI API on $base_url"
  .venv/bin/python clients/python/examples/rag_openai.py \
    --base_url="$base_url" --question="$QUESTION" --stats \
    ${LOOKAHEAD_DEMO_SOURCES:+--sources="$LOOKAHEAD_DEMO_SOURCES"}
else
  /usr/bin/python3 clients/python/examples/rag.py --server="$verifysvc" \
    --question="$QUESTION" --stats \
    ${LOOKAHEAD_DEMO_SOURCES:+--sources="$LOOKAHEAD_DEMO_SOURCES"}
fi

echo
stop_servers  # Shows their clean shutdown lines.
tail -qn1 "$work/verifysvc.log" "$work/draftsvc.log"
