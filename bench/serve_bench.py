"""`titan serve` throughput and latency on the llama3 `small` flavor (dim 512, 8 layers,
8/4 heads, F 1536, vocab 32000, tied; random weights), with the venv's `openai` client
as the load generator, side by side with its peer, the same engine offline
(`titan generate --input`, one batch, no HTTP).

For 1, 8 and 64 concurrent clients, each client sends streaming completions in a loop
(prompt ~40 tokens, max_tokens 64, ignore_eos, temperature 1): requests/s, output
tokens/s, time to first token (request sent -> first token chunk) and inter-token
latency (gap between token chunks, per token) p50/p99. Results: docs/benchmarks.md,
"Server".

    /work/venv/bin/python bench/serve_bench.py [BUILD_DIR] [THREADS]

The model directory (outputs/serve_bench/small: config.json + model.safetensors from
transformers' LlamaForCausalLM with seed 0, and a 32000-token byte-level BPE
tokenizer.json cut from the Qwen3 tokenizer: its first 32000 ids and the merges among
them) is made once.
"""
import concurrent.futures as cf
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import openai

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
THREADS = sys.argv[2] if len(sys.argv) > 2 else "2"
TITAN = os.path.join(ROOT, BUILD, "titan")
OUT = os.path.join(ROOT, "outputs", "serve_bench")
MODEL = os.path.join(OUT, "small")
MAX_TOKENS = 64
# <SHARED>/data holds the data sets: the repository's data/ unless TITAN_SHARED is set.
SHARED = os.environ.get("TITAN_SHARED", ROOT)


def make_model():
    if os.path.exists(os.path.join(MODEL, "model.safetensors")):
        return
    import torch
    import transformers
    os.makedirs(MODEL, exist_ok=True)
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                                   num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                                   tie_word_embeddings=True, max_position_embeddings=2048, rope_theta=10000.0,
                                   rms_norm_eps=1e-5, bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(MODEL, safe_serialization=True)
    tok = json.load(open(os.path.join(SHARED, "data", "qwen3-tokenizer", "tokenizer.json")))
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < 32000}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m if isinstance(m, list) else m.split(" ")
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tok["model"]["vocab"], tok["model"]["merges"] = vocab, merges
    tok["added_tokens"] = []
    json.dump(tok, open(os.path.join(MODEL, "tokenizer.json"), "w"), ensure_ascii=False)


PROMPT = ("The old lighthouse keeper climbed the stairs every evening, counting each step as the sea "
          "rolled against the rocks below, and wondered")


def start_server():
    port_file = os.path.join(OUT, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    log = open(os.path.join(OUT, "server.log"), "w")
    p = subprocess.Popen([TITAN, "serve", "--hf", MODEL, "--served-model-name", "small", "--port", "0",
                          "--port-file", port_file, "--threads", THREADS, "--max-concurrent-requests", "128"],
                         stderr=log)
    for _ in range(1200):
        if os.path.exists(port_file):
            return p, int(open(port_file).read())
        if p.poll() is not None:
            raise SystemExit(f"serve exited: {open(os.path.join(OUT, 'server.log')).read()}")
        time.sleep(0.05)
    raise SystemExit("serve did not start")


def one_request(client, seed):
    t0 = time.perf_counter()
    first, last, gaps, ntok = None, None, [], 0
    s = client.completions.create(model="small", prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=1.0, seed=seed,
                                  stream=True, logprobs=0, extra_body={"ignore_eos": True})
    for ch in s:
        lp = ch.choices[0].logprobs if ch.choices else None
        k = len(lp.tokens) if lp and lp.tokens else 0
        if k == 0:
            continue
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            gaps += [(now - last) / k] * k
        last = now
        ntok += k
    return first - t0, gaps, ntok


def load(port, clients, per_client):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)

    def worker(w):
        return [one_request(client, 1000 * w + i) for i in range(per_client)]
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = [r for rs in ex.map(worker, range(clients)) for r in rs]
    wall = time.perf_counter() - t0
    ttft = np.array([r[0] for r in res]) * 1e3
    itl = np.array([g for r in res for g in r[1]]) * 1e3
    toks = sum(r[2] for r in res)
    return {"clients": clients, "requests": len(res), "wall_s": wall, "req_per_s": len(res) / wall,
            "out_tok_per_s": toks / wall, "ttft_p50_ms": np.percentile(ttft, 50), "ttft_p99_ms": np.percentile(ttft, 99),
            "itl_p50_ms": np.percentile(itl, 50), "itl_p99_ms": np.percentile(itl, 99)}


def offline(n):
    """The peer: the same n requests through `titan generate --input` (one batch, no HTTP)."""
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "in.jsonl"), "w") as f:
            for i in range(n):
                f.write(json.dumps({"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": i}) + "\n")
        t0 = time.perf_counter()
        r = subprocess.run([TITAN, "generate", "--hf", MODEL, "--ignore-eos", "--threads", THREADS, "--input",
                            os.path.join(d, "in.jsonl"), "--output", os.path.join(d, "out.jsonl")],
                           capture_output=True, text=True, check=True)
        summary = [l for l in r.stderr.splitlines() if l.startswith("---")][-1]
        lines = [json.loads(l) for l in open(os.path.join(d, "out.jsonl"))]
        toks = sum(len(l["token_ids"]) for l in lines)
        return toks, summary


def main():
    os.makedirs(OUT, exist_ok=True)
    make_model()
    server, port = start_server()
    rows = []
    try:
        load(port, 2, 1)  # warm-up
        for clients, per in ((1, 4), (8, 2), (64, 1)):
            rows.append(load(port, clients, per))
            r = rows[-1]
            print(f"clients {clients:3d}: {r['requests']:3d} requests in {r['wall_s']:6.2f} s | {r['req_per_s']:6.2f} req/s"
                  f" | {r['out_tok_per_s']:7.1f} output tok/s | TTFT p50 {r['ttft_p50_ms']:7.1f} ms p99 "
                  f"{r['ttft_p99_ms']:7.1f} ms | ITL p50 {r['itl_p50_ms']:6.2f} ms p99 {r['itl_p99_ms']:6.2f} ms",
                  flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    toks, summary = offline(64)
    print(f"peer, titan generate --input (64 requests, one batch, no HTTP): {toks} tokens; {summary}")
    json.dump(rows, open(os.path.join(OUT, "results.json"), "w"), indent=1)


main()
