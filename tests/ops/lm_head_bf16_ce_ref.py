"""PyTorch oracle of titan's fused bf16 cross-entropy (linear_cross_entropy_bf16), used by
tests/ops/lm_head_bf16_ce_test.cpp. Needs torch >= 2 (the project's venv, torch 2.13).

Usage: lm_head_bf16_ce_ref.py DIR
DIR holds meta.json {T, D, V, ignore_index, z_loss, cases: [names]} and, per case NAME,
NAME.h.f32 (T, D), NAME.w.f32 (V, D), NAME.y.i64 (T). Per case, two runs of
  loss = sum over rows t with y[t] != ignore_index of
         logsumexp(z[t]) - z[t][y[t]] + z_loss * logsumexp(z[t])^2,   z = h . w^T:
  - "torch": z = F.linear(h, w) under torch.autocast("cpu", bfloat16) (bf16 inputs,
    the product rounded to bf16), the loss in fp32 on z.float(): autocast's rule, the
    gradient of the bf16 product is bf16 and so are dh and dw before their fp32 cast;
  - "f64": the same in float64 without autocast (the exact-arithmetic yardstick).
Writes DIR/NAME.{mode}.{loss,dh,dw}.f64.
"""
import json, sys
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
d = sys.argv[1]
m = json.load(open(f"{d}/meta.json"))
T, D, V, ign, zc = m["T"], m["D"], m["V"], m["ignore_index"], m["z_loss"]


def run(name, mode):
    dt = torch.float64 if mode == "f64" else torch.float32
    h = torch.from_numpy(np.fromfile(f"{d}/{name}.h.f32", "<f4").reshape(T, D)).to(dt).requires_grad_(True)
    w = torch.from_numpy(np.fromfile(f"{d}/{name}.w.f32", "<f4").reshape(V, D)).to(dt).requires_grad_(True)
    y = torch.from_numpy(np.fromfile(f"{d}/{name}.y.i64", "<i8"))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "torch")):
        z = F.linear(h, w)
    assert z.dtype == (torch.bfloat16 if mode == "torch" else torch.float64)
    z = z.to(dt)
    lse = torch.logsumexp(z, -1)
    keep = y != ign
    ys = torch.where(keep, y, torch.zeros_like(y))
    rows = lse - z.gather(1, ys[:, None])[:, 0] + zc * lse * lse
    loss = torch.where(keep, rows, torch.zeros_like(rows)).sum()
    loss.backward()
    np.array([loss.item()], dtype="<f8").tofile(f"{d}/{name}.{mode}.loss.f64")
    h.grad.double().numpy().astype("<f8").tofile(f"{d}/{name}.{mode}.dh.f64")
    w.grad.double().numpy().astype("<f8").tofile(f"{d}/{name}.{mode}.dw.f64")


for name in m["cases"]:
    run(name, "f64")
    run(name, "torch")
