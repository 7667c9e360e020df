"""HF oracle for titan's gpt_oss family (tests/models/gpt_oss_test.cpp), run with the
PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  gpt_oss_ref.py make DIR    a tiny random GptOssForCausalLM (4 layers alternating sliding
                             window 8 / full attention, q/k/v/o biases, sinks, YaRN factor 4
                             over 64 positions with truncate = false, 4 experts of which 2 per
                             token, router and expert biases, swiglu_limit 0.5 so the clamps
                             bite), every parameter drawn at random, save_pretrained(DIR) in
                             fp32 safetensors; then, for DIR/tokens.json's sequences (each run
                             alone):
                               DIR/logits.bin  the fp32 logits (concatenated (T, V) rows)
                               DIR/grads.safetensors  d/dθ of sum_t,v logits[t, v] · G[t, v]
                                 (G = DIR/g.bin, (T, V) f32 written by the caller), HF names
  gpt_oss_ref.py logits DIR  the logits of the model saved in DIR (an export) the same way
  gpt_oss_ref.py act N       N gate/up pairs (DIR-less; stdin: 2N f32 gate then up, stdout:
                             JSON {out, dgate, dup} of GptOssExperts._apply_gate and torch
                             autograd of sum(out · w), w = 1, 2, ..., N)
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM

torch.set_num_threads(1)


def tiny_config():
    return GptOssConfig(
        vocab_size=128, hidden_size=64, intermediate_size=32, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
        num_local_experts=4, num_experts_per_tok=2, swiglu_limit=0.5, max_position_embeddings=256,
        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "beta_fast": 32.0,
                         "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
        rms_norm_eps=1e-5, tie_word_embeddings=False, attn_implementation="eager", dtype="float32")


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
        save_file({n: p.grad.contiguous() for n, p in model.named_parameters()},
                  os.path.join(d, "grads.safetensors"))
    else:
        with torch.no_grad():
            for s in seqs:
                out.append(model(torch.tensor([s])).logits[0].float().numpy())
    np.concatenate(out).astype(np.float32).tofile(os.path.join(d, "logits.bin"))


def main():
    cmd = sys.argv[1]
    if cmd == "make":
        d = sys.argv[2]
        torch.manual_seed(0)
        model = GptOssForCausalLM(tiny_config()).float()
        model.model.embed_tokens.padding_idx = None
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + torch.randn_like(p) * 0.2)
                elif p.dim() == 1 or name.endswith("_bias"):
                    p.copy_(torch.randn_like(p) * 0.2)
                else:
                    p.copy_(torch.randn_like(p) * 0.15)
        model.save_pretrained(d, safe_serialization=True)
        run(model, d, grads=True)
    elif cmd == "logits":
        d = sys.argv[2]
        model = GptOssForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        run(model, d, grads=False)
    elif cmd == "act":
        n = int(sys.argv[2])
        v = np.frombuffer(sys.stdin.buffer.read(), dtype=np.float32)
        gate = torch.tensor(v[:n].copy(), requires_grad=True)
        up = torch.tensor(v[n:2 * n].copy(), requires_grad=True)
        experts = GptOssForCausalLM(tiny_config()).model.layers[0].mlp.experts
        gu = torch.stack([gate, up], dim=-1).reshape(-1)  # interleaved, as gate_up_proj
        out = experts._apply_gate(gu)
        (out * torch.arange(1, n + 1, dtype=torch.float32)).sum().backward()
        print(json.dumps({"out": out.tolist(), "dgate": gate.grad.tolist(), "dup": up.grad.tolist()}))


if __name__ == "__main__":
    main()
