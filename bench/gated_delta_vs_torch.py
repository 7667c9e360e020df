"""GDN chunked forward + backward, titan vs PyTorch, measured alternately in one run.

Per round and T: titan's BM_GdnFwdBwd (bench/gated_delta_bench.cpp, one thread, the best
of its 2 repetitions) and then the PyTorch peer (bench/gated_delta_torch.py, HF
torch_chunk_gated_delta_rule, one torch thread, the best of its 2 iterations), both in
tokens per CPU second of the working thread. Prints every round and, per T, the median
over rounds of each side and their ratio. Results: docs/benchmarks.md, "Gated DeltaNet".

  /work/venv/bin/python bench/gated_delta_vs_torch.py [--build build] [--rounds 3] [T ...]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def titan(build, T):
    out = subprocess.run(
        [os.path.join(build, "bench", "gated_delta_bench"),
         f"--benchmark_filter=BM_GdnFwdBwd/T:{T}/threads:1/", "--benchmark_format=json"],
        check=True, capture_output=True, text=True, timeout=600).stdout
    rates = [b["tok/s"] for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    return max(rates)


def torch(T):
    out = subprocess.run([sys.executable, os.path.join(HERE, "gated_delta_torch.py"), str(T)],
                         check=True, capture_output=True, text=True, timeout=600).stdout
    return float(re.search(r"tok/s\(cpu\) (\d+)", out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("T", nargs="*", type=int, default=[512, 2048, 8192])
    a = ap.parse_args()
    res = {T: ([], []) for T in a.T}
    for r in range(a.rounds):
        for T in a.T:
            t = titan(a.build, T)
            p = torch(T)
            res[T][0].append(t)
            res[T][1].append(p)
            print(f"round {r + 1} T={T}: titan {t:.0f} tok/s, torch {p:.0f} tok/s, {t / p:.2f}x",
                  flush=True)
    print("| T | titan GDN fwd+bwd tok/s | torch tok/s | titan / torch |")
    print("|---:|---:|---:|---:|")
    for T in a.T:
        t, p = statistics.median(res[T][0]), statistics.median(res[T][1])
        print(f"| {T} | {t:.0f} | {p:.0f} | {t / p:.2f}x |")


if __name__ == "__main__":
    main()
