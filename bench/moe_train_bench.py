"""MoE training benchmark (bench/moe_train_bench.sh): `titan train` against PyTorch 2.13
CPU with transformers' DeepseekV3ForCausalLM (eager MoE), the same config.json, batch
shape, data and optimizer, 2 threads each, one after the other in one run.

Shapes: `debugmodel` (recipes/deepseek_v3_debugmodel.json: D 64, 4 layers, 8 experts
top-2 + 1 shared, seq 32, batch 4) and `medium` (bench/moe_medium.json: D 256, 4 layers,
16 experts top-4 + 1 shared, MLA q/kv ranks 64, seq 256, batch 4).
tokens/s: batch x seq / median step time after the warm-up steps. Peak RSS: /usr/bin/time -v.
Results: docs/benchmarks.md, section "MoE training".
"""
import argparse, json, os, shutil, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from train_bench import cpu_s, median_after_warmup, peak_rss_mb  # noqa: E402

SHAPES = {
    "debugmodel": dict(config="recipes/deepseek_v3_debugmodel.json", seq=32, batch=4),
    "medium": dict(config="bench/moe_medium.json", seq=256, batch=4),
}


def venv_python(build):
    for line in open(os.path.join(build, "CMakeCache.txt")):
        if line.startswith("TITAN_VENV:"):
            return os.path.join(line.split("=", 1)[1].strip(), "bin", "python")
    return os.path.join(ROOT, ".venv", "bin", "python")


def run_titan(build, shape, steps, warmup, work):
    s = SHAPES[shape]
    dump = os.path.join(work, "titan_" + shape)
    shutil.rmtree(dump, ignore_errors=True)
    cmd = ["/usr/bin/time", "-v", os.path.join(build, "titan"), "train", "--recipe", "deepseek_v3_debugmodel",
           f"--model.hf_config={s['config']}", f"--training.seq_len={s['seq']}",
           f"--training.local_batch_size={s['batch']}", f"--training.steps={steps}", "--optimizer.lr=3e-4",
           "--optimizer.beta2=0.95", "--optimizer.weight_decay=0.1", "--validation.enabled=false",
           "--checkpoint.enable=false", "--metrics.log_freq=1", f"--job.dump_folder={dump}"]
    env = dict(os.environ, TITAN_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"titan failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl")) if '"loss"' in l]
    step_ms = median_after_warmup([r["step_ms"] for r in rows], warmup)
    return {"tokens_per_s": s["batch"] * s["seq"] / (step_ms / 1e3), "step_ms": step_ms,
            "peak_rss_mb": peak_rss_mb(p.stderr), "cpu_s": cpu_s(p.stderr),
            "losses": [round(r["loss"], 4) for r in rows],
            "max_load": statistics.median(r.get("moe_max_load", float("nan")) for r in rows)}


def run_torch(build, shape, steps, warmup):
    s = SHAPES[shape]
    cmd = ["/usr/bin/time", "-v", venv_python(build), os.path.join(HERE, "moe_train_torch.py"),
           "--config", os.path.join(ROOT, s["config"]), "--data", data_file(), "--seq", str(s["seq"]),
           "--batch", str(s["batch"]), "--steps", str(steps), "--threads", "2"]
    p = subprocess.run(cmd, env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"torch failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    step_ms = median_after_warmup(out["step_ms"], warmup)
    return {"tokens_per_s": s["batch"] * s["seq"] / (step_ms / 1e3), "step_ms": step_ms,
            "peak_rss_mb": peak_rss_mb(p.stderr), "cpu_s": cpu_s(p.stderr),
            "losses": [round(x, 4) for x in out["losses"]]}


def data_file():
    for d in (os.environ.get("TITAN_DATA", ""), os.path.join(ROOT, "data")):
        f = os.path.join(d, "tinyshakespeare", "input.txt")
        if d and os.path.exists(f):
            return f
    sys.exit("error: tinyshakespeare/input.txt not found under TITAN_DATA or data/")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--only", choices=sorted(SHAPES))
    a = ap.parse_args()
    work = os.path.join(a.build, "moe_train_bench")
    os.makedirs(work, exist_ok=True)
    print("| shape | titan tok/s | torch tok/s | ratio | titan peak RSS MiB | torch peak RSS MiB | RSS ratio |")
    print("|---|---|---|---|---|---|---|")
    for shape in [a.only] if a.only else list(SHAPES):
        t = run_titan(a.build, shape, a.steps, a.warmup, work)
        p = run_torch(a.build, shape, a.steps, a.warmup)
        print(f"| {shape} | {t['tokens_per_s']:.0f} | {p['tokens_per_s']:.0f} | "
              f"{t['tokens_per_s'] / p['tokens_per_s']:.2f}x | {t['peak_rss_mb']:.0f} | {p['peak_rss_mb']:.0f} | "
              f"{t['peak_rss_mb'] / p['peak_rss_mb']:.2f} |", flush=True)
        print(f"  titan: step {t['step_ms']:.1f} ms, cpu {t['cpu_s']:.1f} s, losses {t['losses'][:3]}..., "
              f"median max expert load {t['max_load']:.2f}; torch: step {p['step_ms']:.1f} ms, "
              f"cpu {p['cpu_s']:.1f} s, losses {p['losses'][:3]}...", flush=True)


if __name__ == "__main__":
    main()
