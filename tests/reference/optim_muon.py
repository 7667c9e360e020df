"""PyTorch oracle for tests/optim/muon_test.cpp: Muon as published by Keller Jordan
(github.com/KellerJordan/Muon, muon.py: zeropower_via_newtonschulz5, muon_update,
Muon.step), re-typed here in fp32 (the reference runs Newton-Schulz in bf16; titan
uses fp32) and in fp64, plus torch.optim.Muon's "match_rms_adamw" lr adjustment
(lr * 0.2 * sqrt(max(rows, cols))).

Usage: optim_muon.py DIR. DIR/meta.json: {ns: [{rows, cols, steps}], muon: [{rows, cols,
lr, weight_decay, momentum, nesterov, adjust, steps}]}.
NS case i: input DIR/ns_in_<i>.f32; writes DIR/ns_out32_<i>.f32 and ns_out64_<i>.f64.
Muon case i: DIR/mu_p_<i>.f32 and grads DIR/mu_g_<i>_<s>.f32; writes the parameter
and momentum buffer after all steps: mu_out{32,64}_p_<i>, mu_out{32,64}_m_<i>
(.f32 / .f64)."""
import json
import math
import os
import sys

import numpy as np
import torch

d = sys.argv[1]
meta = json.load(open(os.path.join(d, "meta.json")))
torch.set_num_threads(1)


def load(name, shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=np.float32).reshape(shape))


def zeropower_via_newtonschulz5(G, steps, dtype):
    # Keller Jordan's zeropower_via_newtonschulz5 with G.bfloat16() replaced by dtype.
    assert G.ndim >= 2
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.to(dtype)
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta, nesterov, dtype):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    update = zeropower_via_newtonschulz5(update, steps=5, dtype=dtype)
    return update


def muon_step(p, grad, buf, case, dtype):
    update = muon_update(grad, buf, case["momentum"], case["nesterov"], dtype)
    lr, wd = case["lr"], case["weight_decay"]
    rows, cols = p.shape
    if case["adjust"] == "original":  # Keller's reference
        update *= max(1, grad.size(-2) / grad.size(-1)) ** 0.5
        step_lr = lr
    else:  # torch.optim.Muon adjust_lr_fn="match_rms_adamw"
        step_lr = lr * (0.2 * math.sqrt(max(rows, cols)))
    p.mul_(1 - lr * wd)
    p.add_(update.reshape(p.shape), alpha=-step_lr)


for i, c in enumerate(meta["ns"]):
    G = load(f"ns_in_{i}.f32", (c["rows"], c["cols"]))
    zeropower_via_newtonschulz5(G, c["steps"], torch.float32).contiguous().numpy().tofile(
        os.path.join(d, f"ns_out32_{i}.f32"))
    zeropower_via_newtonschulz5(G, c["steps"], torch.float64).contiguous().numpy().tofile(
        os.path.join(d, f"ns_out64_{i}.f64"))

for i, c in enumerate(meta["muon"]):
    shape = (c["rows"], c["cols"])
    for dtype, tag in ((torch.float32, "32"), (torch.float64, "64")):
        p = load(f"mu_p_{i}.f32", shape).to(dtype)
        buf = torch.zeros_like(p)
        for s in range(c["steps"]):
            g = load(f"mu_g_{i}_{s}.f32", shape).to(dtype)
            muon_step(p, g, buf, c, dtype)
        ext = "f32" if tag == "32" else "f64"
        p.numpy().tofile(os.path.join(d, f"mu_out{tag}_p_{i}.{ext}"))
        buf.numpy().tofile(os.path.join(d, f"mu_out{tag}_m_{i}.{ext}"))
