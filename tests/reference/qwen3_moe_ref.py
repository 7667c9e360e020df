"""transformers oracle for titan's qwen3_moe family (tests/models/qwen3_moe_test.cpp).

make DIR:   builds a tiny random Qwen3MoeForCausalLM (fp32), save_pretrained(DIR), then on
            the tokens of DIR/batch.json (one sequence) writes
              DIR/ref_logits.f32        (T, V) logits
              DIR/ref_routing.json      {"layer": [[expert ids of token t, ascending], ...]}
              DIR/ref_loss.f32          mean cross-entropy vs batch.json "targets"
              DIR/grad.<name>.f32       gradients of the router gate and the per-expert
                                        gate/up/down projections (split from transformers'
                                        fused gate_up_proj) of every MoE layer
check DIR OTHER: loads OTHER (titan's export) with from_pretrained and writes
              OTHER/reload_logits.f32 and OTHER/reload_routing.json for DIR's tokens.
"""
import json
import sys

import numpy as np
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

torch.set_num_threads(1)


def routing_hooks(model, routing):
    hooks = []
    for i, layer in enumerate(model.model.layers):
        gate = getattr(layer.mlp, "gate", None)
        if gate is None or not hasattr(layer.mlp, "experts"):
            continue

        def hook(mod, inp, out, i=i):
            idx = out[2].detach().reshape(-1, out[2].shape[-1])
            routing[str(i)] = torch.sort(idx, dim=-1).values.tolist()

        hooks.append(gate.register_forward_hook(hook))
    return hooks


def run(model, tokens):
    routing = {}
    hooks = routing_hooks(model, routing)
    ids = torch.tensor([tokens])
    pos = torch.arange(len(tokens))[None]
    out = model(input_ids=ids, position_ids=pos)
    for h in hooks:
        h.remove()
    return out.logits[0], routing


def make(d):
    batch = json.load(open(d + "/batch.json"))
    cfg = Qwen3MoeConfig(
        vocab_size=97, hidden_size=48, intermediate_size=80, moe_intermediate_size=24,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=6, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
        mlp_only_layers=[1], max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(cfg).float()
    with torch.no_grad():  # spread weights so routing is not near-uniform
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "gate.weight" in n and "proj" not in n:
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.08)
    model.save_pretrained(d, safe_serialization=True)
    logits, routing = run(model, batch["tokens"])
    tgt = torch.tensor(batch["targets"])
    loss = torch.nn.functional.cross_entropy(logits, tgt)
    loss.backward()
    logits.detach().numpy().astype(np.float32).tofile(d + "/ref_logits.f32")
    np.array([loss.item()], dtype=np.float32).tofile(d + "/ref_loss.f32")
    json.dump(routing, open(d + "/ref_routing.json", "w"))
    F = cfg.moe_intermediate_size
    for i, layer in enumerate(model.model.layers):
        if not hasattr(layer.mlp, "experts"):
            continue
        pre = f"model.layers.{i}.mlp."
        layer.mlp.gate.weight.grad.numpy().astype(np.float32).tofile(d + f"/grad.{pre}gate.weight.f32")
        gu = layer.mlp.experts.gate_up_proj.grad  # (E, 2F, D)
        dn = layer.mlp.experts.down_proj.grad     # (E, D, F)
        for e in range(cfg.num_experts):
            gu[e, :F].numpy().astype(np.float32).tofile(d + f"/grad.{pre}experts.{e}.gate_proj.weight.f32")
            gu[e, F:].numpy().astype(np.float32).tofile(d + f"/grad.{pre}experts.{e}.up_proj.weight.f32")
            dn[e].numpy().astype(np.float32).tofile(d + f"/grad.{pre}experts.{e}.down_proj.weight.f32")


def check(d, other):
    batch = json.load(open(d + "/batch.json"))
    model = Qwen3MoeForCausalLM.from_pretrained(other, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        logits, routing = run(model, batch["tokens"])
    logits.numpy().astype(np.float32).tofile(other + "/reload_logits.f32")
    json.dump(routing, open(other + "/reload_routing.json", "w"))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    else:
        check(sys.argv[2], sys.argv[3])
