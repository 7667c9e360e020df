"""HF oracle for titan's Kimi Delta Attention mixer (tests/models/kimi_linear_test.cpp), run
with the PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  kimi_linear_ref.py kda DIR    a KimiLinearDeltaAttention layer (transformers'
                                modeling_kimi_linear, its torch paths: causal_conv1d_fn and
                                chunk_kimi_delta_attention) of a tiny KimiLinearConfig, every
                                parameter drawn at random; its parameters to
                                DIR/layer.safetensors (HF names inside the layer), a random
                                input x (1, T, D) to DIR/x.bin and the layer's output to
                                DIR/out.bin (fp32), T = 70 (crosses the 64-token chunk)
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers.models.kimi_linear.configuration_kimi_linear import KimiLinearConfig
from transformers.models.kimi_linear.modeling_kimi_linear import KimiLinearDeltaAttention

torch.set_num_threads(1)
D, H, K, W, T = 48, 2, 16, 4, 70


def main():
    mode, d = sys.argv[1], sys.argv[2]
    assert mode == "kda"
    cfg = KimiLinearConfig(vocab_size=64, hidden_size=D, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, num_key_value_heads=2, linear_num_heads=H, linear_head_dim=K,
                           linear_conv_kernel_dim=W, layer_types=["linear_attention", "full_attention"],
                           rms_norm_eps=1e-5, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                           dtype="float32")
    torch.manual_seed(0)
    layer = KimiLinearDeltaAttention(cfg, 0).float()
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.log(torch.empty_like(p).uniform_(1.0, 16.0)))
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty_like(p).uniform_(-4.0, 1.0))
            elif name.endswith("o_norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 / p.shape[-1] ** 0.5 if p.dim() >= 2 else 0.3))
        x = torch.randn(1, T, D)
        out = layer(x)
    save_file({n: p.detach().contiguous() for n, p in layer.named_parameters()}, os.path.join(d, "layer.safetensors"))
    x.numpy().astype("float32").tofile(os.path.join(d, "x.bin"))
    out.numpy().astype("float32").tofile(os.path.join(d, "out.bin"))


if __name__ == "__main__":
    main()
