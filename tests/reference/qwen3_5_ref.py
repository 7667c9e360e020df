"""HF oracle for titan's qwen3_5 family (tests/models/qwen3_5_test.cpp), run with the
PyPI venv's python (transformers 5.x with qwen3_5, torch 2.13 CPU).

  qwen3_5_ref.py make DIR       a tiny random Qwen3_5ForCausalLM (3 Gated DeltaNet layers
                                with split in_proj_qkv / z / b / a, 1 gated full-attention
                                layer, dense MLPs), every parameter random,
                                save_pretrained(DIR) in fp32 safetensors; then the fp32
                                logits of DIR/tokens.json's sequences to DIR/logits.bin
  qwen3_5_ref.py logits DIR     the logits of the model saved in DIR (an export)
  qwen3_5_ref.py count          the parameter count of Qwen3_5TextConfig's defaults on the
                                meta device
"""
import json
import os
import sys

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_next_ref import logits_of, randomize  # noqa: E402

torch.set_num_threads(1)


def tiny_config():
    return Qwen3_5TextConfig(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=16, linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [1, 1, 0], "mrope_interleaved": True},
        rms_norm_eps=1e-6, tie_word_embeddings=False, dtype="float32")


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        d = sys.argv[2]
        torch.manual_seed(0)
        model = Qwen3_5ForCausalLM(tiny_config()).float().eval()
        randomize(model)
        model.save_pretrained(d, safe_serialization=True)
        logits_of(model, d)
    elif cmd == "logits":
        d = sys.argv[2]
        model = Qwen3_5ForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        logits_of(model, d)
    elif cmd == "count":
        with torch.device("meta"):
            m = Qwen3_5ForCausalLM(Qwen3_5TextConfig())
        print(json.dumps({"total": sum(p.numel() for p in m.parameters())}))
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
