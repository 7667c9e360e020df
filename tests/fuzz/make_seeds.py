#!/usr/bin/env python3
"""Writes the committed seed corpora of the fuzz targets, tests/fuzz/corpus/<target>/.

Seeds are small valid (and a few near-valid) inputs made from the shipped files:
the Qwen3 tokenizer.json (cut to its first 1000 tokens), the recipes' TOML, HF
config.json files of the supported families, and small safetensors / llama2.c files
in the layouts the loaders read. Run once from the repository root when a format
changes (needs /work/shared/data or $TITAN_SHARED/data for the tokenizer seed):
    python3 tests/fuzz/make_seeds.py
The tests only read the committed copies.
"""
import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")
SHARED = os.environ.get("TITAN_SHARED", os.path.join(ROOT, "..", "shared"))


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)] in order; returns the file bytes."""
    h, pos, buf = {}, 0, b""
    if metadata is not None:
        h["__metadata__"] = metadata
    for name, dt, shape, data in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(data)]}
        pos += len(data)
        buf += data
    hj = json.dumps(h, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    return struct.pack("<Q", len(hj)) + hj + buf


def seeds_safetensors():
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    put("safetensors", "small", b"S" + safetensors(
        [("a", "F32", [2, 3], f32), ("b", "I64", [2], struct.pack("<2q", 7, -8)),
         ("c", "BF16", [2], b"\x80\x3f\x00\x40"), ("d", "U8", [0], b""), ("e", "BOOL", [3], b"\x01\x00\x01")],
        {"format": "pt", "step": "5"}))
    put("safetensors", "empty", b"S" + safetensors([]))
    put("safetensors", "f8", b"S" + safetensors([("x", "F8_E4M3", [4], b"\x01\x02\x03\x04"),
                                                 ("y", "F8_E5M2", [1, 2], b"\x05\x06"),
                                                 ("z", "F16", [1], b"\x00\x3c"), ("w", "I32", [1], b"\x01\x00\x00\x00")]))
    idx = {"metadata": {"total_size": 48}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                                          "b": "model-00001-of-00002.safetensors",
                                                          "c": "model-00002-of-00002.safetensors"}}
    put("safetensors", "index", b"I" + json.dumps(idx, indent=2).encode())
    idx["weight_map"]["zz"] = "model-00002-of-00002.safetensors"
    put("safetensors", "index_absent", b"I" + json.dumps(idx).encode())


def seeds_hf_config():
    llama = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 512, "max_position_embeddings": 256,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
             "bos_token_id": 1, "eos_token_id": [2, 3], "torch_dtype": "bfloat16",
             "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
             "hidden_act": "silu", "initializer_range": 0.02, "use_cache": True}
    put("hf_config", "llama", json.dumps(llama, indent=2))
    qwen3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 1024,
             "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
             "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
             "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000,
             "rope_scaling": None, "tie_word_embeddings": True, "attention_bias": False,
             "bos_token_id": 151643, "eos_token_id": 151645, "sliding_window": None,
             "layer_types": ["full_attention"] * 2, "dtype": "bfloat16"}
    put("hf_config", "qwen3", json.dumps(qwen3, indent=2))
    v5 = {"model_type": "llama", "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 2, "vocab_size": 100,
          "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    put("hf_config", "v5_rope_parameters", json.dumps(v5))


def seeds_llama2c():
    def model(dim, hidden, layers, heads, kv, vocab, seq, shared):
        hs = dim // heads
        n = (vocab * dim + layers * dim + layers * dim * dim + 2 * layers * dim * (kv * hs) + layers * dim * dim
             + layers * dim + 3 * layers * dim * hidden + dim + seq * hs // 2 * 2 + (0 if shared else vocab * dim))
        hdr = struct.pack("<7i", dim, hidden, layers, heads, kv, vocab if shared else -vocab, seq)
        return hdr + struct.pack("<%df" % n, *[((i * 37) % 17 - 8) / 16.0 for i in range(n)])
    put("llama2c", "shared", model(8, 16, 1, 2, 1, 12, 4, True))
    put("llama2c", "unshared", model(8, 12, 2, 2, 2, 10, 3, False))


def seeds_tokenizer_json():
    path = os.path.join(SHARED, "data", "qwen3-tokenizer", "tokenizer.json")
    if not os.path.exists(path):
        print("skipping tokenizer_json seeds: no", path)
        return
    t = json.load(open(path, encoding="utf-8"))
    keep = 1000
    vocab = {k: v for k, v in t["model"]["vocab"].items() if v < keep}
    merges = [m for m in t["model"]["merges"] if (m[0] + m[1]) in vocab and m[0] in vocab and m[1] in vocab]
    added = []
    for i, a in enumerate(t["added_tokens"][:6]):
        a = dict(a)
        a["id"] = keep + i
        added.append(a)
    t["model"]["vocab"] = vocab
    t["model"]["merges"] = merges
    t["added_tokens"] = added
    text = "Hello, world! The quick brown fox 123 — naïve café 你好 <|im_start|>user\n\thi<|im_end|>"
    put("tokenizer_json", "qwen3_cut", json.dumps(t, ensure_ascii=False).encode() + b"\0" + text.encode())
    t2 = dict(t)
    t2["model"] = dict(t["model"])
    t2["model"]["merges"] = [" ".join(m) for m in merges[:200]]
    t2["normalizer"] = None
    put("tokenizer_json", "string_merges", json.dumps(t2, ensure_ascii=False).encode() + b"\0" + b"in the tin")


def seeds_toml():
    rdir = os.path.join(ROOT, "recipes")
    for f in sorted(os.listdir(rdir)):
        if f.endswith(".toml"):
            put("toml_config", f[:-5], open(os.path.join(rdir, f), "rb").read())
    put("toml_config", "sections", '[model]\nname = "qwen3"\nn_layers = 2\ndim = 64\n'
        '[training]\nsteps = 3\nseq_len = 32\nlocal_batch_size = 2\n[optimizer]\nlr = 1e-3\n'
        'name = "muon"\n[lr_scheduler]\nwarmup_steps = 1\n')
    put("toml_config", "strings", 'job.description = """multi\nline \\\n  text"""\n'
        "training.dataset_path = 'C:\\raw\\path'\n# comment é\n")


def seeds_cli():
    put("cli_overrides", "basic", "--training.steps=3\n--model.n_layers\n4\n--optimizer.lr=3e-4\n--model.qk_norm")
    put("cli_overrides", "enums", "--optimizer.name=muon\n--lr_scheduler.decay_type=cosine\n--model.transforms=[]")
    put("cli_overrides", "bad", "--model.n_heads=0\n--trainin.steps=1")


def seeds_jsonl():
    put("generate_jsonl", "prompts", '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}\n'
        '{"prompt": "Hi", "n": 2, "seed": 5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "stop": ["\\n", "."]}\n'
        '\n{"prompt_token_ids": [1, 2, 3], "logprobs": 2, "ignore_eos": true, "stop_token_ids": [7], "stop": "x"}\n')
    put("generate_jsonl", "bad", '{"prompt_token_ids": [1.5]}\n{"seed": -1, "prompt": "a"}\n')


def seeds_chat():
    R, U = "\x1e", "\x1f"
    put("chat_template", "basic", "\x01" + "system" + U + "Be brief." + R + "user" + U + "Sort: b a c" + R
        + "assistant" + U + "a b c" + U + "thinking about it" + R + "user" + U + "again")
    put("chat_template", "think_off", "\x03" + "user" + U + "<think>x</think> hi")
    put("chat_template", "tool", "\x02" + "user" + U + "q" + R + "tool" + U + "{\"r\": 1}" + R + "assistant" + U
        + "<think>\nplan\n</think>\n\nanswer")


def main():
    seeds_safetensors()
    seeds_hf_config()
    seeds_llama2c()
    seeds_tokenizer_json()
    seeds_toml()
    seeds_cli()
    seeds_jsonl()
    seeds_chat()
    for t in sorted(os.listdir(OUT)):
        d = os.path.join(OUT, t)
        print(t, len(os.listdir(d)), "seeds", sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)), "bytes")


if __name__ == "__main__":
    sys.exit(main())
