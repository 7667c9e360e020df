"""PyTorch peer of `titan train` on a DeepSeek-V3 MoE model for bench/moe_train_bench.sh:
transformers' DeepseekV3ForCausalLM (eager attention, its eager MoE: a loop over the
experts that received tokens) built from the same config.json titan reads, fp32,
trained on the byte tokens of the same text with the same batch shape and optimizer
(AdamW lr 3e-4, betas (0.9, 0.95), weight decay 0.1, eps 1e-8, global-norm clipping 1.0).
Run with the project venv's python (torch 2.13 CPU, transformers 5.x).

  moe_train_torch.py --config CONFIG.json --data FILE --seq T --batch B --steps N [--threads 2]

Prints one JSON object on the last line: step_ms (every step), losses, batch, seq.
"""
import argparse, json, time

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM


def hf_config(path):
    j = json.load(open(path))
    rs = dict(j.pop("rope_scaling"))
    rs["rope_theta"] = j.pop("rope_theta")
    for k in ("architectures", "model_type", "torch_dtype"):
        j.pop(k, None)
    return DeepseekV3Config(**j, rope_parameters=rs, dtype="float32", attn_implementation="eager")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    model = DeepseekV3ForCausalLM(hf_config(a.config)).float()
    model.train()
    data = torch.tensor(list(open(a.data, "rb").read()), dtype=torch.long)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    g = torch.Generator().manual_seed(1337)
    step_ms, losses = [], []
    for _ in range(a.steps):
        starts = torch.randint(0, len(data) - a.seq - 1, (a.batch,), generator=g)
        x = torch.stack([data[s:s + a.seq] for s in starts])
        y = torch.stack([data[s + 1:s + a.seq + 1] for s in starts])
        t0 = time.perf_counter()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        losses.append(loss.item())
    print(json.dumps({"step_ms": step_ms, "losses": losses, "batch": a.batch, "seq": a.seq}))


if __name__ == "__main__":
    main()
