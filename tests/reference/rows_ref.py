"""PyTorch oracle for tests/kernels/cpu_rows_torch_test.cpp (python3-torch 1.13).

Usage: rows_ref.py DIR. DIR/dims.txt holds "T D V ignore_index z_loss_coef
inv_temperature eps Tr Dr Tq H Dh R P". Raw inputs (little-endian): hidden.f32 (T, D),
weight.f32 (V, D), targets.i64 (T), dloss.f32 (T); x.f32 / dout.f32 (Tr, Dr), w.f32 (Dr);
q.f32 (Tq, H, Dh), cos.f32 / sin.f32 (P, R/2), pos.i64 (Tq).

Writes, in float64: ce_loss, ce_lse (T), ce_dhidden (T, D), ce_dweight (V, D) for
  loss = cross_entropy(hidden @ weight.T * inv_temperature, targets, ignore_index,
  reduction='none') + z_loss_coef * logsumexp² on the rows that are not ignored,
  gradients of sum(dloss * loss);
rms_y (Tr, Dr), rms_dx, rms_dw for HF LlamaRMSNorm (x * rsqrt(mean(x²) + eps) * w),
gradients of sum(dout * y);
and in float32: rope_q (Tq, H, Dh), HF apply_rotary_pos_emb (q * cos + rotate_half(q) * sin)
with cos/sin = cat(cache, cache)[pos] (rotary dims R <= Dh, the rest passed through)."""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

d = sys.argv[1]
torch.set_num_threads(1)
vals = open(os.path.join(d, "dims.txt")).read().split()
T, D, V, ignore_index = (int(v) for v in vals[:4])
z_coef, inv_t, eps = (float(v) for v in vals[4:7])
Tr, Dr, Tq, H, Dh, R, P = (int(v) for v in vals[7:14])


def load(name, dtype, shape):
    return torch.from_numpy(np.fromfile(os.path.join(d, name), dtype=dtype).reshape(shape))


def save(name, t):
    t.detach().numpy().tofile(os.path.join(d, name))


# ---- cross-entropy with ignore_index and z-loss (float64)
h = load("hidden.f32", np.float32, (T, D)).double().requires_grad_(True)
w = load("weight.f32", np.float32, (V, D)).double().requires_grad_(True)
y = load("targets.i64", np.int64, (T,))
dloss = load("dloss.f32", np.float32, (T,)).double()
logits = (h @ w.T) * inv_t
loss = F.cross_entropy(logits, y, ignore_index=ignore_index, reduction="none")
lse = torch.logsumexp(logits, dim=-1)
keep = (y != ignore_index).double()
loss = loss + z_coef * lse * lse * keep
(loss * dloss).sum().backward()
save("ce_loss.f64", loss)
save("ce_lse.f64", lse)
save("ce_dhidden.f64", h.grad)
save("ce_dweight.f64", w.grad)

# ---- RMSNorm (float64)
x = load("x.f32", np.float32, (Tr, Dr)).double().requires_grad_(True)
rw = load("w.f32", np.float32, (Dr,)).double().requires_grad_(True)
dout = load("dout.f32", np.float32, (Tr, Dr)).double()
yr = rw * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
(yr * dout).sum().backward()
save("rms_y.f64", yr)
save("rms_dx.f64", x.grad)
save("rms_dw.f64", rw.grad)

# ---- RoPE, HF rotate_half style, float32
q = load("q.f32", np.float32, (Tq, H, Dh))
cos = load("cos.f32", np.float32, (P, R // 2))
sin = load("sin.f32", np.float32, (P, R // 2))
pos = load("pos.i64", np.int64, (Tq,))
c = torch.cat([cos, cos], dim=-1)[pos].unsqueeze(1)  # (Tq, 1, R)
s = torch.cat([sin, sin], dim=-1)[pos].unsqueeze(1)


def rotate_half(t):
    t1, t2 = t[..., : t.shape[-1] // 2], t[..., t.shape[-1] // 2:]
    return torch.cat((-t2, t1), dim=-1)


qr, qp = q[..., :R], q[..., R:]
save("rope_q.f32", torch.cat([qr * c + rotate_half(qr) * s, qp], dim=-1).contiguous())
