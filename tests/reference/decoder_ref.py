"""PyTorch reference of titan's shared decoder (HF LlamaForCausalLM / Qwen3ForCausalLM
semantics), used by tests/models/decoder_test.cpp.

Usage: decoder_ref.py DIR
DIR holds: model.safetensors + config.json (HF names/fields, written by titan),
batch.json {"tokens": [...], "positions": [...], "cu_seqlens": [...], "targets": [...]}.
Writes DIR/ref_logits.f64 (T, V) float64, DIR/ref_loss.f64 (1,) and
DIR/grad.<hf name>.f64 for every tensor: gradients of the mean cross-entropy over
targets != -100. Everything runs in float64 (the weights are the f32 values written
by titan), so the comparison measures titan's fp32 error.
The safetensors file is parsed by hand (torch 1.13 has no safetensors module).
"""
import json, math, struct, sys
import numpy as np
import torch

torch.set_num_threads(1)
d = sys.argv[1]

def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        buf = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        assert meta["dtype"] == "F32", meta["dtype"]
        b, e = meta["data_offsets"]
        arr = np.frombuffer(buf[b:e], dtype="<f4").reshape(meta["shape"])
        out[name] = torch.tensor(arr.astype(np.float64), requires_grad=True)
    return out

cfg = json.load(open(f"{d}/config.json"))
W = load_safetensors(f"{d}/model.safetensors")
batch = json.load(open(f"{d}/batch.json"))
tokens = torch.tensor(batch["tokens"], dtype=torch.long)
pos = torch.tensor(batch["positions"], dtype=torch.long)
cu = batch["cu_seqlens"]
targets = torch.tensor(batch["targets"], dtype=torch.long)

D = cfg["hidden_size"]; H = cfg["num_attention_heads"]; Hkv = cfg["num_key_value_heads"]
Dh = cfg.get("head_dim") or D // H; L = cfg["num_hidden_layers"]; eps = cfg["rms_norm_eps"]
theta = cfg["rope_theta"]; qwen3 = cfg["architectures"][0] == "Qwen3ForCausalLM"
T = tokens.numel()

def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

# RoPE (rotate_half), inv_freq as HF computes it (with optional llama3 scaling).
inv = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
rs = cfg.get("rope_scaling")
if rs and rs.get("rope_type", rs.get("type")) == "llama3":
    f, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    wl = 2 * math.pi / inv
    lo_wl, hi_wl = old / lo, old / hi
    new = torch.where(wl > lo_wl, inv / f, inv)
    smooth = (old / wl - lo) / (hi - lo)
    mid = (1 - smooth) * new / f + smooth * new
    is_mid = (wl >= hi_wl) & (wl <= lo_wl)
    inv = torch.where(is_mid, mid, new)
ang = pos.to(torch.float64)[:, None] * inv[None, :]
cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]

def rot(x):
    x1, x2 = x[..., : Dh // 2], x[..., Dh // 2 :]
    return torch.cat([-x2, x1], -1)

def rope(x):
    return x * cos + rot(x) * sin

# Block-diagonal causal mask from cu_seqlens.
doc = torch.zeros(T, dtype=torch.long)
for s in range(len(cu) - 1):
    doc[cu[s]:cu[s + 1]] = s
idx = torch.arange(T)
mask = (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])

h = W["model.embed_tokens.weight"][tokens]
for l in range(L):
    p = f"model.layers.{l}."
    x = rms(h, W[p + "input_layernorm.weight"])
    q = (x @ W[p + "self_attn.q_proj.weight"].T).view(T, H, Dh)
    k = (x @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, Dh)
    v = (x @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, Dh)
    if qwen3:
        q = rms(q, W[p + "self_attn.q_norm.weight"])
        k = rms(k, W[p + "self_attn.k_norm.weight"])
    q, k = rope(q), rope(k)
    k = k.repeat_interleave(H // Hkv, dim=1)
    v = v.repeat_interleave(H // Hkv, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) / math.sqrt(Dh)
    s = s.masked_fill(~mask[None], float("-inf"))
    a = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, H * Dh)
    h = h + a @ W[p + "self_attn.o_proj.weight"].T
    x = rms(h, W[p + "post_attention_layernorm.weight"])
    g = x @ W[p + "mlp.gate_proj.weight"].T
    u = x @ W[p + "mlp.up_proj.weight"].T
    h = h + (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].T
h = rms(h, W["model.norm.weight"])
head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
logits = h @ head.T
loss = torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100)
loss.backward()
logits.detach().numpy().astype("<f8").tofile(f"{d}/ref_logits.f64")
np.array([loss.item()], dtype="<f8").tofile(f"{d}/ref_loss.f64")
for name, t in W.items():
    t.grad.numpy().astype("<f8").tofile(f"{d}/grad.{name}.f64")
