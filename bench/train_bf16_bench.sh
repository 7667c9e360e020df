#!/usr/bin/env bash
# bf16 training benchmark: `titan train` on the `small` model (41.6M params, seq 512,
# batch 8; bench/train_bench.py's TITAN_ARGS) in fp32 and with model.compute_dtype=bf16,
# and bench/train_torch.py --config small in fp32 and under torch.autocast bf16 with
# the PyPI venv's torch (2.13) and with Debian's torch 1.13, all on 2 threads, one after
# the other. Prints tokens/s (median step after the first) per run and the load
# average before and after. Results: docs/benchmarks.md, "bf16".
#   bench/train_bf16_bench.sh [BUILD_DIR] [STEPS] [VENV_PYTHON]
# PEERS (default "VENV_PYTHON /usr/bin/python3") lists the peer pythons.
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
for dt in f32 bf16; do
  d=$(mktemp -d)
  TITAN_NUM_THREADS=2 "$BUILD/titan" train $SMALL --model.compute_dtype=$dt --job.dump_folder="$d" >"$d/log" 2>&1
  python3 - "$d/metrics.jsonl" "$dt" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
tps = [r["tokens_per_s"] for r in rows[1:]] or [rows[0]["tokens_per_s"]]
print(f"titan {sys.argv[2]}: {statistics.median(tps):.0f} tokens/s (median of steps 2..{len(rows)}), mfu {rows[-1].get('mfu', 0):.3f}")
PY
  rm -rf "$d"
done
for py in ${PEERS:-$VPY /usr/bin/python3}; do
  for ac in "" "--autocast-bf16"; do
    "$py" bench/train_torch.py --config small --steps "$STEPS" --threads 2 $ac | tail -1 | python3 -c '
import json, sys
o = json.loads(sys.stdin.read())
kind = "autocast bf16" if o.get("autocast_bf16") else "fp32"
print("torch", o.get("torch", "?"), kind + ":", round(o["tokens_per_s"]), "tokens/s")'
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
