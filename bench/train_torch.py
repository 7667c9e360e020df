"""PyTorch peer of `titan train` for bench/train_bench.sh (and a nanoGPT-style
reference run of the shakespeare_char recipe).

The model is titan's shared decoder (Llama-style; tests/reference/decoder_ref.py
has the same math): token embedding -> L x [RMSNorm -> attention (q/k/v/o without
bias, GQA, RoPE rotate-half, causal) -> residual -> RMSNorm -> SwiGLU -> residual]
-> RMSNorm -> LM head (tied to the embedding). fp32, batch dimension (B, T) with an
explicit causal mask (torch 1.13 has no scaled_dot_product_attention).
Optimizer: torch.optim.AdamW (decoupled decay; no decay on norm weights), linear
warmup + cosine to min_lr, global-norm clipping: the recipe's settings.

Usage:
  train_torch.py --config shakespeare_char|small [--steps N] [--batch B]
                 [--eval-every K --eval-batches 20] [--threads 2] [--data FILE]
                 [--autocast-bf16]   (forward under torch.autocast("cpu", torch.bfloat16):
                                      the peer of titan's model.compute_dtype=bf16)
Prints one JSON object on the last line: tokens_per_s (median over the timed steps,
step 0 excluded as warm-up), step_ms list, peak_rss_mb (getrusage), losses, val_loss.
"""
import argparse, json, math, resource, statistics, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # recipes/shakespeare_char.toml (nanoGPT's CPU baby GPT)
    "shakespeare_char": dict(dim=128, layers=4, heads=4, kv_heads=4, ffn=512, vocab=259, seq=64, batch=12,
                             lr=1e-3, beta2=0.99, warmup=100, min_lr=1e-4, steps=2000, wd=0.1, eps=1e-5),
    # perf-anchors.md "small": 41.6M params, tied
    "small": dict(dim=512, layers=8, heads=8, kv_heads=4, ffn=1536, vocab=32000, seq=512, batch=8,
                  lr=3e-4, beta2=0.95, warmup=2, min_lr=0.0, steps=6, wd=0.1, eps=1e-5),
}


class Block(nn.Module):
    def __init__(s, c, layer):
        super().__init__()
        D, H, Hkv = c["dim"], c["heads"], c["kv_heads"]
        s.H, s.Hkv, s.Dh, s.eps = H, Hkv, D // H, c["eps"]
        s.attention_norm = nn.Parameter(torch.ones(D))
        s.ffn_norm = nn.Parameter(torch.ones(D))
        s.wq = nn.Linear(D, H * s.Dh, bias=False)
        s.wk = nn.Linear(D, Hkv * s.Dh, bias=False)
        s.wv = nn.Linear(D, Hkv * s.Dh, bias=False)
        s.wo = nn.Linear(H * s.Dh, D, bias=False)
        s.w1 = nn.Linear(D, c["ffn"], bias=False)
        s.w3 = nn.Linear(D, c["ffn"], bias=False)
        s.w2 = nn.Linear(c["ffn"], D, bias=False)

    def rms(s, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * w

    def forward(s, h, cos, sin, mask):
        B, T, D = h.shape
        x = s.rms(h, s.attention_norm)
        q = s.wq(x).view(B, T, s.H, s.Dh).transpose(1, 2)
        k = s.wk(x).view(B, T, s.Hkv, s.Dh).transpose(1, 2)
        v = s.wv(x).view(B, T, s.Hkv, s.Dh).transpose(1, 2)

        def rope(t):
            t1, t2 = t[..., : s.Dh // 2], t[..., s.Dh // 2:]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        q, k = rope(q), rope(k)
        if s.Hkv != s.H:
            k = k.repeat_interleave(s.H // s.Hkv, dim=1)
            v = v.repeat_interleave(s.H // s.Hkv, dim=1)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(s.Dh))
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        a = (att @ v).transpose(1, 2).reshape(B, T, D)
        h = h + s.wo(a)
        x = s.rms(h, s.ffn_norm)
        return h + s.w2(F.silu(s.w1(x)) * s.w3(x))


class Decoder(nn.Module):
    def __init__(s, c):
        super().__init__()
        s.c = c
        s.tok_embeddings = nn.Embedding(c["vocab"], c["dim"])
        s.layers = nn.ModuleList([Block(c, l) for l in range(c["layers"])])
        s.norm = nn.Parameter(torch.ones(c["dim"]))
        Dh = c["dim"] // c["heads"]
        inv = 1.0 / (10000.0 ** (torch.arange(0, Dh, 2, dtype=torch.float64) / Dh))
        ang = torch.arange(c["seq"], dtype=torch.float64)[:, None] * inv[None, :]
        s.register_buffer("cos", torch.cat([ang.cos(), ang.cos()], -1).float(), persistent=False)
        s.register_buffer("sin", torch.cat([ang.sin(), ang.sin()], -1).float(), persistent=False)
        # GPT-2 / nanoGPT init (titan's model.init=gpt2): normal(0.02), residual
        # projections wo/w2 normal(0.02 / sqrt(2 L)), embedding (tied head) normal(0.02).
        for n, p in s.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * c["layers"]) if n.endswith(("wo.weight", "w2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(s, idx, targets):
        B, T = idx.shape
        h = s.tok_embeddings(idx)
        mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        cos, sin = s.cos[:T], s.sin[:T]
        for blk in s.layers:
            h = blk(h, cos, sin, mask)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + s.c["eps"]) * s.norm
        logits = h @ s.tok_embeddings.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def lr_at(c, step, steps):
    # nanoGPT get_lr (titan's warmup_cosine): it = step index 0..steps-1
    if step < c["warmup"]:
        return c["lr"] * (step + 1) / (c["warmup"] + 1)
    if step > steps:
        return c["min_lr"]
    r = (step - c["warmup"]) / max(1, steps - c["warmup"])
    return c["min_lr"] + 0.5 * (1.0 + math.cos(math.pi * r)) * (c["lr"] - c["min_lr"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True, choices=sorted(CONFIGS))
    ap.add_argument("--steps", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--data", default="")
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--eval-batches", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--autocast-bf16", action="store_true")
    a = ap.parse_args()
    c = dict(CONFIGS[a.config])
    steps = a.steps or c["steps"]
    B, T = a.batch or c["batch"], c["seq"]
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.data:
        raw = open(a.data, "rb").read()
        data = torch.tensor(list(raw), dtype=torch.long)
        n = int(len(data) * 0.9)
        train, val = data[:n], data[n:]
    else:
        train = torch.randint(0, c["vocab"], (1 << 20,))
        val = None

    def batch():
        ix = torch.randint(len(train) - T - 1, (B,))
        x = torch.stack([train[i:i + T] for i in ix])
        y = torch.stack([train[i + 1:i + T + 1] for i in ix])
        return x, y

    model = Decoder(c)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]}, {"params": other, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(0.9, c["beta2"]), eps=1e-8)

    @torch.no_grad()
    def evaluate():
        tot, cnt = 0.0, 0
        for i in range(a.eval_batches):
            s0 = i * B * T
            if s0 + B * T + 1 > len(val):
                break
            x = torch.stack([val[s0 + j * T: s0 + (j + 1) * T] for j in range(B)])
            y = torch.stack([val[s0 + j * T + 1: s0 + (j + 1) * T + 1] for j in range(B)])
            tot += model(x, y).item() * x.numel()
            cnt += x.numel()
        return tot / cnt

    out = {"config": a.config, "autocast_bf16": a.autocast_bf16, "torch": torch.__version__, "batch": B, "seq": T, "threads": a.threads,
           "params": sum(p.numel() for p in model.parameters()), "losses": [], "step_ms": []}
    if a.eval_every and val is not None:
        out["val_loss_0"] = evaluate()
        print(json.dumps({"step": 0, "val_loss": out["val_loss_0"]}), flush=True)
    t_start = time.time()
    for step in range(steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = lr_at(c, step, steps)
        x, y = batch()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast_bf16):
            loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out["step_ms"].append((time.perf_counter() - t0) * 1e3)
        out["losses"].append(loss.item())
        row = {"step": step + 1, "loss": loss.item(), "step_ms": out["step_ms"][-1]}
        if a.eval_every and val is not None and ((step + 1) % a.eval_every == 0 or step + 1 == steps):
            row["val_loss"] = out["val_loss"] = evaluate()
        if a.eval_every:
            print(json.dumps(row), flush=True)
    out["wall_s"] = time.time() - t_start
    timed = out["step_ms"][1:] or out["step_ms"]
    out["median_step_ms"] = statistics.median(timed)
    out["tokens_per_s"] = B * T / (out["median_step_ms"] / 1e3)
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps(out))


if __name__ == "__main__":
    main()
