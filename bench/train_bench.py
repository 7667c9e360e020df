"""Training throughput and memory: titan.cpp (`titan train`) vs PyTorch
(bench/train_torch.py, same model, batch, optimizer) in one run, plus titan.cpp
with training.activation_checkpoint=full vs none. Used by bench/train_bench.sh.

Usage: train_bench.py BUILD_DIR [--small-steps 8] [--shakespeare-steps 40] [--warmup-steps 3]
                      [--rounds 3] [--peer-openblas-core CORE] [--only small|shakespeare_char]
Both sides use 2 threads (TITAN_NUM_THREADS=2; torch.set_num_threads(2) with
OMP_WAIT_POLICY=PASSIVE, the PyTorch peer's best setting in perf-anchors.md).
The peer's OpenBLAS kernels: OpenBLAS picks them from the CPU (on the Zen5 machine,
"Cooperlake", AVX-512). An OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE pinned in the environment
(the project's machines pin "Haswell", AVX2, which halves OpenBLAS's GEMM rate on an
AVX-512 CPU: 4096x512x1536 at 2 threads, 236 vs 449 GFLOP/s) is removed for the peer;
--peer-openblas-core CORE sets one instead. The core OpenBLAS ran is printed.
tokens/s = batch x seq / median step time over the steps after the first --warmup-steps
(the same steps on both sides; PyTorch's first `small` steps are slow while its allocator
and OpenBLAS warm up: 10.9, 10.4, 6.8 s, then 5.3-6.6 s on the Zen5 machine).
--rounds R runs both sides R times per configuration, alternating (titan, PyTorch, then
PyTorch, titan, ...), so that the host's slow and fast minutes (step times on this shared
VM swing 10-40 % within minutes) fall on both sides alike; the reported ratio is the
median of the R per-round ratios; each side's table row is its run with the median
tokens/s (the lower middle one for an even R). The AC=full run is one run after the rounds.
Peak RSS: /usr/bin/time -v (maximum resident set size of the whole process).
titan's working memory per step: metrics.jsonl mem_step_mb = peak tensor-storage
bytes during the step above those live at its start (weights + optimizer state):
activations, gradients and temporaries.
"""
import argparse, json, os, re, shutil, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
# The data directory as titan resolves it: $TITAN_DATA, $TITAN_SHARED/data, else the repository's data/.
DATA = os.environ.get("TITAN_DATA") or (os.path.join(os.environ["TITAN_SHARED"], "data")
                                        if os.environ.get("TITAN_SHARED") else os.path.join(HERE, "..", "data"))

# titan overrides giving bench/train_torch.py's CONFIGS
TITAN_ARGS = {
    "shakespeare_char": ["--recipe=shakespeare_char", "--lr_scheduler.warmup_steps=10"],  # warmup < bench steps
    "small": ["--recipe=shakespeare_char", "--model.dim=512", "--model.n_layers=8", "--model.n_heads=8",
              "--model.n_kv_heads=4", "--model.ffn_hidden_dim=1536", "--model.vocab_size=32000",
              "--training.seq_len=512", "--training.local_batch_size=8", "--optimizer.lr=3e-4",
              "--optimizer.beta2=0.95", "--lr_scheduler.warmup_steps=2", "--lr_scheduler.min_lr=0"],
}


def cpu_s(time_stderr):
    u = re.search(r"User time \(seconds\): ([\d.]+)", time_stderr)
    k = re.search(r"System time \(seconds\): ([\d.]+)", time_stderr)
    return float(u.group(1)) + float(k.group(1)) if u and k else float("nan")


def peak_rss_mb(time_stderr):
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_stderr)
    return int(m.group(1)) / 1024.0 if m else float("nan")


def median_after_warmup(step_ms, warmup):
    return statistics.median(step_ms[warmup:] or step_ms)


def median_run(runs):
    """The run whose tokens/s is the median of the runs (the lower middle one for an even count)."""
    return sorted(runs, key=lambda r: r["tokens_per_s"])[(len(runs) - 1) // 2]


def run_titan(build, cfg, steps, warmup, work, extra=()):
    dump = os.path.join(work, "titan_" + cfg + "_" + "_".join(e.split("=")[-1] for e in extra))
    shutil.rmtree(dump, ignore_errors=True)
    cmd = ["/usr/bin/time", "-v", os.path.join(build, "titan"), "train", *TITAN_ARGS[cfg],
           f"--training.steps={steps}", "--validation.enabled=false", "--checkpoint.enable=false",
           "--metrics.log_freq=1", f"--job.dump_folder={dump}", *extra]
    env = dict(os.environ, TITAN_NUM_THREADS="2", OMP_WAIT_POLICY="PASSIVE")
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"titan failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    rows = [json.loads(l) for l in open(os.path.join(dump, "metrics.jsonl")) if '"loss"' in l]
    timed = rows[warmup:] or rows
    step_ms = median_after_warmup([r["step_ms"] for r in rows], warmup)
    tokens = rows[0]["tokens_per_s"] * rows[0]["step_ms"] / 1e3
    return {"tokens_per_s": tokens / (step_ms / 1e3), "step_ms": step_ms, "peak_rss_mb": peak_rss_mb(p.stderr),
            "cpu_s": cpu_s(p.stderr), "wall_s": sum(r["step_ms"] for r in rows) / 1e3,
            "mem_step_mb": statistics.median(r["mem_step_mb"] for r in timed),
            "mem_base_mb": timed[-1]["mem_base_mb"], "mfu": statistics.median(r["mfu"] for r in timed),
            "losses": [r["loss"] for r in rows], "all_step_ms": [round(r["step_ms"], 1) for r in rows]}


def run_torch(cfg, steps, warmup, openblas_core):
    cmd = ["/usr/bin/time", "-v", "/usr/bin/python3", os.path.join(HERE, "train_torch.py"), "--config", cfg,
           "--steps", str(steps), "--threads", "2"]
    if cfg == "shakespeare_char":
        cmd += ["--data", os.path.join(DATA, "tinyshakespeare", "input.txt")]
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env.update(OMP_WAIT_POLICY="PASSIVE", OPENBLAS_VERBOSE="2")  # verbose 2: OpenBLAS prints "Core: <name>"
    if openblas_core:
        env["OPENBLAS_CORETYPE"] = openblas_core
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"torch failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    out = json.loads(p.stdout.strip().splitlines()[-1])
    step_ms = median_after_warmup(out["step_ms"], warmup)
    return {"tokens_per_s": out["batch"] * out["seq"] / (step_ms / 1e3), "step_ms": step_ms,
            "peak_rss_mb": peak_rss_mb(p.stderr), "losses": out["losses"], "cpu_s": cpu_s(p.stderr),
            "wall_s": sum(out["step_ms"]) / 1e3,
            "all_step_ms": [round(x, 1) for x in out["step_ms"]],
            "openblas_core": (re.findall(r"Core: (\S+)", p.stderr) or ["?"])[-1]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--small-steps", type=int, default=8)
    ap.add_argument("--warmup-steps", type=int, default=3, help="first steps left out of the median")
    ap.add_argument("--peer-openblas-core", help="OPENBLAS_CORETYPE for PyTorch (default: OpenBLAS's own choice)")
    ap.add_argument("--shakespeare-steps", type=int, default=40)
    ap.add_argument("--only", choices=["small", "shakespeare_char"])
    ap.add_argument("--rounds", type=int, default=3, help="alternating titan/PyTorch runs per configuration")
    a = ap.parse_args()
    if a.rounds < 1:
        ap.error(f"--rounds {a.rounds} must be >= 1")
    # shakespeare_char's titan run warms its learning rate up over 10 steps (TITAN_ARGS)
    for name, steps, least in (("--small-steps", a.small_steps, 1), ("--shakespeare-steps", a.shakespeare_steps, 11)):
        if steps < max(least, a.warmup_steps + 1):
            ap.error(f"{name} {steps} must be at least {max(least, a.warmup_steps + 1)} "
                     f"(more than --warmup-steps {a.warmup_steps})")
    if a.warmup_steps < 0:
        ap.error(f"--warmup-steps {a.warmup_steps} must be >= 0")
    work = tempfile.mkdtemp(prefix="titan_train_bench_")
    results = {}
    for cfg, steps in (("shakespeare_char", a.shakespeare_steps), ("small", a.small_steps)):
        if a.only and cfg != a.only:
            continue
        ts, ps = [], []
        for r in range(a.rounds):  # alternate the order so drift of the host's speed hits both sides
            if r % 2 == 0:
                ts.append(run_titan(a.build, cfg, steps, a.warmup_steps, work))
                ps.append(run_torch(cfg, steps, a.warmup_steps, a.peer_openblas_core))
            else:
                ps.append(run_torch(cfg, steps, a.warmup_steps, a.peer_openblas_core))
                ts.append(run_titan(a.build, cfg, steps, a.warmup_steps, work))
        ratios = [x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(ts, ps)]
        t, p = median_run(ts), median_run(ps)
        ac = run_titan(a.build, cfg, steps, a.warmup_steps, work, ["--training.activation_checkpoint=full"])
        results[cfg] = {"titan": t, "torch": p, "titan_ac_full": ac, "round_ratios": [round(x, 3) for x in ratios],
                        "ratio": statistics.median(ratios)}
        print(f"\n## {cfg}: {steps} steps ({a.warmup_steps} warm-up), 2 threads, {a.rounds} alternating rounds "
              f"(rows: the run with the median tokens/s of each side); PyTorch's OpenBLAS core: "
              f"{p['openblas_core']}", flush=True)
        print("| run | tokens/s | median step ms | peak RSS MiB | titan step working memory MiB | MFU | "
              "process CPU s (all steps + start-up) | wall s in steps |")
        print("|---|---|---|---|---|---|---|---|")
        for name, r in (("PyTorch 1.13", p), ("titan.cpp", t), ("titan.cpp AC=full", ac)):
            print(f"| {name} | {r['tokens_per_s']:.0f} | {r['step_ms']:.1f} | {r['peak_rss_mb']:.0f} | "
                  f"{r.get('mem_step_mb', float('nan')):.1f} | {100 * r.get('mfu', float('nan')):.1f}% | "
                  f"{r['cpu_s']:.1f} | {r['wall_s']:.1f} |")
        print(f"titan/torch tokens/s: {statistics.median(ratios):.2f}x (median of the rounds: "
              f"{', '.join(f'{x:.2f}x' for x in ratios)}); "
              f"peak RSS titan/torch: {t['peak_rss_mb'] / p['peak_rss_mb']:.2f}")
        print(f"AC full vs none: working memory {t['mem_step_mb']:.1f} -> {ac['mem_step_mb']:.1f} MiB "
              f"({t['mem_step_mb'] / ac['mem_step_mb']:.2f}x less), step time "
              f"{100 * (ac['step_ms'] / t['step_ms'] - 1):+.1f}%, peak RSS {t['peak_rss_mb']:.0f} -> "
              f"{ac['peak_rss_mb']:.0f} MiB")
        for r, (x, y) in enumerate(zip(ts, ps)):
            print(f"round {r + 1} step ms titan:", x["all_step_ms"], "| torch:", y["all_step_ms"])
        print("step ms titan AC:", ac["all_step_ms"])
        sys.stdout.flush()
    shutil.rmtree(work, ignore_errors=True)
    print("\nJSON " + json.dumps({k: {n: ({x: y for x, y in r.items() if x != "losses"} if isinstance(r, dict) else r)
                                     for n, r in v.items()} for k, v in results.items()}))


if __name__ == "__main__":
    main()
