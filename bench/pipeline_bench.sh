#!/usr/bin/env bash
# Pipeline-parallel throughput: `titan train` on 1 rank vs PP 2 with each schedule, the
# same model (a 4-layer dim-256 Llama, untied), global batch (8 rows of 256 tokens) and
# microbatches (4 of 2 rows). The 1-rank run uses all the machine's threads; the PP
# ranks split them (titan's default: cores / local ranks), so on one machine PP can at
# best match 1 rank: the figure is the pipeline's overhead (bubble + messages), not a
# speed-up. Per run: the median tokens/s and step time over the steps after the first
# two, and rank 0's median pp_wait_ms (time blocked in receives), with the 1-minute
# load average before and after. Results: docs/benchmarks.md, "Pipeline parallelism".
#   bench/pipeline_bench.sh [BUILD_DIR] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-12}
ninja -C "$BUILD" titan_cli >/dev/null
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
MODEL=(--recipe debugmodel --model.tie_embeddings=false --model.dim=256 --model.n_layers=4 --model.n_heads=8
       --model.n_kv_heads=4 --model.ffn_hidden_dim=768 --training.seq_len=256 --training.global_batch_size=8
       --training.steps="$STEPS" --validation.enabled=false --lr_scheduler.warmup_steps=1 --metrics.log_freq=1000)
MPI=(mpirun --oversubscribe --allow-run-as-root -np 2)

summary() {  # name dump load_before
  /usr/bin/python3 - "$1" "$2/metrics.jsonl" "$3" "$(cut -d' ' -f1 /proc/loadavg)" <<'EOF'
import json, statistics, sys
name, path, load0, load1 = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if '"loss"' in l][2:]
tps = statistics.median(r["tokens_per_s"] for r in rows)
ms = statistics.median(r["step_ms"] for r in rows)
wait = statistics.median(r["pp_wait_ms"] for r in rows) if "pp_wait_ms" in rows[0] else 0.0
print(f"| {name} | {tps:.0f} | {ms:.0f} | {wait:.0f} | {load0} -> {load1} |")
EOF
}

echo "| run | tokens/s | step ms | pp_wait_ms (rank 0) | load avg 1 min |"
echo "|---|---|---|---|---|"
load=$(cut -d' ' -f1 /proc/loadavg)
"$BUILD/titan" train "${MODEL[@]}" --training.local_batch_size=2 --job.dump_folder="$OUT/one" >"$OUT/one.log" 2>&1
summary "1 rank, 4 accumulated microbatches" "$OUT/one" "$load"
for sched in GPipe 1F1B Interleaved1F1B; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  "${MPI[@]}" "$BUILD/titan" train "${MODEL[@]}" --training.local_batch_size=8 \
    --parallelism.pipeline_parallel_degree=2 --parallelism.pipeline_parallel_microbatch_size=2 \
    --parallelism.pipeline_parallel_schedule="$sched" --job.dump_folder="$OUT/$sched" >"$OUT/$sched.log" 2>&1
  summary "PP 2 $sched" "$OUT/$sched" "$load"
done
