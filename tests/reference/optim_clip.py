"""PyTorch oracle for tests/optim/grad_clip_test.cpp: torch.nn.utils.clip_grad_norm_
(norm_type 2, torch 1.13).

Usage: optim_clip.py DIR. DIR/meta.json: {cases: [{max_norm, params: [{shape,
has_grad}]}]}; gradients DIR/g_<c>_<i>.f32 (raw float32). Writes the clipped
gradients DIR/out_g_<c>_<i>.f32 (parameters with a gradient) and DIR/out_norm.json
(the total norm returned for each case)."""
import json
import os
import sys

import numpy as np
import torch

d = sys.argv[1]
meta = json.load(open(os.path.join(d, "meta.json")))
torch.set_num_threads(1)
norms = []
for c, case in enumerate(meta["cases"]):
    params = []
    for i, m in enumerate(case["params"]):
        p = torch.zeros(m["shape"], requires_grad=True)
        if m["has_grad"]:
            g = np.fromfile(os.path.join(d, f"g_{c}_{i}.f32"), dtype=np.float32)
            p.grad = torch.from_numpy(g).reshape(m["shape"]).clone()
        params.append(p)
    norms.append(float(torch.nn.utils.clip_grad_norm_(params, case["max_norm"])))
    for i, p in enumerate(params):
        if p.grad is not None:
            p.grad.numpy().tofile(os.path.join(d, f"out_g_{c}_{i}.f32"))
json.dump(norms, open(os.path.join(d, "out_norm.json"), "w"))
