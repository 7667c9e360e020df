#!/usr/bin/python3
"""PyTorch oracle for titan's op tests (tests/util/torch_ref.h).

Usage: ops_ref.py DIR. Reads DIR/manifest.json (cases: op, attrs, inputs as raw
little-endian files with shape/dtype, grad_of, upstream gradients), runs every case,
and writes DIR/result.json plus raw output/gradient files. The loss of a case is
sum_i sum(out_i * upstream_i) over its floating outputs. Computation is float64
unless attrs["_f32"] is true.
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)

OPS = {}


def op(name):
    def reg(fn):
        OPS[name] = fn
        return fn
    return reg


# ---- elementwise
for _n, _f in {
    "add": lambda i, a: [i["a"] + i["b"]],
    "sub": lambda i, a: [i["a"] - i["b"]],
    "mul": lambda i, a: [i["a"] * i["b"]],
    "div": lambda i, a: [i["a"] / i["b"]],
    "add_scalar": lambda i, a: [i["x"] + a["s"]],
    "scale": lambda i, a: [i["x"] * a["s"]],
    "where": lambda i, a: [torch.where(i["cond"].bool(), i["a"], i["b"])],
    "neg": lambda i, a: [-i["x"]],
    "exp": lambda i, a: [torch.exp(i["x"])],
    "log": lambda i, a: [torch.log(i["x"])],
    "tanh": lambda i, a: [torch.tanh(i["x"])],
    "sigmoid": lambda i, a: [torch.sigmoid(i["x"])],
    "sqrt": lambda i, a: [torch.sqrt(i["x"])],
    "rsqrt": lambda i, a: [torch.rsqrt(i["x"])],
    "pow": lambda i, a: [torch.pow(i["x"], a["p"])],
    "square": lambda i, a: [torch.square(i["x"])],
    "abs": lambda i, a: [torch.abs(i["x"])],
    "relu": lambda i, a: [torch.relu(i["x"])],
    "silu": lambda i, a: [F.silu(i["x"])],
    "gelu_tanh": lambda i, a: [F.gelu(i["x"], approximate="tanh")],
    "swiglu": lambda i, a: [F.silu(i["gate"]) * i["up"]],
    "softmax": lambda i, a: [torch.softmax(i["x"], dim=-1)],
    "log_softmax": lambda i, a: [torch.log_softmax(i["x"], dim=-1)],
}.items():
    OPS[_n] = _f


# ---- reductions
@op("sum")
def _sum(i, a):
    return [i["x"].sum() if "dim" not in a else i["x"].sum(a["dim"], keepdim=a["keepdim"])]


@op("mean")
def _mean(i, a):
    return [i["x"].mean() if "dim" not in a else i["x"].mean(a["dim"], keepdim=a["keepdim"])]


@op("max")
def _max(i, a):
    if "dim" not in a:
        return [i["x"].max()]
    v, ix = i["x"].max(a["dim"], keepdim=a["keepdim"])
    return [v, ix]


@op("logsumexp")
def _lse(i, a):
    return [torch.logsumexp(i["x"], a["dim"], keepdim=a["keepdim"])]


@op("argmax")
def _argmax(i, a):
    if "dim" not in a:
        return [torch.argmax(i["x"])]
    return [torch.argmax(i["x"], a["dim"], keepdim=a["keepdim"])]


# ---- matmul
@op("matmul")
def _matmul(i, a):
    return [torch.matmul(i["a"], i["b"])]


@op("linear")
def _linear(i, a):
    return [F.linear(i["x"], i["w"], i.get("b"))]


# ---- indexing and joining
@op("embedding")
def _embedding(i, a):
    return [F.embedding(i["ids"], i["weight"])]


@op("index_select")
def _index_select(i, a):
    return [torch.index_select(i["x"], a["dim"], i["index"])]


@op("gather")
def _gather(i, a):
    return [torch.gather(i["x"], a["dim"], i["index"])]


@op("scatter_add")
def _scatter_add(i, a):
    # torch 1.13's backward rejects a src larger than index: use the (equivalent) slice.
    src = i["src"][tuple(slice(0, n) for n in i["index"].shape)]
    return [torch.scatter_add(i["self"], a["dim"], i["index"], src)]


@op("topk")
def _topk(i, a):
    v, ix = torch.topk(i["x"], a["k"], dim=-1)
    return [v, ix]


def _list(i):
    return [i[f"t{k}"] for k in range(len(i))]


@op("cat")
def _cat(i, a):
    return [torch.cat(_list(i), a["dim"])]


@op("stack")
def _stack(i, a):
    return [torch.stack(_list(i), a["dim"])]


@op("split")
def _split(i, a):
    return list(torch.split(i["x"], a["sizes"], a["dim"]))


@op("chunk")
def _chunk(i, a):
    return list(torch.chunk(i["x"], a["chunks"], a["dim"]))


# ---- norms
@op("rms_norm")
def _rms_norm(i, a):
    x = i["x"]
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + a["eps"])
    return [y * i["w"] if "w" in i else y]


@op("layer_norm")
def _layer_norm(i, a):
    D = i["x"].shape[-1]
    return [F.layer_norm(i["x"], (D,), i.get("w"), i.get("b"), a["eps"])]


# ---- rope (cos/sin cache given as inputs; rope_cache checks the cache itself)
@op("rope_cache")
def _rope_cache(i, a):
    P, R, theta = a["P"], a["R"], a["theta"]
    inv = 1.0 / (theta ** (torch.arange(0, R, 2, dtype=torch.float64) / R))
    ang = torch.arange(P, dtype=torch.float64)[:, None] * inv[None, :]
    return [torch.cos(ang), torch.sin(ang)]


def _rotate(x, pos, cos, sin, interleaved):
    h = cos.shape[1]
    R = 2 * h
    c, s = cos[pos][:, None, :], sin[pos][:, None, :]
    if interleaved:
        x1, x2 = x[..., 0:R:2], x[..., 1:R:2]
    else:
        x1, x2 = x[..., :h], x[..., h:R]
    o1, o2 = x1 * c - x2 * s, x2 * c + x1 * s
    rot = torch.stack([o1, o2], -1).flatten(-2) if interleaved else torch.cat([o1, o2], -1)
    return torch.cat([rot, x[..., R:]], -1)


@op("rope")
def _rope(i, a):
    outs = [_rotate(i["x"], i["pos"], i["cos"], i["sin"], a["interleaved"])]
    if "k" in i:
        outs.append(_rotate(i["k"], i["pos"], i["cos"], i["sin"], a["interleaved"]))
    return outs


# ---- losses
def _ce_rows(logits, y, ignore_index, z_loss):
    lse = torch.logsumexp(logits, -1)
    keep = y != ignore_index
    ys = torch.where(keep, y, torch.zeros_like(y))
    rows = lse - logits.gather(1, ys[:, None])[:, 0] + z_loss * lse * lse
    return torch.where(keep, rows, torch.zeros_like(rows)), keep


def _reduce(rows, keep, reduction):
    if reduction == "none":
        return rows
    if reduction == "sum":
        return rows.sum()
    return rows.sum() / keep.sum()


@op("cross_entropy")
def _cross_entropy(i, a):
    logits = i["logits"] if "logits" in i else i["hidden"] @ i["weight"].t()
    rows, keep = _ce_rows(logits, i["targets"], a["ignore_index"], a["z_loss"])
    return [_reduce(rows, keep, a["reduction"])]


@op("logprobs")
def _logprobs(i, a):
    z = (i["hidden"] @ i["weight"].t()) / a["temperature"]
    return [torch.log_softmax(z, -1).gather(1, i["targets"][:, None])[:, 0]]


# ---- attention (packed varlen, causal, GQA, window, chunk, softcap, sinks)
@op("attention")
def _attention(i, a):
    q, k, v, cu = i["q"], i["k"], i["v"], i["cu"].tolist()
    T, H, Dh = q.shape
    Hkv = k.shape[1]
    scale = a["scale"] or 1.0 / math.sqrt(Dh)
    outs = []
    for s in range(len(cu) - 1):
        b, e = cu[s], cu[s + 1]
        L = e - b
        if L == 0:
            continue
        qs = q[b:e].transpose(0, 1)
        ks = k[b:e].repeat_interleave(H // Hkv, dim=1).transpose(0, 1)
        vs = v[b:e].repeat_interleave(H // Hkv, dim=1).transpose(0, 1)
        sc = scale * qs @ ks.transpose(1, 2)
        if a["softcap"]:
            sc = a["softcap"] * torch.tanh(sc / a["softcap"])
        ii = torch.arange(L)[:, None]
        jj = torch.arange(L)[None, :]
        vis = jj <= ii
        if a["window"]:
            vis = vis & (ii - jj < a["window"])
        if a.get("chunk"):  # Llama 4 chunked attention: same chunk of a["chunk"] positions
            vis = vis & (ii // a["chunk"] == jj // a["chunk"])
        sc = sc.masked_fill(~vis, float("-inf"))
        if "sinks" in i:
            sk = i["sinks"][:, None, None].expand(H, L, 1)
            p = torch.softmax(torch.cat([sc, sk], -1), -1)[..., :L]
        else:
            p = torch.softmax(sc, -1)
        outs.append((p @ vs).transpose(0, 1))
    return [torch.cat(outs, 0)]


# ---- composite graph used by the determinism test
@op("mlp_block")
def _mlp_block(i, a):
    h = F.linear(i["x"], i["w1"])
    h = F.silu(h) * F.linear(i["x"], i["w3"])
    return [(F.linear(h, i["w2"]) ** 2).mean()]


def load(d, j, f64):
    if not j or "file" not in j:
        return None
    dt = {"f32": np.float32, "i64": np.int64, "bool": np.uint8}[j["dtype"]]
    arr = np.fromfile(os.path.join(d, j["file"]), dtype=dt).reshape(j["shape"])
    t = torch.from_numpy(arr.copy())
    if j["dtype"] == "f32" and f64:
        t = t.double()
    if j["dtype"] == "bool":
        t = t.bool()
    return t


def save(d, name, t):
    t = t.detach()
    if t.is_floating_point():
        arr, dt = t.float().numpy(), "f32"
    else:
        arr, dt = t.long().numpy(), "i64"
    np.ascontiguousarray(arr).tofile(os.path.join(d, name))
    return {"file": name, "shape": list(t.shape), "dtype": dt}


def main():
    d = sys.argv[1]
    man = json.load(open(os.path.join(d, "manifest.json")))
    res = {"cases": []}
    for c, case in enumerate(man["cases"]):
        attrs = case["attrs"] or {}
        f64 = not attrs.get("_f32", False)
        inputs = {}
        for j in case["inputs"]:
            t = load(d, j, f64)
            if t is not None:
                if j["name"] in case["grad_of"]:
                    t.requires_grad_(True)
                inputs[j["name"]] = t
        try:
            outs = OPS[case["op"]](inputs, attrs)
        except Exception as e:
            raise RuntimeError(f"case {c} ({case['label'] or case['op']}): {e}") from e
        entry = {"outputs": [], "grads": {}}
        loss = None
        k = 0
        for n, o in enumerate(outs):
            entry["outputs"].append(save(d, f"c{c}_out{n}.bin", o))
            if o.is_floating_point():
                up = load(d, case["upstream"][k], f64) if k < len(case["upstream"]) else None
                k += 1
                if up is not None and o.requires_grad:
                    term = (o * up.to(o.dtype)).sum()
                    loss = term if loss is None else loss + term
        wrt = [n for n in case["grad_of"] if n in inputs]
        if wrt and loss is not None:
            gs = torch.autograd.grad(loss, [inputs[n] for n in wrt], allow_unused=True)
            for n, g in zip(wrt, gs):
                if g is None:
                    g = torch.zeros_like(inputs[n])
                entry["grads"][n] = save(d, f"c{c}_grad_{n}.bin", g)
        res["cases"].append(entry)
    json.dump(res, open(os.path.join(d, "result.json"), "w"))


if __name__ == "__main__":
    main()
