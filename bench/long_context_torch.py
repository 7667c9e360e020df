# The long_context retrieval task on the PyTorch/transformers peer: a Qwen3ForCausalLM of
# long_context_sft's shape (2 layers, dim 128, 4 heads of 32, 2 KV heads, FFN 384, tied
# embeddings, byte_chat ids: bytes 0-255, <|im_start|> 259, <|im_end|> 260) trained from
# scratch on prompts of MINP-MAXP "k: 907" lines (single-letter keys, 3-digit values) and
# one question, loss on the reply `<answer>907</answer><|im_end|>` only; AdamW (0.9, 0.95,
# weight decay 0.1), warmup 100 then cosine to LR/10, clip 1.0, BS samples per step.
# MODE "kv": ask for a random key; "needle": the asked line's key is always "magic".
# Prints the reply loss and the greedy exact match of 128 validation samples every 250
# steps. It checks whether titan's training or the model's size is what keeps
# long_context_sft at the random-digit loss (docs/rl-workloads.md, "Long context").
#   /work/venv/bin/python bench/long_context_torch.py MINP MAXP STEPS LR BS MODE
import random, sys, time, math, torch
from transformers import Qwen3Config, Qwen3ForCausalLM
torch.set_num_threads(1)
torch.manual_seed(0)
rng = random.Random(0)
IM_START, IM_END = 259, 260
letters = [chr(c) for c in range(65, 91)] + [chr(c) for c in range(97, 123)]
MINP, MAXP = int(sys.argv[1]), int(sys.argv[2])
STEPS = int(sys.argv[3]); LR = float(sys.argv[4]); BS = int(sys.argv[5]); MODE = sys.argv[6]
def sample(r):
    n = r.randint(MINP, MAXP)
    keys = r.sample(letters, n)
    vals = ["%03d" % r.randint(0, 999) for _ in keys]
    q = r.randrange(n)
    if MODE == "needle":
        keys[q] = "magic"
    user = "\n".join(f"{k}: {v}" for k, v in zip(keys, vals)) + f"\n\nWhat is the value of {keys[q]}?"
    prompt = [IM_START] + list(b"user\n") + list(user.encode()) + [IM_END] + list(b"\n") + [IM_START] + list(b"assistant\n")
    reply = list(f"<answer>{vals[q]}</answer>".encode()) + [IM_END]
    return prompt, reply, vals[q]
cfg = Qwen3Config(vocab_size=263, hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, max_position_embeddings=1024, rope_theta=10000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, attention_dropout=0.0)
m = Qwen3ForCausalLM(cfg)
opt = torch.optim.AdamW(m.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
val = [sample(random.Random(10_000 + i)) for i in range(128)]
def evaluate():
    m.eval(); ok = 0
    with torch.no_grad():
        for p, rep, v in val:
            ids = torch.tensor([p + list(b"<answer>")])
            out = []
            for _ in range(3):
                nxt = int(m(ids).logits[0, -1].argmax()); out.append(nxt)
                ids = torch.cat([ids, torch.tensor([[nxt]])], 1)
            ok += bytes(out).decode(errors="replace") == v
    m.train(); return ok / len(val)
t0 = time.time()
for step in range(1, STEPS + 1):
    lr = LR * min(1, step / 100) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / STEPS)))
    for g in opt.param_groups: g["lr"] = lr
    batch = [sample(rng) for _ in range(BS)]
    L = max(len(p) + len(r) for p, r, _ in batch)
    ids = torch.full((BS, L), 0); lab = torch.full((BS, L), -100)
    for i, (p, r, _) in enumerate(batch):
        s = p + r; ids[i, :len(s)] = torch.tensor(s); lab[i, len(p):len(s)] = torch.tensor(r)
    loss = m(input_ids=ids, labels=lab).loss
    opt.zero_grad(); loss.backward(); torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); opt.step()
    if step % 250 == 0:
        print(f"step {step} loss {loss.item():.4f} greedy_acc {evaluate():.3f} t {time.time()-t0:.0f}s", flush=True)
