"""PyTorch reference of titan's decoder in bf16 compute, used by
tests/models/decoder_bf16_test.cpp. Needs torch >= 2 (the project's venv, torch 2.13).

Usage: decoder_bf16_ref.py DIR
DIR holds model.safetensors (f32, HF names) + config.json + batch.json (as for
decoder_ref.py). Runs the model twice:
  - "bf16": f32 master weights, the transformer layers under
    torch.autocast("cpu", dtype=torch.bfloat16) (bf16 linears with fp32 accumulation,
    bf16 scaled_dot_product_attention), norms computed in fp32, the final norm and
    cross-entropy in fp32 outside autocast (TorchTitan's fp32 loss), and the LM head as
    titan's bf16 head (titan/ops/lm_head_bf16.h): bf16-rounded hidden states and weight,
    products accumulated in fp32, fp32 logits (autocast would also round the logits);
  - "f64": the same model in float64 (the exact-arithmetic yardstick).
Writes DIR/{mode}.logits.f64 (T, V), DIR/{mode}.loss.f64 and DIR/{mode}.grad.<hf name>.f64.
"""
import json, math, sys
import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

torch.set_num_threads(1)
d = sys.argv[1]
cfg = json.load(open(f"{d}/config.json"))
W0 = load_file(f"{d}/model.safetensors")
batch = json.load(open(f"{d}/batch.json"))
tokens = torch.tensor(batch["tokens"], dtype=torch.long)
pos = torch.tensor(batch["positions"], dtype=torch.long)
cu = batch["cu_seqlens"]
targets = torch.tensor(batch["targets"], dtype=torch.long)

D = cfg["hidden_size"]; H = cfg["num_attention_heads"]; Hkv = cfg["num_key_value_heads"]
Dh = cfg.get("head_dim") or D // H; L = cfg["num_hidden_layers"]; eps = cfg["rms_norm_eps"]
theta = cfg["rope_theta"]; qwen3 = cfg["architectures"][0] == "Qwen3ForCausalLM"
T = tokens.numel()

inv = 1.0 / (theta ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
rs = cfg.get("rope_scaling")
if rs and rs.get("rope_type", rs.get("type")) == "llama3":
    f, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], rs["original_max_position_embeddings"]
    wl = 2 * math.pi / inv
    new = torch.where(wl > old / lo, inv / f, inv)
    smooth = (old / wl - lo) / (hi - lo)
    mid = (1 - smooth) * new / f + smooth * new
    inv = torch.where((wl >= old / hi) & (wl <= old / lo), mid, new)
ang = pos.to(torch.float64)[:, None] * inv[None, :]
cos64 = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :]
sin64 = torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]

doc = torch.zeros(T, dtype=torch.long)
for s in range(len(cu) - 1):
    doc[cu[s]:cu[s + 1]] = s
idx = torch.arange(T)
mask = (doc[:, None] == doc[None, :]) & (idx[None, :] <= idx[:, None])

def rot(x):
    return torch.cat([-x[..., Dh // 2:], x[..., : Dh // 2]], -1)

def run(mode):
    dt = torch.float64 if mode == "f64" else torch.float32
    W = {n: t.to(dt).clone().requires_grad_(True) for n, t in W0.items()}
    cos, sin = cos64.to(dt), sin64.to(dt)

    def rms(x, w):  # fp32 (or f64) statistics and output
        x = x.to(dt)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=(mode == "bf16")):
        h = W["model.embed_tokens.weight"][tokens]
        for l in range(L):
            p = f"model.layers.{l}."
            x = rms(h, W[p + "input_layernorm.weight"])
            q = F.linear(x, W[p + "self_attn.q_proj.weight"]).view(T, H, Dh)
            k = F.linear(x, W[p + "self_attn.k_proj.weight"]).view(T, Hkv, Dh)
            v = F.linear(x, W[p + "self_attn.v_proj.weight"]).view(T, Hkv, Dh)
            if qwen3:
                q = rms(q, W[p + "self_attn.q_norm.weight"])
                k = rms(k, W[p + "self_attn.k_norm.weight"])
            q = q.to(dt) * cos + rot(q.to(dt)) * sin
            k = k.to(dt) * cos + rot(k.to(dt)) * sin
            if mode == "bf16":  # bf16 Q/K/V into attention (fp32 softmax inside)
                q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
            k = k.repeat_interleave(H // Hkv, dim=1)
            v = v.repeat_interleave(H // Hkv, dim=1)
            a = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1),
                                               attn_mask=mask[None])
            a = a.transpose(0, 1).reshape(T, H * Dh)
            h = h + F.linear(a, W[p + "self_attn.o_proj.weight"])
            x = rms(h, W[p + "post_attention_layernorm.weight"])
            g = F.linear(x, W[p + "mlp.gate_proj.weight"])
            u = F.linear(x, W[p + "mlp.up_proj.weight"])
            h = h + F.linear(F.silu(g) * u, W[p + "mlp.down_proj.weight"])
    h = rms(h, W["model.norm.weight"])
    head = W["lm_head.weight"] if "lm_head.weight" in W else W["model.embed_tokens.weight"]
    if mode == "bf16":  # bf16 inputs (exact bf16 products), fp32 accumulation and logits
        logits = h.bfloat16().float() @ head.bfloat16().float().T
    else:
        logits = h @ head.T
    assert logits.dtype == dt
    loss = F.cross_entropy(logits, targets, ignore_index=-100)
    loss.backward()
    logits.detach().double().numpy().astype("<f8").tofile(f"{d}/{mode}.logits.f64")
    np.array([loss.item()], dtype="<f8").tofile(f"{d}/{mode}.loss.f64")
    for name, t in W.items():
        t.grad.double().numpy().astype("<f8").tofile(f"{d}/{mode}.grad.{name}.f64")

run("f64")
run("bf16")
