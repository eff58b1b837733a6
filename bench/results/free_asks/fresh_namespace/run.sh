#!/bin/bash
# Qwen chat as the llama.cpp peer command drafts it: each prompt plain,
# then drafted in a namespace of its own (peerlike.py), on draftsvc (the
# 0.5B assistant loaded, --draft_sources=$1) and verifysvc started here.
# From the repository root, after tools/bench.sh built the binaries:
#   N=6 bench/results/free_asks/fresh_namespace/run.sh trie,ngram,assistant /tmp/with
set -u
M=$HOME/.cache/lookahead/models
W=$2; rm -rf $W; mkdir -p $W
B=.bazel/bin
$B/draftsvc/draftsvc --port=50161 --metrics_port=9193 --db_path="$W/db" \
  --assistant_model=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --assistant_threads=2 --draft_sources=$1 > "$W/draftsvc.log" 2>&1 &
DP=$!
sleep 3
$B/verifysvc/verifysvc --port=50151 --metrics_port=9191 --http_port=0 --draftsvc=127.0.0.1:50161 --prefix_cache_mib=0 \
  --model=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf > "$W/verifysvc.log" 2>&1 &
VP=$!
for _ in $(seq 120); do grep -q "serving on" "$W/verifysvc.log" && break; sleep 1; done
/usr/bin/python3 bench/results/free_asks/fresh_namespace/peerlike.py 127.0.0.1:50151 $W/rows.json ${N:-6} > $W/pl.log 2>&1
tail -1 $W/pl.log
curl -s 127.0.0.1:9191/metrics | grep -E "cost_gate|per_source" > "$W/v.prom"
curl -s 127.0.0.1:9193/metrics | grep -E "^lookahead_assistant" | grep -v bucket > "$W/d.prom"
kill $VP; sleep 1; kill $DP; wait
