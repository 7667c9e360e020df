#!/usr/bin/env python3
"""Distributed training benchmark (bench/distributed_bench.sh): `titan train` on the
"small" model under mpirun, one microbatch per dp rank per step (global batch 8 rows
of 512 tokens), so that FSDP's bytes per step can be set against the textbook figure.

Usage: distributed_bench.py BUILD_DIR [--steps 5] [--warmup-steps 2] [--only fsdp2,tp2,...]
                             [--repeat N]

--repeat N runs the selected layouts N times in turn (1rank, fsdp2, ..., 1rank, fsdp2,
...), so that a shared machine's load falls on all of them alike; each run prints a row.

Per layout, from metrics.jsonl (rank 0's collectives; memory the largest rank's) and the
medians over the steps after the warm-up:
  tokens/s, rss_mb (resident memory of the largest rank at the step's end), mem_base_mb
  (parameters, gradients and optimizer state live at a step's start, largest rank),
  mem_step_mb (the largest rank's peak of live tensor storage in the step above that
  base: activations, gathered weights, full gradients), comm_ms and
  comm_bytes per step, comm share = comm_ms / step_ms (time inside collectives, which
  includes waiting for the slower rank);
  FSDP: wire = fsdp_all_gather_bytes + fsdp_reduce_bytes against
  2 (N-1)/N × parameter bytes (one all-gather + one reduce-scatter of every f32 parameter
  per step) and against what this FSDP sends: with fsdp_reshard_after_forward=always
  every block is gathered again for its backward (3 (N-1)/N × block bytes + 2 (N-1)/N ×
  root bytes), with =never it is not (the textbook figure).
"""
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SMALL = ["--recipe=shakespeare_char", "--model.dim=512", "--model.n_layers=8", "--model.n_heads=8",
         "--model.n_kv_heads=4", "--model.ffn_hidden_dim=1536", "--model.vocab_size=32000",
         "--training.seq_len=512", "--optimizer.lr=3e-4", "--optimizer.beta2=0.95",
         "--lr_scheduler.warmup_steps=2", "--lr_scheduler.min_lr=0", "--validation.enabled=false",
         "--training.global_batch_size=8", "--metrics.log_freq=1"]
D, L, F, V, H, HKV, DH = 512, 8, 1536, 32000, 8, 4, 64
BLOCK_PARAMS = D * H * DH * 2 + D * HKV * DH * 2 + 3 * D * F + 2 * D
ROOT_PARAMS = V * D + D  # tied embedding + final norm
PARAMS = L * BLOCK_PARAMS + ROOT_PARAMS

LONG = ["--training.seq_len=2048", "--training.local_batch_size=2", "--training.global_batch_size=2"]

# name: (ranks, dp_shard, tp, extra; extra comes last and overrides)
LAYOUTS = {
    "1rank": (0, 1, 1, []),
    "fsdp2": (2, 2, 1, []),
    "fsdp2_never": (2, 2, 1, ["--parallelism.fsdp_reshard_after_forward=never"]),
    "tp2": (2, 1, 2, ["--parallelism.enable_sequence_parallel=false"]),
    "tp2_sp": (2, 1, 2, ["--parallelism.enable_sequence_parallel=true"]),
    "fsdp4": (4, 4, 1, []),
    "fsdp4_never": (4, 4, 1, ["--parallelism.fsdp_reshard_after_forward=never"]),
    "tp4_sp": (4, 1, 4, ["--parallelism.enable_sequence_parallel=true"]),
    "fsdp2_tp2_sp": (4, 2, 2, ["--parallelism.enable_sequence_parallel=true"]),
    # Context parallelism at a long sequence: 2 rows of 2048 tokens per step, 1 rank
    # against the sequence split over 2 cp ranks (FSDP over the 2 cp ranks).
    "1rank_s2k": (0, 1, 1, LONG),
    "cp2_s2k": (2, 1, 1, LONG + ["--parallelism.context_parallel_degree=2"]),
}


def run(build, name, steps):
    np_, S, T, extra = LAYOUTS[name]
    dump = tempfile.mkdtemp(prefix=f"titan_dist_bench_{name}_")
    args = [os.path.join(build, "titan"), "train", *SMALL, f"--training.steps={steps}",
            f"--training.local_batch_size={8 // S}", f"--parallelism.data_parallel_shard_degree={S}",
            f"--parallelism.tensor_parallel_degree={T}", f"--job.dump_folder={dump}", *extra]
    if np_:
        args = ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np_), *args]
    t0 = time.time()
    log = open(os.path.join(dump, "log.txt"), "w")
    p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    metrics = os.path.join(dump, "metrics.jsonl")

    def rows():
        if not os.path.exists(metrics):
            return []
        out = []
        for line in open(metrics):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a row being written
        return [r for r in out if "loss" in r]

    # The run ends with a 300-token sample (run_train_job), irrelevant here: once the last
    # step's row is written the job is ended.
    while p.poll() is None and len(rows()) < steps:
        time.sleep(0.5)
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    elif len(rows()) < steps:
        sys.exit(f"{name}: exit {p.returncode}\n{open(os.path.join(dump, 'log.txt')).read()[-3000:]}")
    r = rows()
    shutil.rmtree(dump, ignore_errors=True)
    return r, time.time() - t0


def med(rows, key, warmup):
    vals = [r.get(key, 0.0) for r in rows[warmup:] or rows]
    return statistics.median(vals)


def main():
    build = sys.argv[1]
    steps, warmup, only, repeat = 5, 2, None, 1
    a = sys.argv[2:]
    while a:
        k = a.pop(0)
        if k == "--steps":
            steps = int(a.pop(0))
        elif k == "--warmup-steps":
            warmup = int(a.pop(0))
        elif k == "--repeat":
            repeat = int(a.pop(0))
        elif k == "--only":
            only = a.pop(0).split(",")
        else:
            sys.exit(f"unknown argument {k}")
    if steps <= warmup:
        sys.exit("--steps must be larger than --warmup-steps")
    names = [n for n in LAYOUTS if not only or n in only] * repeat
    print(f"small: {PARAMS / 1e6:.1f}M params ({PARAMS * 4 / 2**20:.0f} MiB f32), 8 x 512 tokens per step, "
          f"{steps} steps (median of the last {steps - warmup}); load average {os.getloadavg()}")
    print(f"{'layout':<12} {'ranks':>5} {'tok/s':>8} {'step_ms':>8} {'rss_MiB':>8} {'base_MiB':>8} {'base/1':>6} "
          f"{'step_MiB':>8} {'comm_ms':>8} {'comm_MB':>8} {'comm%':>6} {'fsdp_MB':>8} {'/2(N-1)/N':>9} {'/expect':>8}")
    base1 = None
    for name in names:
        rows, wall = run(build, name, steps)
        np_, S, T, _ = LAYOUTS[name]
        tps, step_ms = med(rows, "tokens_per_s", warmup), med(rows, "step_ms", warmup)
        rss, base = med(rows, "rss_mb", warmup), med(rows, "mem_base_mb", warmup)
        step_mem = med(rows, "mem_step_mb", warmup)
        if name.startswith("1rank"):
            base1 = base
        comm_ms, comm_b = med(rows, "comm_ms", warmup), med(rows, "comm_bytes", warmup)
        fsdp_b = med(rows, "fsdp_all_gather_bytes", warmup) + med(rows, "fsdp_reduce_bytes", warmup)
        ratio_txt = ratio_re = ""
        if S > 1:
            pbytes = 4 * PARAMS / T  # the f32 pieces FSDP shards (tp pieces under TP)
            textbook = 2 * (S - 1) / S * pbytes
            reshard = (S - 1) / S * 4 * (3 * L * BLOCK_PARAMS + 2 * ROOT_PARAMS) / T
            if "--parallelism.fsdp_reshard_after_forward=never" in LAYOUTS[name][3]:
                reshard = textbook
            ratio_txt, ratio_re = f"{fsdp_b / textbook:.3f}", f"{fsdp_b / reshard:.3f}"
        print(f"{name:<12} {max(np_, 1):>5} {tps:>8.0f} {step_ms:>8.0f} {rss:>8.0f} {base:>8.0f} "
              f"{(base / base1 if base1 else float('nan')):>6.2f} {step_mem:>8.0f} {comm_ms:>8.0f} {comm_b / 1e6:>8.1f} "
              f"{100 * comm_ms / step_ms:>5.1f}% {fsdp_b / 1e6:>8.1f} {ratio_txt:>9} {ratio_re:>8}", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
