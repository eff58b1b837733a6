#!/bin/bash
# SmolLM2 (verifysvc's embedded default) per draft-source mode: draftsvc
# and verifysvc started here, one bench/run.py per mode in $MODES against
# them (plain + the mode, $WORKLOADS, default adversarial), and the CPU
# seconds each service used during it. Run from the repository root after
# tools/bench.sh built the binaries; extra arguments are verifysvc flags:
#   MODES=default WORKLOADS=adversarial,chat OUT=/tmp/s1 \
#     bench/results/free_asks/smollm2_sources.sh --free_ask_min_pass_ms=0.001
set -u
W=${OUT:-/tmp/adv}
rm -rf "$W"; mkdir -p "$W"
B=.bazel/bin
$B/draftsvc/draftsvc --port=50161 --metrics_port=9193 --db_path="$W/db" ${DRAFTSVC_EXTRA:-} > "$W/draftsvc.log" 2>&1 &
DP=$!
sleep 2
$B/verifysvc/verifysvc --port=50151 --metrics_port=9191 --http_port=0 \
  --draftsvc=127.0.0.1:50161 --prefix_cache_mib=0 "$@" > "$W/verifysvc.log" 2>&1 &
VP=$!
for _ in $(seq 120); do grep -q "serving on" "$W/verifysvc.log" && break; sleep 1; done
grep -E "forward ms" "$W/verifysvc.log"
cpu() { awk '{print ($14+$15)/100}' /proc/$1/stat; }
for mode in ${MODES:-hierarchical}; do
  d0=$(cpu $DP); v0=$(cpu $VP)
  /usr/bin/python3 bench/run.py --verifysvc=127.0.0.1:50151 --no_main \
    --source_modes="plain,$mode" --workloads="${WORKLOADS:-adversarial}" \
    --limit=${LIMIT:-16} --warmup=${WARM:-4} --max_new_tokens=${TOK:-128} --out="$W/bench_$mode" \
    > "$W/bench_$mode.log" 2>&1
  echo "cpu s: draftsvc $(echo "$(cpu $DP) - $d0" | bc) verifysvc $(echo "$(cpu $VP) - $v0" | bc)"
  grep -A4 "^| mode" "$W/bench_$mode/report.md"
done
curl -s 127.0.0.1:9191/metrics | grep -vE "^#" > "$W/v.prom"
curl -s 127.0.0.1:9193/metrics | grep -vE "^#" > "$W/d.prom"
kill $VP; sleep 1; kill $DP; wait
