"""HF oracle for titan's gemma2 and gemma3 families (tests/models/gemma_test.cpp), run
with the PyPI venv's python (transformers 5.x, torch 2.13 CPU).

  gemma_ref.py make DIR FAM  FAM gemma2: a tiny random Gemma2ForCausalLM (4 layers
                             alternating sliding window 8 / global, attention soft-cap 2,
                             final soft-cap 3, query_pre_attn_scalar 24, sandwich norms,
                             GeGLU, tied embeddings scaled by sqrt(64)); FAM gemma3: a tiny
                             Gemma3ForCausalLM (layers sliding, sliding, global, sliding,
                             window 8, QK-norm, global RoPE theta 1e6, local 100, final
                             soft-cap 3); every parameter drawn at random
                             (the zero-init (1 + w) gains too), save_pretrained(DIR) in fp32
                             safetensors; then, for DIR/tokens.json's sequences (each run alone):
                               DIR/logits.bin  the fp32 logits (concatenated (T, V) rows)
                               DIR/grads.safetensors  d/dθ of sum_t,v logits[t, v] · G[t, v]
                                 (G = DIR/g.bin, (T, V) f32 written by the caller), HF names
  gemma_ref.py logits DIR FAM  the logits of the model saved in DIR (an export) the same way
  gemma_ref.py count         parameter counts of the published gemma-2-2b / 9b / 27b configs
                             on the meta device (no memory), as JSON
"""
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Gemma2Config, Gemma2ForCausalLM, Gemma3ForCausalLM, Gemma3TextConfig

torch.set_num_threads(1)


def tiny_config(fam):
    if fam == "gemma3":
        return Gemma3TextConfig(
            vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
            query_pre_attn_scalar=24, final_logit_softcapping=3.0, max_position_embeddings=512,
            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}},
            rms_norm_eps=1e-6, tie_word_embeddings=True, attn_implementation="eager", dtype="float32")
    return Gemma2Config(
        vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=8,
        query_pre_attn_scalar=24, attn_logit_softcapping=2.0, final_logit_softcapping=3.0,
        max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=True,
        attn_implementation="eager", dtype="float32")


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
    cls = {"gemma2": Gemma2ForCausalLM, "gemma3": Gemma3ForCausalLM}[sys.argv[3]] if len(sys.argv) > 3 else None
    if cmd == "make":
        d = sys.argv[2]
        torch.manual_seed(0)
        model = cls(tiny_config(sys.argv[3])).float()
        # No padding row: HF's padding_idx zeroes the lookup's gradient of row pad_token_id
        # (a training convenience titan's embedding does not have); the forward is the same.
        model.model.embed_tokens.padding_idx = None
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.copy_(torch.randn_like(p) * 0.2)  # (1 + w) gains
                else:
                    p.copy_(torch.randn_like(p) * 0.08)
        model.save_pretrained(d, safe_serialization=True)
        run(model, d, grads=True)
    elif cmd == "logits":
        d = sys.argv[2]
        model = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        run(model, d, grads=False)
    elif cmd == "count":
        sizes = {"gemma2_2b": dict(hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=256),
                 "gemma2_9b": dict(hidden_size=3584, intermediate_size=14336, num_hidden_layers=42,
                                   num_attention_heads=16, num_key_value_heads=8, head_dim=256),
                 "gemma2_27b": dict(hidden_size=4608, intermediate_size=36864, num_hidden_layers=46,
                                    num_attention_heads=32, num_key_value_heads=16, head_dim=128,
                                    query_pre_attn_scalar=144)}
        out = {}
        for k, kw in sizes.items():
            with torch.device("meta"):
                m = Gemma2ForCausalLM(Gemma2Config(vocab_size=256000, **kw))
            out[k] = sum(p.numel() for p in m.parameters())
        with torch.device("meta"):
            m = Gemma3ForCausalLM(Gemma3TextConfig(  # google/gemma-3-1b-pt
                vocab_size=262144, hidden_size=1152, intermediate_size=6912, num_hidden_layers=26,
                num_attention_heads=4, num_key_value_heads=1, head_dim=256, sliding_window=512))
        out["gemma3_1b"] = sum(p.numel() for p in m.parameters())
        print(json.dumps(out))


if __name__ == "__main__":
    main()
