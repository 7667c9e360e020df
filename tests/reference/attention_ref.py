"""PyTorch oracle for titan's attention kernels (tests/kernels/attention_test.cpp).

usage: attention_ref.py DIR [DIR ...]   (one case per directory)
DIR/meta.json: {"T", "H", "Hkv", "Dh", "cu_seqlens", "scale", "window", "softcap", "sinks"}
DIR/{q,k,v,dout}.bin (and sinks.bin if "sinks"): raw little-endian float32, row-major
(T, H, Dh) / (T, Hkv, Dh) / (H).
Writes DIR/{out,lse,dq,dk,dv}.bin (and dsinks.bin): raw float32, computed in float64
with torch autograd from the textbook definition (full softmax per sequence, causal
+ sliding-window mask, gpt-oss sinks as an extra softmax column with no value,
Gemma-2 soft-cap before masking).
"""
import json
import os
import sys

import numpy as np
import torch


def load(d, name, shape):
    t = torch.from_numpy(np.fromfile(os.path.join(d, name + ".bin"), dtype="<f4").copy())
    return t.reshape(shape).to(torch.float64)


def save(d, name, t):
    t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tofile(
        os.path.join(d, name + ".bin"))


def run(d):
    meta = json.load(open(os.path.join(d, "meta.json")))
    T, H, Hkv, Dh = meta["T"], meta["H"], meta["Hkv"], meta["Dh"]
    cu = meta["cu_seqlens"]
    scale, window, softcap = meta["scale"], meta["window"], meta["softcap"]
    q = load(d, "q", (T, H, Dh)).requires_grad_()
    k = load(d, "k", (T, Hkv, Dh)).requires_grad_()
    v = load(d, "v", (T, Hkv, Dh)).requires_grad_()
    dout = load(d, "dout", (T, H, Dh))
    sinks = load(d, "sinks", (H,)).requires_grad_() if meta["sinks"] else None
    G = H // Hkv
    outs, lses = [], []
    for s in range(len(cu) - 1):
        a, b = cu[s], cu[s + 1]
        L = b - a
        qs = q[a:b].transpose(0, 1)  # (H, L, Dh)
        ks = k[a:b].repeat_interleave(G, dim=1).transpose(0, 1)
        vs = v[a:b].repeat_interleave(G, dim=1).transpose(0, 1)
        sc = scale * qs @ ks.transpose(1, 2)  # (H, L, L)
        if softcap > 0:
            sc = softcap * torch.tanh(sc / softcap)
        i = torch.arange(L).view(L, 1)
        j = torch.arange(L).view(1, L)
        visible = j <= i
        if window > 0:
            visible = visible & (j > i - window)
        sc = sc.masked_fill(~visible, float("-inf"))
        if sinks is not None:
            sc = torch.cat([sc, sinks.view(H, 1, 1).expand(H, L, 1)], dim=2)
        lse = torch.logsumexp(sc, dim=2)  # (H, L)
        p = torch.softmax(sc, dim=2)[:, :, :L]
        outs.append((p @ vs).transpose(0, 1))
        lses.append(lse.transpose(0, 1))
    out = torch.cat(outs, 0)
    lse = torch.cat(lses, 0)
    (out * dout).sum().backward()
    save(d, "out", out)
    save(d, "lse", lse)
    save(d, "dq", q.grad)
    save(d, "dk", k.grad)
    save(d, "dv", v.grad)
    if sinks is not None:
        save(d, "dsinks", sinks.grad)


if __name__ == "__main__":
    for d in sys.argv[1:]:
        run(d)
