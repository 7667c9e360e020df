#!/usr/bin/python3
"""PyTorch oracle for titan's RL losses (tests/rl/rl_policy_loss_test.cpp).

Usage: rl_ref.py DIR, with ops_ref.py's manifest/result protocol (tests/util/torch_ref.h).
Registers "policy_loss": the PPO clipped surrogate written the way TRL's GRPOTrainer
(_compute_loss) and verl's compute_policy_loss write it -- torch.clamp + torch.min --
plus the k3 KL term, aggregated per sequence (GRPO) or per token (DAPO). float64.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ops_ref  # noqa: E402


@ops_ref.op("policy_loss")
def _policy_loss(i, a):
    lp, old, adv = i["logprobs"], i["old_logprobs"], i["advantages"]
    ratio = torch.exp(lp - old)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - a["epsilon_low"], 1 + a["epsilon_high"]) * adv
    per_token = -torch.min(unclipped, clipped)
    if a["kl_coef"] > 0:
        d = i["ref_logprobs"] - lp
        per_token = per_token + a["kl_coef"] * (torch.exp(d) - d - 1)
    off = a["seq_offsets"]
    if a["aggregation"] == "seq_mean_token_mean":
        seq_means = [per_token[off[s]:off[s + 1]].mean() for s in range(len(off) - 1)]
        loss = torch.stack(seq_means).sum() / a["total_sequences"]
    else:
        loss = per_token.sum() / a["total_tokens"]
    return [loss]


if __name__ == "__main__":
    ops_ref.main()
