"""Oracles for titan's linear-attention ops (tests/ops/ops_linear_attention_test.cpp),
run with the PyPI venv's python (torch 2.13, flash-linear-attention).

Same protocol as ops_ref.py (manifest in, result.json out; loss = sum(out * upstream)).
Two independent oracles per op:
  - a naive recurrent float64 reference written here from the recurrence
    S_t = diag(exp(g_t)) S_{t-1};  S_t += beta_t k_t (v_t - S_t^T k_t)^T;  o_t = S_t^T (scale q_t),
    differentiated by torch autograd in float64;
  - flash-linear-attention's plain-PyTorch naive references (fla.ops.gated_delta_rule.naive,
    fla.ops.kda.naive), loaded from their files so that fla's triton-only package
    __init__ is not imported. They compute in float32.
Sequences of cu_seqlens are run one by one from a zero state.
"""
import importlib.util
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_ref  # noqa: E402

OPS = ops_ref.OPS


def _load_fla(rel):
    spec = importlib.util.find_spec("fla")
    base = list(spec.submodule_search_locations)[0]
    s = importlib.util.spec_from_file_location("fla_naive_" + rel.replace("/", "_"), os.path.join(base, rel))
    m = importlib.util.module_from_spec(s)
    s.loader.exec_module(m)
    return m


_FLA = {}


def fla(name):
    if name not in _FLA:
        _FLA["gdn"] = _load_fla("ops/gated_delta_rule/naive.py")
        _FLA["kda"] = _load_fla("ops/kda/naive.py")
    return _FLA[name]


def widen(x, H):
    return x.repeat_interleave(H // x.shape[1], dim=1) if x.shape[1] != H else x


def recurrent(q, k, v, g, beta, scale):
    """One sequence, float64: q, k (T, H, K), v (T, H, V), g (T, H) or (T, H, K), beta (T, H)."""
    T, H, K = q.shape
    V = v.shape[-1]
    S = q.new_zeros(H, K, V)
    outs = []
    for t in range(T):
        decay = g[t].exp()
        S = S * (decay[:, None, None] if decay.dim() == 1 else decay[:, :, None])
        kv = torch.einsum("hk,hkv->hv", k[t], S)
        S = S + torch.einsum("hk,hv->hkv", k[t], beta[t][:, None] * (v[t] - kv))
        outs.append(torch.einsum("hk,hkv->hv", q[t] * scale, S))
    return torch.stack(outs) if outs else v.new_zeros(0, H, V)


def per_seq(fn, i, a):
    cu = i["cu_seqlens"].tolist()
    H = i["v"].shape[1]
    q, k = widen(i["q"], H), widen(i["k"], H)
    scale = a.get("scale") or q.shape[-1] ** -0.5
    outs = []
    for s in range(len(cu) - 1):
        sl = slice(cu[s], cu[s + 1])
        if cu[s + 1] == cu[s]:
            continue
        outs.append(fn(q[sl], k[sl], i["v"][sl], i["g"][sl], i["beta"][sl], scale))
    return [torch.cat(outs) if outs else i["v"].new_zeros(0, H, i["v"].shape[-1])]


def fla_gdn(kind):
    def run(q, k, v, g, beta, scale):
        m = fla("gdn")
        args = [x[None] for x in (q, k, v)]
        if kind == "chunk":
            o, _ = m.naive_chunk_gated_delta_rule(*args, g[None], beta[None], chunk_size=64, scale=scale)
        else:
            o, _ = m.naive_recurrent_gated_delta_rule(*args, beta[None], g[None], scale=scale)
        return o[0].to(q.dtype)
    return run


def fla_kda(kind):
    def run(q, k, v, g, beta, scale):
        m = fla("kda")
        T = q.shape[0]
        if kind == "chunk":
            pad = (64 - T % 64) % 64  # padded tokens (k = v = g = beta = 0) follow the real ones
            q, k, v, g = (F.pad(x, (0, 0, 0, 0, 0, pad)) for x in (q, k, v, g))
            beta = F.pad(beta, (0, 0, 0, pad))
            o, _ = m.naive_chunk_kda(q[None], k[None], v[None], g[None], beta[None], scale=scale, chunk_size=64)
        else:
            o, _ = m.naive_recurrent_kda(q[None], k[None], v[None], g[None], beta[None], scale=scale)
        return o[0, :T].to(q.dtype)
    return run


OPS["gdn_recurrent_f64"] = lambda i, a: per_seq(recurrent, i, a)
OPS["gdn_fla_chunk"] = lambda i, a: per_seq(fla_gdn("chunk"), i, a)
OPS["gdn_fla_recurrent"] = lambda i, a: per_seq(fla_gdn("recurrent"), i, a)
OPS["kda_fla_chunk"] = lambda i, a: per_seq(fla_kda("chunk"), i, a)
OPS["kda_fla_recurrent"] = lambda i, a: per_seq(fla_kda("recurrent"), i, a)


def conv1d(i, a):
    """HF Qwen3-Next causal_conv1d_fn (no bias, no activation) per sequence."""
    cu = i["cu_seqlens"].tolist()
    x, w = i["x"], i["w"]
    W = w.shape[1]
    outs = []
    for s in range(len(cu) - 1):
        if cu[s + 1] == cu[s]:
            continue
        xs = x[cu[s]:cu[s + 1]].t()[None]  # (1, C, L)
        L = xs.shape[-1]
        outs.append(F.conv1d(xs, w[:, None, :], padding=W - 1, groups=w.shape[0])[0, :, :L].t())
    return [torch.cat(outs)]


OPS["causal_conv1d"] = conv1d


def rms_norm_gated(i, a):
    """HF Qwen3NextRMSNormGated."""
    x, z, w = i["x"], i["z"], i["w"]
    h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a["eps"])
    return [w * h * F.silu(z)]


OPS["rms_norm_gated"] = rms_norm_gated
OPS["l2_normalize"] = lambda i, a: [i["x"] * torch.rsqrt((i["x"] * i["x"]).sum(-1, keepdim=True) + a["eps"])]


if __name__ == "__main__":
    torch.set_num_threads(1)
    ops_ref.main()
