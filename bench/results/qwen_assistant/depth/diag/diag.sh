#!/bin/bash
set -u
cd /work/main
M=$HOME/.cache/lookahead/models
W=/tmp/diag; rm -rf $W; mkdir -p $W
B=.bazel/bin
$B/draftsvc/draftsvc --port=50161 --metrics_port=9193 --db_path=$W/db \
  --assistant_model=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf $DEXTRA > $W/draftsvc.log 2>&1 &
DP=$!
sleep 3
$B/verifysvc/verifysvc --port=50151 --metrics_port=9191 --http_port=0 \
  --draftsvc=127.0.0.1:50161 --model=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \
  "$@" > $W/verifysvc.log 2>&1 &
VP=$!
for i in $(seq 120); do grep -q "serving on" $W/verifysvc.log && break; sleep 1; done
scrape() { curl -s 127.0.0.1:9191/metrics | grep -E "^lookahead_(spec_decode|cost_gate|draft_rpc|draftsvc)" > $W/v_$1.prom; curl -s 127.0.0.1:9193/metrics | grep -E "^lookahead_(assistant|draft_proposed|draft_accepted|draft_sessions)" > $W/d_$1.prom; }
scrape 0
i=1
for wl in $WLS; do
  /usr/bin/python3 bench/run.py --verifysvc=127.0.0.1:50151 --no_main \
    --source_modes=plain,assistant --workloads=$wl --limit=4 --warmup=1 \
    --max_new_tokens=64 --out=$W/bench_$wl > $W/bench_$wl.log 2>&1
  scrape $i; i=$((i+1))
  cat $W/bench_$wl.log | grep -E "sources|run:"
done
kill $VP; sleep 2; kill $DP; wait
