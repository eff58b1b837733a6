#!/bin/bash
# Depth-resolved acceptance on the Qwen pair: draftsvc (with the 0.5B
# assistant) and verifysvc (the 1.5B) started here, one bench/run.py per
# source mode against them, verifysvc's /metrics scraped around each
# (lookahead_spec_decode_num_accepted_tokens_per_pos_total; warm-up
# requests included). Run from the repository root after tools/bench.sh
# built the binaries and tools/setup.sh fetched both models:
#   OUT=/tmp/depth MODES="assistant default" WORKLOADS=code,chat \
#   DRAFTSVC_EXTRA="--assistant_threads=2 --assistant_deadline_ms=60" \
#     bench/results/qwen_assistant/depth/depth.sh --cost_gates=false [...]
# Extra arguments are verifysvc flags. Then: perpos.py $OUT MODE.
set -u
M=$HOME/.cache/lookahead/models
W=${OUT:-/tmp/depth}
rm -rf "$W"; mkdir -p "$W"
B=.bazel/bin
# shellcheck disable=SC2086
$B/draftsvc/draftsvc --port=50161 --metrics_port=9193 --db_path="$W/db" \
  --assistant_model=$M/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf \
  ${DRAFTSVC_EXTRA:-} > "$W/draftsvc.log" 2>&1 &
DP=$!
sleep 3
$B/verifysvc/verifysvc --port=50151 --metrics_port=9191 --http_port=0 \
  --draftsvc=127.0.0.1:50161 \
  --model=$M/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf "$@" \
  > "$W/verifysvc.log" 2>&1 &
VP=$!
for _ in $(seq 120); do grep -q "serving on" "$W/verifysvc.log" && break; sleep 1; done
grep -E "forward ms|serving" "$W/verifysvc.log"
scrape() {
  curl -s 127.0.0.1:9191/metrics | grep -E "^lookahead_spec_decode_num_" > "$W/$1.prom"
}
for mode in ${MODES:-assistant default}; do
  scrape "before_$mode"
  /usr/bin/python3 bench/run.py --verifysvc=127.0.0.1:50151 --no_main \
    --source_modes="plain,$mode" --workloads="${WORKLOADS:-code,chat}" \
    --limit=4 --warmup=1 --max_new_tokens=64 --out="$W/bench_$mode" \
    > "$W/bench_$mode.log" 2>&1
  scrape "after_$mode"
  tail -1 "$W/bench_$mode.log"
done
kill $VP; sleep 2; kill $DP; wait
