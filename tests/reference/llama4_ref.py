"""transformers oracle for titan's llama4 family (tests/models/llama4_test.cpp).

usage: llama4_ref.py make DIR        DIR/batch.json {"tokens": [...]} ->
                                     DIR/config.json + model.safetensors (save_pretrained of a
                                     tiny random Llama4ForCausalLM), DIR/ref_logits.f32
       llama4_ref.py check DIR EX    transformers loads titan's export EX (config.json +
                                     model.safetensors) -> EX/reload_logits.f32

The tiny model: 4 layers, NoPE on layer 3 (no_rope_layer_interval 4) with temperature
tuning (floor_scale 4, so positions >= 3 are scaled), chunked attention of 12 positions on
the RoPE layers (a 40-token sequence: 4 chunks, across titan's 32-token KV block), QK-norm,
Llama-3 RoPE scaling with low_freq_factor == high_freq_factor (as Scout), MoE on layers 1
and 3 (4 experts, top-1, plus the shared expert), dense SwiGLU layers of width 48 on 0
and 2. Eager attention, float32; logits written as raw little-endian float32 (T, V).
"""
import json
import os
import sys

import numpy as np
import torch
from transformers import Llama4ForCausalLM, Llama4TextConfig


def logits_of(model, tokens):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([tokens]), use_cache=False)
    return out.logits[0].float().contiguous().numpy().astype("<f4")


def make(d):
    torch.manual_seed(0)
    cfg = Llama4TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=32, intermediate_size_mlp=48,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2,
        attention_chunk_size=12, attn_temperature_tuning=True, floor_scale=4, attn_scale=0.5,
        use_qk_norm=True, max_position_embeddings=256, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                         "original_max_position_embeddings": 16},
        initializer_range=0.1, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        pad_token_id=None)
    cfg._attn_implementation = "eager"
    model = Llama4ForCausalLM(cfg).eval()
    with torch.no_grad():  # norm gains away from 1 so a misplaced norm shows
        for n, p in model.named_parameters():
            if n.endswith("layernorm.weight") or n.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    model.save_pretrained(d)
    tokens = json.load(open(os.path.join(d, "batch.json")))["tokens"]
    logits_of(model, tokens).tofile(os.path.join(d, "ref_logits.f32"))


def check(d, ex):
    tokens = json.load(open(os.path.join(d, "batch.json")))["tokens"]
    model = Llama4ForCausalLM.from_pretrained(ex, attn_implementation="eager").eval()
    logits_of(model, tokens).tofile(os.path.join(ex, "reload_logits.f32"))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3])
    else:
        sys.exit("usage: llama4_ref.py make DIR | check DIR EX")
