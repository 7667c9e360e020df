"""PyTorch peer of bench/gated_delta_bench.cpp: transformers' Qwen3-Next
torch_chunk_gated_delta_rule (the torch path HF runs on CPU without fla's triton kernels,
chunk 64, UT transform by torch.linalg.solve_triangular), forward + backward on one
sequence of T tokens, H = 8 heads, K = V = 128, fp32, the same input distribution.
Prints per T the CPU seconds of the process per iteration (one torch thread) and tok/s.

  /work/venv/bin/python bench/gated_delta_torch.py [T ...]
"""
import sys
import time

import torch
import torch.nn.functional as F
from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule

torch.set_num_threads(1)
H, D = 8, 128


def run(T):
    g0 = torch.Generator().manual_seed(T)
    q = F.normalize(torch.rand(1, T, H, D, generator=g0) * 2 - 1, dim=-1).requires_grad_()
    k = F.normalize(torch.rand(1, T, H, D, generator=g0) * 2 - 1, dim=-1).requires_grad_()
    v = (torch.rand(1, T, H, D, generator=g0) * 2 - 1).requires_grad_()
    g = (-0.01 - torch.rand(1, T, H, generator=g0) * 0.99).requires_grad_()
    beta = torch.rand(1, T, H, generator=g0).requires_grad_()
    dout = torch.rand(1, T, H, D, generator=g0) * 2 - 1
    best = None
    for _ in range(2):
        c0, w0 = time.process_time(), time.perf_counter()
        o, _ = torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64)
        torch.autograd.grad(o, [q, k, v, g, beta], dout)
        c1, w1 = time.process_time(), time.perf_counter()
        if best is None or c1 - c0 < best[0]:
            best = (c1 - c0, w1 - w0)
    print(f"torch_chunk_gated_delta_rule fwd+bwd T={T}: cpu {best[0]*1e3:.0f} ms wall {best[1]*1e3:.0f} ms "
          f"tok/s(cpu) {T / best[0]:.0f}", flush=True)


for T in [int(a) for a in sys.argv[1:]] or [512, 2048, 8192]:
    run(T)
