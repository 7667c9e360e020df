#!/usr/bin/env bash
# titan's generator with f32 against bf16 weights (ENGINE_BENCH_DTYPE=bf16: bf16 compute,
# bf16 panels for the layers and the LM head) on the engine_bench model, side by side in
# one run: ROUNDS alternating rounds of BM_Decode/1/0, BM_Decode/8/0 and BM_Prefill512,
# with the same-run read bandwidth (gemm_bench BM_ReadBandwidth, 2 threads) before and
# after. Prints one line per run and, per benchmark and dtype, the median and the best
# (highest) tok/s over the rounds (on a shared machine the best is the least disturbed).
#
#   bench/engine_bf16_bench.sh [BUILD_DIR] (ROUNDS=3 by default)
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
FILTER='BM_Decode/1/0|BM_Decode/8/0|BM_Prefill512'
out=$(mktemp)
bw() { "$BUILD/bench/gemm_bench" --benchmark_filter='ReadBandwidth/thr:2' 2>/dev/null | awk '/BM_/{for(i=1;i<=NF;i++) if ($i ~ /^GB\/s=/) {sub("GB/s=","",$i); sub("/s","",$i); print $i}}'; }
echo "date $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD) load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "read bandwidth before: $(bw) GB/s"
for r in $(seq "$ROUNDS"); do
  for dt in f32 bf16; do
    ENGINE_BENCH_DTYPE=$dt "$BUILD/bench/engine_bench" --benchmark_filter="$FILTER" 2>&1 |
      awk -v dt=$dt -v r=$r '/^model:/{print "# " dt ": " $0} /^BM_/{
        tps=""; gbs=""; fwd=""; lg="";
        for(i=1;i<=NF;i++){ if($i ~ /^tok\/s=/){tps=$i; sub("tok/s=","",tps); sub("/s","",tps)}
          if($i ~ /^weight_GB\/s=/){gbs=$i; sub("weight_GB/s=","",gbs); sub("/s","",gbs)}
          if($i ~ /^fwd_ms=/){fwd=$i; sub("fwd_ms=","",fwd)} if($i ~ /^logits_ms=/){lg=$i; sub("logits_ms=","",lg)} }
        split($1, n, "/iterations"); print "run", r, dt, n[1], tps, (gbs==""?"-":gbs), (fwd==""?"-":fwd), (lg==""?"-":lg)}' | tee -a "$out"
  done
done
echo "read bandwidth after: $(bw) GB/s"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "benchmark dtype median_tok/s best_tok/s median_weight_GB/s (over $ROUNDS rounds)"
python3 - "$out" <<'PY'
import statistics, sys
def num(s):  # google-benchmark counters: 1.53091k
    return float(s[:-1]) * {"k": 1e3, "M": 1e6}[s[-1]] if s[-1] in "kM" else float(s)
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "run":
        rows.setdefault((f[3], f[2]), []).append((num(f[4]), f[5]))
for (bm, dt), v in sorted(rows.items()):
    t = [x for x, _ in v]
    g = [num(y) for _, y in v if y != "-"]
    print(bm, dt, f"{statistics.median(t):.1f}", f"{max(t):.1f}", f"{statistics.median(g):.2f}" if g else "-")
PY
rm -f "$out"
