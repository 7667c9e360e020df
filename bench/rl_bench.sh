#!/usr/bin/env bash
# RL step benchmark: the demo recipe (alphabet_sort_grpo from the SFT export)
# for a few steps in synchronous mode and in asynchronous mode with
# max_offpolicy_steps=1 (with the 2-thread kernel pool shared by generator and trainer,
# and with TITAN_NUM_THREADS=1 so that each side runs on its own core). Reports the
# mean step time split into generation, scoring, training and weight sync (steps 2..N;
# step 1 warms up), the async/sync ratio, the sync share, and peak RSS per run.
# Results: docs/benchmarks.md, section "RL step".
#   bench/rl_bench.sh [BUILD_DIR] [STEPS]     (needs outputs/alphabet_sort_sft/hf: make demo
#                                              or titan train --recipe alphabet_sort_sft)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${2:-6}
ninja -C "$BUILD" titan_cli >/dev/null
test -d outputs/alphabet_sort_sft/hf || { echo "error: outputs/alphabet_sort_sft/hf missing (run the SFT recipe first)"; exit 2; }
OUT=outputs/rl_bench
rm -rf "$OUT"
run() {  # name, env, extra args
  local name=$1 envs=$2; shift 2
  echo "--- $name" >&2
  env $envs /usr/bin/time -f "%M" -o "$OUT/$name.rss" "./$BUILD/titan" rl --recipe alphabet_sort_grpo \
    --job.dump_folder="$OUT/$name" --training.steps="$STEPS" --rl.val_freq=0 --checkpoint.enable=false "$@" \
    > "$OUT/$name.log"
}
mkdir -p "$OUT"
run sync "TITAN_NUM_THREADS=2"
run async "TITAN_NUM_THREADS=2" --rl.max_offpolicy_steps=1
run async_1thread "TITAN_NUM_THREADS=1" --rl.max_offpolicy_steps=1
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}/metrics.jsonl") if l.strip()]
    rows = [r for r in rows if r["step"] >= 2]
    mean = lambda k: sum(r[k] for r in rows) / len(rows)
    rss = int(open(f"{out}/{name}.rss").read().split()[-1]) / 1024
    return {k: mean(k) for k in ("step_ms", "gen_ms", "score_ms", "train_ms", "sync_ms")} | {
        "lag": max(r["offpolicy_lag_max"] for r in rows), "rss": rss, "n": len(rows),
        "gen_tps": mean("gen_tokens_per_s"), "train_tps": mean("train_tokens_per_s")}
res = {n: load(n) for n in ("sync", "async", "async_1thread")}
print(f"{'mode':<14} {'step ms':>8} {'gen ms':>8} {'score ms':>8} {'train ms':>8} {'sync ms':>8} {'sync %':>7}"
      f" {'gen tok/s':>9} {'train tok/s':>11} {'lag':>4} {'peak RSS MiB':>12}")
for n, r in res.items():
    print(f"{n:<14} {r['step_ms']:8.0f} {r['gen_ms']:8.0f} {r['score_ms']:8.2f} {r['train_ms']:8.0f} {r['sync_ms']:8.2f}"
          f" {100 * r['sync_ms'] / r['step_ms']:6.2f}% {r['gen_tps']:9.0f} {r['train_tps']:11.0f} {r['lag']:4d} {r['rss']:12.0f}")
for n in ("async", "async_1thread"):
    print(f"{n} / sync step time: {res[n]['step_ms'] / res['sync']['step_ms']:.3f} (target <= 0.75)")
PY
