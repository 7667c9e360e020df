"""PyTorch oracle for tests/optim/adamw_test.cpp: torch.optim.AdamW (1.13,
single-tensor path foreach=False) over several steps with a weight-decay group and a
no-decay group, per-step lr, and missing gradients (p.grad = None is skipped).

Usage: optim_adamw.py DIR. DIR/meta.json: {params: [{name, shape, decay}], steps,
lr: [per step], beta1, beta2, eps, weight_decay, has_grad: [[0/1 per param] per step]}.
Inputs DIR/p_<i>.f32 and DIR/g_<s>_<i>.f32 (raw float32); writes DIR/out_p_<i>.f32,
DIR/out_m_<i>.f32, DIR/out_v_<i>.f32 (zeros if the parameter never had a gradient)
and DIR/out_steps.json (state['step'] per parameter)."""
import json
import os
import sys

import numpy as np
import torch

d = sys.argv[1]
meta = json.load(open(os.path.join(d, "meta.json")))
torch.set_num_threads(1)


def load(name, shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=np.float32).reshape(shape))


params = [load(f"p_{i}.f32", p["shape"]).clone().requires_grad_(True) for i, p in enumerate(meta["params"])]
decay = [p for p, m in zip(params, meta["params"]) if m["decay"]]
no_decay = [p for p, m in zip(params, meta["params"]) if not m["decay"]]
groups = []
if decay:
    groups.append({"params": decay, "weight_decay": meta["weight_decay"]})
if no_decay:
    groups.append({"params": no_decay, "weight_decay": 0.0})
opt = torch.optim.AdamW(groups, lr=meta["lr"][0], betas=(meta["beta1"], meta["beta2"]),
                        eps=meta["eps"], foreach=False)
for s in range(meta["steps"]):
    for g in opt.param_groups:
        g["lr"] = meta["lr"][s]
    for i, p in enumerate(params):
        p.grad = load(f"g_{s}_{i}.f32", meta["params"][i]["shape"]) if meta["has_grad"][s][i] else None
    opt.step()

steps = []
for i, p in enumerate(params):
    st = opt.state.get(p, {})
    p.detach().numpy().tofile(os.path.join(d, f"out_p_{i}.f32"))
    zero = torch.zeros_like(p)
    st.get("exp_avg", zero).detach().numpy().tofile(os.path.join(d, f"out_m_{i}.f32"))
    st.get("exp_avg_sq", zero).detach().numpy().tofile(os.path.join(d, f"out_v_{i}.f32"))
    steps.append(int(st["step"].item()) if "step" in st else 0)
json.dump(steps, open(os.path.join(d, "out_steps.json"), "w"))
