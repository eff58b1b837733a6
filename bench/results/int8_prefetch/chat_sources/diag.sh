#!/bin/bash
# Qwen2.5-Coder-1.5B chat prompts, per draft source: draftsvc (the 0.5B
# assistant, --draft_sources=$SOURCES) and verifysvc started here, one
# bench/run.py per mode in $MODES against them (plain + the mode), then
# both services' metrics. Run from the repository root after tools/bench.sh
# built the binaries and tools/setup.sh fetched both models:
#   MODES="default assistant jacobi mixed" OUT=/tmp/diag1 diag.sh
# DRAFTSVC_EXTRA adds draftsvc flags (the assistant's chain, deadline...).
# Every mode in one call shares the services: later modes see a namespace
# that already holds the earlier modes' outputs of the same prompts.
set -u
M=$HOME/.cache/lookahead/models
W=${OUT:-/tmp/diag}
rm -rf "$W"; mkdir -p "$W"
B=.bazel/bin
$B/draftsvc/draftsvc --port=50161 --metrics_port=9193 --db_path="$W/db" \
  --assistant_model=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --assistant_threads=2 ${DRAFTSVC_EXTRA:-} \
  --draft_sources=${SOURCES:-trie,ngram,assistant} > "$W/draftsvc.log" 2>&1 &
DP=$!
sleep 3
$B/verifysvc/verifysvc --port=50151 --metrics_port=9191 --http_port=0 \
  --draftsvc=127.0.0.1:50161 --prefix_cache_mib=0 \
  --model=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "$@" \
  > "$W/verifysvc.log" 2>&1 &
VP=$!
for _ in $(seq 120); do grep -q "serving on" "$W/verifysvc.log" && break; sleep 1; done
grep -E "forward ms" "$W/verifysvc.log"
for mode in ${MODES:-hierarchical}; do
  /usr/bin/python3 bench/run.py --verifysvc=127.0.0.1:50151 --no_main \
    --source_modes="plain,$mode" --workloads="${WORKLOADS:-chat}" \
    --limit=${LIMIT:-4} --warmup=1 --max_new_tokens=${TOK:-128} --out="$W/bench_$mode" \
    > "$W/bench_$mode.log" 2>&1
  tail -1 "$W/bench_$mode.log"
done
curl -s 127.0.0.1:9191/metrics | grep -E "^lookahead_spec_decode|^lookahead_decoding_steps|^lookahead_cost_gate" > "$W/v.prom"
curl -s 127.0.0.1:9193/metrics | grep -vE "^#" > "$W/d.prom"
kill $VP; sleep 2; kill $DP; wait
