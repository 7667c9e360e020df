"""HF oracle for titan's deepseek_v32 family (tests/models/deepseek_v32_test.cpp), run with
the PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  deepseek_v32_ref.py make DIR TOPK
        a tiny random DeepseekV32ForCausalLM (MLA: q_lora_rank 32, kv latent 32, rope 16,
        nope 16, v 24; YaRN rope_parameters with mscale != mscale_all_dim; DSA indexer of 16
        heads of 32 dims keeping TOPK keys; layer 0 dense, layer 1 DeepSeek-MoE), every
        parameter drawn at random (norm gains and biases too), eager attention,
        save_pretrained(DIR) in fp32 safetensors; then, for DIR/tokens.json's sequences
        (each run alone). 16 indexer heads make an exact tie of two index scores unlikely:
        a key scores exactly 0 when every head's q·k is negative (the ReLU), and
        torch.topk orders ties in no documented way, while titan gives them to the
        earlier key (with 4 heads, 1 key in 16 scores 0 and the oracles disagree).
          DIR/logits.bin         the fp32 logits (concatenated (T, V) rows)
          DIR/routing.json       {"layer": [[expert ids of token t, ascending], ...]} (MoE layers)
          DIR/selection.json     {"layer": [[key positions query t attends, ascending], ...]}
          DIR/grads.safetensors  d/dθ of sum_t,v logits[t, v] · G[t, v] (G = DIR/g.bin, (T, V)
                                 f32 written by the caller) for every parameter, HF names
                                 (zeros where transformers gives none: the indexer)
  deepseek_v32_ref.py logits DIR      the logits of the model saved in DIR (an export)
  deepseek_v32_ref.py indexer DIR STAGE
        the model saved in DIR in float64: the DSA indexer loss of DeepSeek-V3.2-Exp §2.1
        on DIR/tokens.json's sequences (each run alone), written from the paper: per layer
        and query t, p_t = the main attention's softmax summed over heads / H, r_t =
        softmax of the indexer scores I[t, :], KL(p_t || r_t), over every causal key
        (STAGE dense, the warm-up) or over the keys the indexer selected (sparse); the
        value L = sum over layers of (1/T) sum_t KL_t (T = all tokens), with p detached.
          DIR/indexer_loss.json        {"loss": L}
          DIR/indexer_grads.safetensors  dL/dθ of the indexers' parameters, HF names
  deepseek_v32_ref.py count           total / active parameter counts of the published
                                      DeepSeek-V3.2-Exp config on the meta device
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import DeepseekV32Config, DeepseekV32ForCausalLM

torch.set_num_threads(1)


def tiny_config(topk):
    return DeepseekV32Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=24,
        n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=2, topk_group=1,
        routed_scaling_factor=2.5, first_k_dense_replace=1, norm_topk_prob=True,
        max_position_embeddings=512, index_topk=topk, index_n_heads=16, index_head_dim=32,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 0.8},
        rms_norm_eps=1e-6, tie_word_embeddings=False, dtype="float32")


def hooks(model, routing, selection):
    hs = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is not None and hasattr(layer.mlp, "experts"):
            def rhook(mod, inp, out, i=i):
                idx = out[2].detach().reshape(-1, out[2].shape[-1])
                routing.setdefault(str(i), []).extend(torch.sort(idx, dim=-1).values.tolist())
            hs.append(gate.register_forward_hook(rhook))

        def shook(mod, inp, out, i=i):
            rows = []
            for t, r in enumerate(out[0].tolist()):  # (S, topk); causally masked picks dropped
                rows.append(sorted(p for p in r if p <= t))
            selection.setdefault(str(i), []).extend(rows)
        hs.append(layer.self_attn.indexer.register_forward_hook(shook))
    return hs


def run(model, d, grads):
    seqs = json.load(open(os.path.join(d, "tokens.json")))
    V = model.config.vocab_size
    out, routing, selection = [], {}, {}
    hs = hooks(model, routing, selection)
    if grads:
        T = sum(len(s) for s in seqs)
        G = torch.from_numpy(np.fromfile(os.path.join(d, "g.bin"), dtype=np.float32).reshape(T, V))
        model.zero_grad()
        off = 0
        for s in seqs:
            logits = model(torch.tensor([s])).logits[0]
            (logits * G[off:off + len(s)]).sum().backward()
            off += len(s)
            out.append(logits.detach().float().numpy())
        save_file({n: (p.grad if p.grad is not None else torch.zeros_like(p)).contiguous()
                   for n, p in model.named_parameters()},
                  os.path.join(d, "grads.safetensors"))
    else:
        with torch.no_grad():
            for s in seqs:
                out.append(model(torch.tensor([s])).logits[0].float().numpy())
    for h in hs:
        h.remove()
    np.concatenate(out).astype(np.float32).tofile(os.path.join(d, "logits.bin"))
    json.dump(routing, open(os.path.join(d, "routing.json"), "w"))
    json.dump(selection, open(os.path.join(d, "selection.json"), "w"))


def indexer_loss(d, stage):
    import transformers.models.deepseek_v32.modeling_deepseek_v32 as mdl
    # The forward runs in fp32 (transformers' grouped expert GEMM takes no float64) and
    # records each layer's inputs; the loss is then computed in float64 from them.
    model = DeepseekV32ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
    seqs = json.load(open(os.path.join(d, "tokens.json")))
    T = sum(len(s) for s in seqs)
    captured = {}  # layer -> {"q", "k", "scaling", "x", "q_resid", "pe", "topk"}
    orig = mdl.eager_attention_forward

    def attn(module, query, key, value, attention_mask, scaling, **kw):
        captured[module.layer_idx].update(q=query.detach().double(), k=key.detach().double(), scaling=scaling)
        return orig(module, query, key, value, attention_mask, scaling=scaling, **kw)

    hs = []
    for i, layer in enumerate(model.model.layers):
        def ihook(mod, args, kwargs, out, i=i):
            a = list(args) + [kwargs.get(n) for n in ("hidden_states", "q_resid", "position_embeddings")
                              if n in kwargs]
            captured[i] = {"x": a[0].detach().double(), "q_resid": a[1].detach().double(),
                           "pe": tuple(t.double() for t in a[2]), "topk": out[0].long()}
        hs.append(layer.self_attn.indexer.register_forward_hook(ihook, with_kwargs=True))
    mdl.eager_attention_forward = attn
    model.zero_grad()
    total = torch.zeros((), dtype=torch.float64)
    runs = []
    try:
        for s in seqs:
            captured.clear()
            with torch.no_grad():
                model(torch.tensor([s]))
            runs.append(dict(captured))
    finally:
        mdl.eager_attention_forward = orig
        for h in hs:
            h.remove()
    for layer in model.model.layers:
        layer.self_attn.indexer.double()
    for s, captured in zip(seqs, runs):
            n = len(s)
            causal = torch.ones(n, n, dtype=torch.bool).tril()
            for i, layer in enumerate(model.model.layers):
                c, ix = captured[i], layer.self_attn.indexer
                # the main attention's distribution (a constant target)
                z = torch.matmul(c["q"][0], c["k"][0].transpose(-1, -2)) * c["scaling"]  # (H, n, n)
                allowed = causal.clone()
                if stage == "sparse":
                    sel = torch.zeros(n, n, dtype=torch.bool).scatter(-1, c["topk"], True)
                    allowed &= sel
                z = z.masked_fill(~allowed, float("-inf"))
                p = torch.softmax(z, dim=-1).sum(0) / z.shape[0]  # (n, n)
                # the indexer's scores with autograd (its forward, without no_grad)
                cos, sin = c["pe"]
                q = ix.wq_b(c["q_resid"]).view(1, n, ix.n_heads, ix.head_dim)
                q_rot, q_pass = torch.split(q, [ix.qk_rope_head_dim, ix.head_dim - ix.qk_rope_head_dim], dim=-1)
                k = ix.k_norm(ix.wk(c["x"])).unsqueeze(2)
                k_rot, k_pass = torch.split(k, [ix.qk_rope_head_dim, ix.head_dim - ix.qk_rope_head_dim], dim=-1)
                q_rot, k_rot = mdl.apply_rotary_pos_emb(q_rot, k_rot, cos, sin, unsqueeze_dim=2)
                q = torch.cat([q_rot, q_pass], dim=-1)[0]  # (n, Hi, D)
                k = torch.cat([k_rot, k_pass], dim=-1)[0, :, 0]  # (n, D)
                sc = torch.relu(torch.einsum("thd,sd->ths", q, k) * ix.softmax_scale)
                w = ix.weights_proj(c["x"])[0] * ix.n_heads ** -0.5  # (n, Hi)
                I = torch.einsum("th,ths->ts", w, sc).masked_fill(~allowed, float("-inf"))
                logr = torch.log_softmax(I, dim=-1)
                kl = torch.where(p > 0, p * (torch.log(p.clamp_min(1e-300)) - logr), torch.zeros_like(p)).sum()
                total = total + kl / T
    total.backward()
    grads = {n: p.grad.float().contiguous() for n, p in model.named_parameters() if ".indexer." in n}
    save_file(grads, os.path.join(d, "indexer_grads.safetensors"))
    json.dump({"loss": total.item()}, open(os.path.join(d, "indexer_loss.json"), "w"))


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        d, topk = sys.argv[2], int(sys.argv[3])
        torch.manual_seed(0)
        cfg = tiny_config(topk)
        cfg._attn_implementation = "eager"
        model = DeepseekV32ForCausalLM(cfg).float()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_(1.0 + torch.randn_like(p) * 0.2)  # norm gains (and k_norm's bias)
                else:
                    p.copy_(torch.randn_like(p) * 0.08)
        model.save_pretrained(d, safe_serialization=True)
        run(model, d, grads=True)
    elif cmd == "logits":
        d = sys.argv[2]
        model = DeepseekV32ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        run(model, d, grads=False)
    elif cmd == "indexer":
        indexer_loss(sys.argv[2], sys.argv[3])
    elif cmd == "count":
        cfg = DeepseekV32Config()  # transformers' defaults are deepseek-ai/DeepSeek-V3.2-Exp's config.json
        with torch.device("meta"):
            m = DeepseekV32ForCausalLM(cfg)
        total = sum(p.numel() for p in m.parameters())
        E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
        routed = sum(p.numel() for n, p in m.named_parameters() if ".mlp.experts." in n)
        print(json.dumps({"total": total, "active": total - routed + routed * K // E}))


if __name__ == "__main__":
    main()
