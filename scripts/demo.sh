#!/usr/bin/env bash
# The main job on the shipped data, from scratch:
#   1. titan train --recipe alphabet_sort_sft   small Qwen3-style chat model trained on
#      alphabet_sort demonstrations (HF export in outputs/alphabet_sort_sft/hf);
#   2. titan rl --recipe alphabet_sort_grpo     GRPO from that checkpoint, generator and
#      trainer bitwise in agreement (logprob_diff_max == 0 at every step);
#   3. the summary: greedy validation reward before and after RL, the largest
#      logprob_diff_max over all steps, where the metrics and rollouts are;
#   4. the reward plot (scripts/plot_metrics.py): outputs/alphabet_sort_grpo/reward.png.
# Extra arguments go to `titan rl` (e.g. --training.steps=10). BUILD selects the build
# folder (default: build). The pretraining reference run stays available as
# `titan train --recipe shakespeare_char`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
TITAN=./$BUILD/titan
SFT=outputs/alphabet_sort_sft
RL=outputs/alphabet_sort_grpo
$TITAN info
rm -rf "$SFT" "$RL"  # a fresh run (both commands would otherwise resume)
t0=$(date +%s)
echo "=== 1/2 SFT: titan train --recipe alphabet_sort_sft"
$TITAN train --recipe alphabet_sort_sft --job.dump_folder=$SFT
t1=$(date +%s)
echo "=== 2/2 RL: titan rl --recipe alphabet_sort_grpo"
$TITAN rl --recipe alphabet_sort_grpo --job.dump_folder=$RL --rl.init_from=$SFT/hf "$@"
t2=$(date +%s)
/usr/bin/python3 - "$RL" $((t1 - t0)) $((t2 - t1)) <<'PY'
import json, sys
dump, sft_s, rl_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in open(f"{dump}/metrics.jsonl") if l.strip()]
vals = [(r["step"], r["val_reward"]) for r in rows if "val_reward" in r]
steps = [r for r in rows if r["step"] > 0 and "logprob_diff_max" in r]
worst = max(steps, key=lambda r: r["logprob_diff_max"])
print("=== summary")
print(f"val_reward (greedy, validation split): before RL {vals[0][1]:.4f} (step {vals[0][0]})"
      f" -> after RL {vals[-1][1]:.4f} (step {vals[-1][0]})")
print("val_reward by step: " + ", ".join(f"{s}: {v:.4f}" for s, v in vals))
print(f"largest logprob_diff_max over {len(steps)} steps: {worst['logprob_diff_max']!r}"
      f" (step {worst['step']}; 0.0 = generator and trainer agree bitwise)")
gain = vals[-1][1] - vals[0][1]
err0, err1 = 1 - vals[0][1], 1 - vals[-1][1]
print(f"gain: {gain:+.4f} absolute; error (1 - reward) {err0:.4f} -> {err1:.4f}"
      f" ({err1 / err0 if err0 > 0 else float('nan'):.2f}x)")
# The SFT teacher leaves the answer block out of 60 % of its demonstrations
# (alphabet_sort_sft's sft_untagged_frac); how often the sampled answers have it.
logged = [json.loads(l) for l in open(f"{dump}/rollouts.jsonl") if l.strip()]
def tagged(lo, hi):
    xs = [r for r in logged if lo <= r["step"] <= hi]
    return sum("<alphabetical_sorted>" in r["completion"] for r in xs) / max(len(xs), 1), len(xs)
last = max((r["step"] for r in logged), default=0)
(f0, n0), (f1, n1) = tagged(1, 10), tagged(max(last - 9, 1), last)
print(f"sampled answers with the <alphabetical_sorted> block: steps 1-10 {f0:.0%} ({n0} logged)"
      f" -> steps {max(last - 9, 1)}-{last} {f1:.0%} ({n1} logged)")
print(f"wall time: SFT {sft_s} s, RL {rl_s} s")
print(f"metrics: {dump}/metrics.jsonl | rollouts: {dump}/rollouts.jsonl | config: {dump}/config.toml")
PY
/usr/bin/python3 scripts/plot_metrics.py "$RL/metrics.jsonl" --out "$RL/reward.png" \
  --keys val_reward,reward_mean,logprob_diff_max,gen_tokens_per_s \
  --title "make demo: GRPO on alphabet_sort from the SFT export" >/dev/null
echo "reward plot: $RL/reward.png"
