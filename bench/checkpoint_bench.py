#!/usr/bin/env python3
"""Checkpoint blocking benchmark: the trainer's blocking time per save, asynchronous vs
synchronous (checkpoint.async_mode), at 1, 2 and 4 ranks (FSDP) on the `small` model of
train_bench.py (41.6M parameters; the per-step work is cut to seq 64 x 1 row per rank
because the save, not the step, is measured). --layout pp runs pipeline parallelism
instead (pipeline_parallel_degree = the ranks, 1F1B, untied embeddings, the global batch
of 4 rows as 4 microbatches of 1): each rank saves its stages' tensors.

Usage: checkpoint_bench.py BUILD_DIR [--steps 6] [--interval 2] [--ranks 1,2,4] [--layout fsdp|pp] [--folder DIR]

Per run it reads rank 0's metrics.jsonl: checkpoint_blocking_ms of each save (save():
the snapshot, or the whole write + index when synchronous) plus checkpoint_poll_ms (the
per-step agreement that publishes an asynchronous write of several ranks), and the
bytes of the checkpoint's files per writing rank. Prints a markdown table.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

SMALL = ["--recipe=shakespeare_char", "--model.dim=512", "--model.n_layers=8", "--model.n_heads=8",
         "--model.n_kv_heads=4", "--model.ffn_hidden_dim=1536", "--model.vocab_size=32000",
         "--training.seq_len=64", "--training.local_batch_size=1", "--training.global_batch_size=4",
         "--optimizer.lr=3e-4", "--lr_scheduler.warmup_steps=2", "--lr_scheduler.min_lr=0",
         "--validation.enabled=false", "--checkpoint.export_hf=false", "--metrics.log_freq=1000"]


def layout_args(layout, np):
    if layout == "fsdp" or np == 1:
        return []
    return [f"--parallelism.pipeline_parallel_degree={np}", "--model.tie_embeddings=false",
            "--training.local_batch_size=4"]


def run(build, np, mode, steps, interval, folder, layout="fsdp"):
    dump = os.path.join(folder, f"ckbench_{layout}{np}_{mode}")
    shutil.rmtree(dump, ignore_errors=True)
    os.makedirs(dump)
    cmd = [] if np == 1 else ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np)]
    cmd += [os.path.join(build, "titan"), "train", *SMALL, *layout_args(layout, np), f"--training.steps={steps}", "--checkpoint.enable=true",
            f"--checkpoint.interval={interval}", f"--checkpoint.async_mode={mode}", "--checkpoint.keep_latest_k=1",
            f"--job.dump_folder={dump}"]
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl")) if l.strip()]
    saves = [r["checkpoint_blocking_ms"] for r in rows if "checkpoint_blocking_ms" in r]
    poll = sum(r.get("checkpoint_poll_ms", 0.0) for r in rows)
    writes = [r["checkpoint_write_ms"] for r in rows if "checkpoint_write_ms" in r]
    steps_ms = [r["step_ms"] for r in rows if "step_ms" in r]
    ck = os.path.join(dump, "checkpoint")
    last = sorted((d for d in os.listdir(ck) if d.startswith("step-")), key=lambda d: int(d[5:]))[-1]
    files = {f: os.path.getsize(os.path.join(ck, last, f)) for f in os.listdir(os.path.join(ck, last))}
    data = {f: b for f, b in files.items() if f.endswith(".safetensors")}
    shutil.rmtree(dump, ignore_errors=True)
    return {"saves": len(saves), "blocking_ms": (sum(saves) + poll) / len(saves), "save_ms": sum(saves) / len(saves),
            "poll_ms": poll / len(saves), "write_ms": sum(writes) / max(1, len(writes)),
            "step_ms": sum(steps_ms) / len(steps_ms), "bytes_per_rank": sum(data.values()) / len(data),
            "files": len(data), "wall_s": time.time() - t0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--interval", type=int, default=2)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--layout", choices=("fsdp", "pp"), default="fsdp")
    ap.add_argument("--folder", default="outputs")
    a = ap.parse_args()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} cores; "
          f"{a.steps} steps, a save every {a.interval}; layout {a.layout}")
    print("| ranks | mode | saves | blocking ms / save (save + poll) | write ms (background) | step ms | "
          "bytes per writing rank | async / sync |")
    print("|---|---|---|---|---|---|---|---|")
    for np in [int(x) for x in a.ranks.split(",")]:
        res = {m: run(a.build, np, m, a.steps, a.interval, a.folder, a.layout) for m in ("disabled", "async")}
        for m in ("disabled", "async"):
            r = res[m]
            ratio = f"{100 * r['blocking_ms'] / res['disabled']['blocking_ms']:.1f} %" if m == "async" else ""
            print(f"| {np} | {'sync' if m == 'disabled' else 'async'} | {r['saves']} | {r['blocking_ms']:.1f} "
                  f"({r['save_ms']:.1f} + {r['poll_ms']:.2f}) | {r['write_ms']:.0f} | {r['step_ms']:.0f} | "
                  f"{r['bytes_per_rank'] / 2**20:.1f} MiB x {r['files']} | {ratio} |", flush=True)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
