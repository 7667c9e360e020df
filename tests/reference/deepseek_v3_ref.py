"""HF oracle for titan's deepseek_v3 / kimi_k2 families (tests/models/deepseek_v3_test.cpp),
run with the PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  deepseek_v3_ref.py make DIR QLORA DENSE_LAYERS
        a tiny random DeepseekV3ForCausalLM (MLA: q_lora_rank QLORA, 0 = null (one q_proj);
        kv latent 32, rope 16, nope 16, v 24; YaRN rope_scaling with mscale != mscale_all_dim;
        the first DENSE_LAYERS of 2 layers dense (first_k_dense_replace), the rest MoE);
        every parameter drawn at random (norm gains too), save_pretrained(DIR) in fp32
        safetensors; then, for DIR/tokens.json's sequences (each run alone):
          DIR/logits.bin  the fp32 logits (concatenated (T, V) rows)
          DIR/grads.safetensors  d/dθ of sum_t,v logits[t, v] · G[t, v] (G = DIR/g.bin,
                                 (T, V) f32 written by the caller) for every parameter, HF names
  deepseek_v3_ref.py logits DIR      the logits of the model saved in DIR (an export)
  deepseek_v3_ref.py count FLAVOR    total / active parameter counts of the published
                                     DeepSeek-V3 (671B) or Kimi K2 (1T) config on the meta device
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

torch.set_num_threads(1)


def tiny_config(q_lora, dense_layers):
    return DeepseekV3Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
        q_lora_rank=q_lora if q_lora > 0 else None, kv_lora_rank=32, qk_rope_head_dim=16,
        qk_nope_head_dim=16, v_head_dim=24, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, n_group=2, topk_group=1, routed_scaling_factor=2.5,
        first_k_dense_replace=dense_layers, norm_topk_prob=True, max_position_embeddings=512,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0,
                         "original_max_position_embeddings": 64, "beta_fast": 32, "beta_slow": 1,
                         "mscale": 1.0, "mscale_all_dim": 0.8},
        rope_interleave=True, rms_norm_eps=1e-6, tie_word_embeddings=False, dtype="float32")


def run(model, d, grads):
    seqs = json.load(open(os.path.join(d, "tokens.json")))
    V = model.config.vocab_size
    out = []
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
        # An expert no token chose has no gradient: it is written as zeros.
        save_file({n: (p.grad if p.grad is not None else torch.zeros_like(p)).contiguous()
                   for n, p in model.named_parameters()},
                  os.path.join(d, "grads.safetensors"))
    else:
        with torch.no_grad():
            for s in seqs:
                out.append(model(torch.tensor([s])).logits[0].float().numpy())
    np.concatenate(out).astype(np.float32).tofile(os.path.join(d, "logits.bin"))


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        d, q_lora, dense = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
        torch.manual_seed(0)
        model = DeepseekV3ForCausalLM(tiny_config(q_lora, dense)).float()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_(1.0 + torch.randn_like(p) * 0.2)  # norm gains
                else:
                    p.copy_(torch.randn_like(p) * 0.08)
        model.save_pretrained(d, safe_serialization=True)
        run(model, d, grads=True)
    elif cmd == "logits":
        d = sys.argv[2]
        model = DeepseekV3ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        run(model, d, grads=False)
    elif cmd == "count":
        if sys.argv[2] == "671B":
            cfg = DeepseekV3Config()  # transformers' defaults are deepseek-ai/DeepSeek-V3's config.json
        else:
            cfg = DeepseekV3Config(vocab_size=163840, num_attention_heads=64, num_key_value_heads=64,
                                   n_routed_experts=384, n_group=1, topk_group=1, first_k_dense_replace=1,
                                   routed_scaling_factor=2.827)
        with torch.device("meta"):
            m = DeepseekV3ForCausalLM(cfg)
        total = sum(p.numel() for p in m.parameters())
        E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
        routed = sum(p.numel() for n, p in m.named_parameters() if ".mlp.experts." in n)
        print(json.dumps({"total": total, "active": total - routed + routed * K // E}))


if __name__ == "__main__":
    main()
