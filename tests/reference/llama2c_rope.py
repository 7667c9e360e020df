#!/usr/bin/python3
"""Independent check of titan's llama2.c loader (tests/checkpoint/llama2c_test.cpp).

  llama2c_rope.py MODEL.bin OURS.safetensors

MODEL.bin is read here with numpy in run.c's order; OURS.safetensors holds the
HF-named tensors titan produced (wq/wk permuted for rotate-half RoPE). Checks:
 1. every tensor equals the file slice run.c would use, wq/wk after transformers'
    convert_llama_weights_to_hf.py permute (numpy transcription of
    w.view(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(1, 2).reshape(dim1, dim2));
 2. a hand-written layer-0 forward (embedding -> RMSNorm -> q/k projections -> RoPE)
    gives the same attention scores with run.c's interleaved RoPE on the original
    weights and with HF's rotate-half RoPE on titan's weights, and the roped q/k
    are the same numbers up to the within-head permutation.
Prints OK and exits 0, or prints the mismatches and exits 1.
"""
import json
import struct
import sys

import numpy as np


def read_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, v in header.items():
        assert v["dtype"] == "F32", (name, v["dtype"])
        b, e = v["data_offsets"]
        out[name] = np.frombuffer(blob[8 + n + b:8 + n + e], dtype="<f4").reshape(v["shape"])
    return out


def read_llama2c(path):
    raw = open(path, "rb").read()
    dim, hidden, L, H, Hkv, V, seq = struct.unpack("<7i", raw[:28])
    shared = V > 0
    V = abs(V)
    f = np.frombuffer(raw[28:], dtype="<f4")
    hs = dim // H
    kv = Hkv * hs
    pos = 0

    def take(*shape):
        nonlocal pos
        n = int(np.prod(shape))
        a = f[pos:pos + n].reshape(shape)
        pos += n
        return a

    w = {"tok": take(V, dim), "rms_att": take(L, dim), "wq": take(L, dim, dim), "wk": take(L, kv, dim),
         "wv": take(L, kv, dim), "wo": take(L, dim, dim), "rms_ffn": take(L, dim),
         "w1": take(L, hidden, dim), "w2": take(L, dim, hidden), "w3": take(L, hidden, dim),
         "rms_final": take(dim), "fcr": take(seq, hs // 2), "fci": take(seq, hs // 2)}
    if not shared:
        w["wcls"] = take(V, dim)
    assert pos == f.size, (pos, f.size)
    cfg = dict(dim=dim, hidden=hidden, L=L, H=H, Hkv=Hkv, V=V, seq=seq, shared=shared, hs=hs)
    return cfg, w


def permute(w, n_heads, dim1, dim2):
    return w.reshape(n_heads, dim1 // n_heads // 2, 2, dim2).transpose(0, 2, 1, 3).reshape(dim1, dim2)


def rope_interleaved(x, pos, hs):
    """run.c: for i in 0..dim step 2, head_dim = i % head_size, rotate (x[i], x[i+1])."""
    y = x.copy()
    for i in range(0, x.size, 2):
        freq = 1.0 / 10000.0 ** ((i % hs) / hs)
        c, s = np.cos(pos * freq), np.sin(pos * freq)
        y[i], y[i + 1] = x[i] * c - x[i + 1] * s, x[i] * s + x[i + 1] * c
    return y


def rope_rotate_half(x, pos, hs):
    """HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, per head."""
    inv = 1.0 / 10000.0 ** (np.arange(0, hs, 2, dtype=np.float64) / hs)
    ang = np.concatenate([pos * inv, pos * inv])
    xh = x.reshape(-1, hs)
    rot = np.concatenate([-xh[:, hs // 2:], xh[:, :hs // 2]], axis=1)
    return (xh * np.cos(ang) + rot * np.sin(ang)).reshape(-1)


def main(model_path, ours_path):
    cfg, w = read_llama2c(model_path)
    ours = read_safetensors(ours_path)
    L, D, H, Hkv, hs = cfg["L"], cfg["dim"], cfg["H"], cfg["Hkv"], cfg["hs"]
    kv = Hkv * hs
    errors = []

    want = {"model.embed_tokens.weight": w["tok"], "model.norm.weight": w["rms_final"]}
    if not cfg["shared"]:
        want["lm_head.weight"] = w["wcls"]
    for i in range(L):
        p = f"model.layers.{i}."
        want[p + "self_attn.q_proj.weight"] = permute(w["wq"][i], H, D, D)
        want[p + "self_attn.k_proj.weight"] = permute(w["wk"][i], Hkv, kv, D)
        want[p + "self_attn.v_proj.weight"] = w["wv"][i]
        want[p + "self_attn.o_proj.weight"] = w["wo"][i]
        want[p + "mlp.gate_proj.weight"] = w["w1"][i]
        want[p + "mlp.down_proj.weight"] = w["w2"][i]
        want[p + "mlp.up_proj.weight"] = w["w3"][i]
        want[p + "input_layernorm.weight"] = w["rms_att"][i]
        want[p + "post_attention_layernorm.weight"] = w["rms_ffn"][i]
    if set(want) != set(ours):
        errors.append(f"names differ: missing {sorted(set(want) - set(ours))}, extra {sorted(set(ours) - set(want))}")
    for name in sorted(set(want) & set(ours)):
        if want[name].shape != ours[name].shape or not np.array_equal(want[name], ours[name]):
            errors.append(f"{name}: differs from the file slice")

    # Layer-0 forward of a few tokens at a few positions, in float64.
    wq0, wk0 = w["wq"][0].astype(np.float64), w["wk"][0].astype(np.float64)
    q_hf_w = ours["model.layers.0.self_attn.q_proj.weight"].astype(np.float64)
    k_hf_w = ours["model.layers.0.self_attn.k_proj.weight"].astype(np.float64)
    g = w["rms_att"][0].astype(np.float64)
    rep = H // Hkv
    worst = 0.0
    for tq, tk, pq, pk in [(5, 9, 7, 3), (100, 1, 300, 299), (511 % cfg["V"], 42, 0, 0), (17, 17, 511, 12)]:
        xq, xk = w["tok"][tq].astype(np.float64), w["tok"][tk].astype(np.float64)
        xq = xq / np.sqrt(np.mean(xq * xq) + 1e-5) * g
        xk = xk / np.sqrt(np.mean(xk * xk) + 1e-5) * g
        q_ll = rope_interleaved(wq0 @ xq, pq, hs)
        k_ll = rope_interleaved(wk0 @ xk, pk, hs)
        q_hf = rope_rotate_half(q_hf_w @ xq, pq, hs)
        k_hf = rope_rotate_half(k_hf_w @ xk, pk, hs)
        # Same numbers, permuted within each head.
        d1 = np.abs(permute(q_ll[:, None], H, D, 1)[:, 0] - q_hf).max()
        d2 = np.abs(permute(k_ll[:, None], Hkv, kv, 1)[:, 0] - k_hf).max()
        for h in range(H):
            kh = h // rep
            s_ll = q_ll[h * hs:(h + 1) * hs] @ k_ll[kh * hs:(kh + 1) * hs]
            s_hf = q_hf[h * hs:(h + 1) * hs] @ k_hf[kh * hs:(kh + 1) * hs]
            worst = max(worst, abs(s_ll - s_hf) / max(1.0, abs(s_ll)))
        worst = max(worst, d1, d2)
    if worst > 1e-12:
        errors.append(f"RoPE conventions disagree after the permutation: max deviation {worst}")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"OK {len(ours)} tensors, rope max deviation {worst:.3g}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
