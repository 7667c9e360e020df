#!/usr/bin/env bash
# bf16 training benchmark: `titan train` on the `small` model (41.6M params, seq 512,
# batch 8; bench/train_bench.py's TITAN_ARGS) in fp32 and with model.compute_dtype=bf16,
# and bench/train_torch.py --config small in fp32 and under torch.autocast bf16 with
# the PyPI venv's torch (2.13) and with Debian's torch 1.13, all on 2 threads, one after
# the other. Prints tokens/s (median step after the first) per run and the load
# average before and after. MFU is against the bf16 peak: 2 threads x 2 x the configured
# fp32 peak per core (config::kPeakFlopsPerCoreAvx512, 259.5 GFLOP/s): one VDPBF16PS
# does twice the FLOPs of an FMA at the same rate (the ratio build/bench/gemm_bf16_bench
# BM_peak measures is printed), with the model FLOPs per token titan reports. Each titan run is stopped (SIGINT)
# once its last step is logged, so the end-of-run text sample is not waited for.
# Results: docs/benchmarks.md, "bf16".
#   bench/train_bf16_bench.sh [BUILD_DIR] [STEPS] [VENV_PYTHON]
# PEERS (default "VENV_PYTHON /usr/bin/python3") lists the peer pythons (PEERS=" ": none);
# EXTRA_TITAN (optional) another titan binary run in bf16 after the first (a branch to
# compare); ROUNDS (default 1) repeats the titan runs in alternating rounds (fp32, bf16,
# EXTRA_TITAN bf16; the load average printed per round) before the peers run once;
# PEER_MODES (default "fp32 autocast") which peer runs to make.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-4}
VPY=${3:-${TITAN_VENV:-.venv}/bin/python}
SMALL="--recipe=shakespeare_char --model.dim=512 --model.n_layers=8 --model.n_heads=8 --model.n_kv_heads=4
  --model.ffn_hidden_dim=1536 --model.vocab_size=32000 --training.seq_len=512 --training.local_batch_size=8
  --optimizer.lr=3e-4 --optimizer.beta2=0.95 --lr_scheduler.warmup_steps=2 --lr_scheduler.min_lr=0
  --validation.enabled=false --metrics.log_freq=1 --training.steps=$STEPS"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
RATIO=$("$BUILD/bench/gemm_bf16_bench" --benchmark_filter=BM_peak --benchmark_format=json 2>/dev/null | python3 -c '
import json, sys
b = {r["name"].split("/")[1]: r.get("GFLOP/s") for r in json.load(sys.stdin)["benchmarks"]}
print(round(b["1"] / b["0"], 3) if b.get("0") and b.get("1") else "n/a (no AVX-512 / AVX512_BF16: the bf16 GEMM is emulated with fp32 FMAs)")')
PEAK=$(python3 -c "print(2 * 2 * 259.5e9)")
echo "bf16 peak: $(python3 -c "print(round($PEAK / 1e9))") GFLOP/s (2 threads); VDPBF16PS / FMA FLOP rate measured now: $RATIO"
FPT=0
run_titan() {  # binary dtype label
  local d n pid
  d=$(mktemp -d)
  TITAN_NUM_THREADS=2 "$1" train $SMALL --model.compute_dtype=$2 --job.dump_folder="$d" >"$d/log" 2>&1 &
  pid=$!
  n() { local c; c=$(grep -c '"loss"' "$d/metrics.jsonl" 2>/dev/null || true); echo "${c:-0}"; }
  while [ "$(n)" -lt "$STEPS" ] && kill -0 $pid 2>/dev/null; do sleep 0.5; done
  kill -INT $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  FPT=$(python3 - "$d/metrics.jsonl" "$3" "$PEAK" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
tps = [r["tokens_per_s"] for r in rows[1:]] or [rows[0]["tokens_per_s"]]
t = statistics.median(tps)
fpt = rows[-1]["mfu"] * 2 * 259.5e9 / rows[-1]["tokens_per_s"]  # titan's FLOPs per token
print(f"{sys.argv[2]}: {t:.0f} tokens/s (median of steps 2..{len(rows)}), mfu (bf16 peak) {fpt * t / float(sys.argv[3]):.3f}", file=sys.stderr)
print(fpt)
PY
)
  rm -rf "$d"
}
ROUNDS=${ROUNDS:-1}
for r in $(seq 1 "$ROUNDS"); do
  [ "$ROUNDS" -gt 1 ] && echo "round $r, load $(cut -d' ' -f1-3 /proc/loadavg)"
  run_titan "$BUILD/titan" f32 "titan f32"
  run_titan "$BUILD/titan" bf16 "titan bf16"
  if [ -n "${EXTRA_TITAN:-}" ]; then run_titan "$EXTRA_TITAN" bf16 "titan bf16 ($EXTRA_TITAN)"; fi
done
for py in ${PEERS:-$VPY /usr/bin/python3}; do
  for mode in ${PEER_MODES:-fp32 autocast}; do
    ac=""
    [ "$mode" = autocast ] && ac="--autocast-bf16"
    "$py" bench/train_torch.py --config small --steps "$STEPS" --threads 2 $ac | tail -1 | python3 -c '
import json, sys
o = json.loads(sys.stdin.read())
kind = "autocast bf16" if o.get("autocast_bf16") else "fp32"
t = o["tokens_per_s"]
print("torch", o.get("torch", "?"), kind + ":", round(t), "tokens/s, mfu (bf16 peak)", round(float(sys.argv[1]) * t / float(sys.argv[2]), 3))' "$FPT" "$PEAK"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
