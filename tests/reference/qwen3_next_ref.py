"""HF oracle for titan's qwen3_next family (tests/models/qwen3_next_test.cpp), run with the
PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  qwen3_next_ref.py make DIR       a tiny random Qwen3NextForCausalLM (3 Gated DeltaNet
                                   layers, 1 gated full-attention layer, dense MLPs), every
                                   parameter drawn at random (the zero-init gains too),
                                   save_pretrained(DIR) in fp32 safetensors; then the fp32
                                   logits of DIR/tokens.json's sequences (each run alone)
                                   to DIR/logits.bin (concatenated (T, V) rows)
  qwen3_next_ref.py logits DIR     the logits of the model saved in DIR (an export) the same way
  qwen3_next_ref.py count          parameter counts of the published Qwen3-Next-80B-A3B
                                   config on the meta device (no memory)
HF runs its torch (non-fla) paths: torch_chunk_gated_delta_rule and causal_conv1d_fn.
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import Qwen3NextConfig, Qwen3NextForCausalLM

torch.set_num_threads(1)


def tiny_config():
    return Qwen3NextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        num_experts=0, mlp_only_layers=[0, 1, 2, 3], max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        rms_norm_eps=1e-6, tie_word_embeddings=False, dtype="float32")


def randomize(model):
    """Every parameter drawn at random (the zero-init gains too)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(1, 16)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty_like(p).uniform_(0.5, 1.5))
            elif p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2)  # norm gains, (1 + w) or w
            else:
                p.copy_(torch.randn_like(p) * 0.08)


def logits_of(model, d):
    seqs = json.load(open(os.path.join(d, "tokens.json")))
    out = []
    with torch.no_grad():
        for s in seqs:
            out.append(model(torch.tensor([s])).logits[0].float().numpy())
    np.concatenate(out).astype(np.float32).tofile(os.path.join(d, "logits.bin"))


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        d = sys.argv[2]
        torch.manual_seed(0)
        model = Qwen3NextForCausalLM(tiny_config()).float().eval()
        randomize(model)
        model.save_pretrained(d, safe_serialization=True)
        logits_of(model, d)
    elif cmd == "logits":
        d = sys.argv[2]
        model = Qwen3NextForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        logits_of(model, d)
    elif cmd == "count":
        cfg = Qwen3NextConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=5120, num_hidden_layers=48,
            num_attention_heads=16, num_key_value_heads=2, head_dim=256, linear_num_key_heads=16,
            linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128,
            num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
            shared_expert_intermediate_size=512, decoder_sparse_step=1, tie_word_embeddings=False)
        with torch.device("meta"):
            m = Qwen3NextForCausalLM(cfg)
        print(json.dumps({"total": sum(p.numel() for p in m.parameters())}))


if __name__ == "__main__":
    main()
