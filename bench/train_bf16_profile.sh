#!/usr/bin/env bash
# Where a bf16 training step of the `small` model goes: `perf record -F 999 -g` of
# `titan train --model.compute_dtype=bf16` (bench/train_bf16_bench.sh's model and batch,
# 2 threads), attached after step 1 is logged and stopped once step STEPS is, for each
# titan binary given,
# in alternating rounds, then `perf report --no-children --sort symbol` (self time per
# symbol, share of all samples of both threads) with its top LINES lines and the sample
# count (the CPU time of both threads: less load-dependent than tokens/s), and the load
# average before and after each run. Results: docs/benchmarks.md, "bf16".
#   bench/train_bf16_profile.sh TITAN [TITAN...]   (env: STEPS=3 (>= 3: warmup is 2) ROUNDS=1 LINES=25)
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${STEPS:-3}
ROUNDS=${ROUNDS:-1}
LINES=${LINES:-25}
SMALL="--recipe=shakespeare_char --model.dim=512 --model.n_layers=8 --model.n_heads=8 --model.n_kv_heads=4
  --model.ffn_hidden_dim=1536 --model.vocab_size=32000 --training.seq_len=512 --training.local_batch_size=8
  --optimizer.lr=3e-4 --optimizer.beta2=0.95 --lr_scheduler.warmup_steps=2 --lr_scheduler.min_lr=0
  --validation.enabled=false --metrics.log_freq=1 --training.steps=$STEPS --model.compute_dtype=bf16"
n() { local c; c=$(grep -c '"loss"' "$1/metrics.jsonl" 2>/dev/null || true); echo "${c:-0}"; }
for r in $(seq 1 "$ROUNDS"); do
  for bin in "$@"; do
    d=$(mktemp -d)
    echo "== round $r: $bin (load before $(cut -d' ' -f1-3 /proc/loadavg))"
    TITAN_NUM_THREADS=2 "$bin" train $SMALL --job.dump_folder="$d" >"$d/log" 2>&1 &
    pid=$!
    while [ "$(n "$d")" -lt 1 ] && kill -0 $pid 2>/dev/null; do sleep 0.2; done
    if [ "$(n "$d")" -lt 1 ]; then echo "$bin failed:"; tail -n 3 "$d/log"; exit 1; fi
    perf record -q -F 999 -g -p $pid -o "$d/perf.data" 2>/dev/null &
    ppid=$!
    while [ "$(n "$d")" -lt "$STEPS" ] && kill -0 $pid 2>/dev/null; do sleep 0.2; done
    kill -INT $ppid 2>/dev/null || true
    wait $ppid 2>/dev/null || true
    kill -INT $pid 2>/dev/null || true
    wait $pid 2>/dev/null || true
    echo "load after $(cut -d' ' -f1-3 /proc/loadavg); tokens/s per step:" \
      $(python3 -c 'import json,sys; print(*[round(json.loads(l)["tokens_per_s"]) for l in open(sys.argv[1]) if "\"loss\"" in l])' "$d/metrics.jsonl")
    perf report -i "$d/perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null >"$d/report" || true
    grep -m1 '^# Samples' "$d/report" || true  # CPU time of both threads (999 samples per busy s)
    grep -v "^#" "$d/report" | grep -v "^$" | head -n "$LINES" || true
    rm -rf "$d"
  done
done
