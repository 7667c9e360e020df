"""transformers oracle for titan's sigmoid / group-limited router (tests/models/moe_test.cpp):
a tiny random DeepseekV3MoE (transformers' module: DeepseekV3TopkRouter with a nonzero
e_score_correction_bias, grouped experts, one shared expert) in fp32.

make DIR: reads DIR/x.f32 (T, D) and DIR/gy.f32 (T, D), writes the module's weights
  (router.f32 (E, D), bias.f32 (E), gate_up.f32 (E, 2F, D), down.f32 (E, D, F),
  shared_gate.f32 / shared_up.f32 (Fs, D), shared_down.f32 (D, Fs)), its output y.f32,
  the routing routing.json (per token: expert ids ascending) and the gradients of
  sum(y * gy): g_router.f32, g_gate_up.f32, g_down.f32, g_shared_{gate,up,down}.f32, g_x.f32.
Sizes: D 32, F 16, E 8 in 4 groups, 2 groups kept, 3 experts per token,
routed_scaling_factor 2.5, norm_topk_prob.
"""
import json
import sys

import numpy as np
import torch
from transformers import DeepseekV3Config
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE

torch.set_num_threads(1)
D, F, E = 32, 16, 8


def main(d):
    cfg = DeepseekV3Config(hidden_size=D, moe_intermediate_size=F, n_routed_experts=E, num_experts_per_tok=3,
                           n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                           n_shared_experts=1, intermediate_size=64, num_hidden_layers=1)
    torch.manual_seed(0)
    m = DeepseekV3MoE(cfg).float()
    with torch.no_grad():
        m.gate.weight.normal_(0.0, 0.5)
        m.gate.e_score_correction_bias.copy_(0.1 * torch.randn(E))
        m.experts.gate_up_proj.normal_(0.0, 0.2)
        m.experts.down_proj.normal_(0.0, 0.2)
        for p in m.shared_experts.parameters():
            p.normal_(0.0, 0.2)
    x = torch.from_numpy(np.fromfile(d + "/x.f32", dtype=np.float32).reshape(-1, D)).requires_grad_()
    gy = torch.from_numpy(np.fromfile(d + "/gy.f32", dtype=np.float32).reshape(-1, D))
    routing = {}

    def hook(mod, inp, out):
        routing["ids"] = torch.sort(out[2], dim=-1).values.tolist()

    m.gate.register_forward_hook(hook)
    y = m(x[None])[0]
    (y * gy).sum().backward()
    out = {
        "router": m.gate.weight, "bias": m.gate.e_score_correction_bias, "gate_up": m.experts.gate_up_proj,
        "down": m.experts.down_proj, "shared_gate": m.shared_experts.gate_proj.weight,
        "shared_up": m.shared_experts.up_proj.weight, "shared_down": m.shared_experts.down_proj.weight,
        "y": y,
    }
    for k, v in out.items():
        v.detach().numpy().astype(np.float32).tofile(f"{d}/{k}.f32")
    grads = {
        "g_router": m.gate.weight.grad, "g_gate_up": m.experts.gate_up_proj.grad, "g_down": m.experts.down_proj.grad,
        "g_shared_gate": m.shared_experts.gate_proj.weight.grad, "g_shared_up": m.shared_experts.up_proj.weight.grad,
        "g_shared_down": m.shared_experts.down_proj.weight.grad, "g_x": x.grad,
    }
    for k, v in grads.items():
        v.numpy().astype(np.float32).tofile(f"{d}/{k}.f32")
    json.dump(routing["ids"], open(d + "/routing.json", "w"))


if __name__ == "__main__":
    main(sys.argv[2])
