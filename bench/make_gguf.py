#!/usr/bin/python3
"""Write a GGUF v3 model with random weights for the llama.cpp peer benchmark.

    /usr/bin/python3 bench/make_gguf.py OUT.gguf [--flavor small|100m|qwen3_0.6b] [--seed 0]
                                        [--dtype f32|f16|bf16]

--dtype (default f32) is the type of the 2-D weights (token_embd and every projection):
GGML_TYPE_F16 (IEEE half, numpy's round-to-nearest-even) or GGML_TYPE_BF16 (the upper 16
bits of the f32, rounded to nearest even, ggml's GGML_FP32_TO_BF16); the 1-D norm
weights stay f32, as llama.cpp's convert_hf_to_gguf.py writes them.

The shapes are those of titan's flavors (titan/models/llama3/llama3.cpp,
titan/models/qwen3/qwen3.cpp):

    small       llama:  dim 512, 8 layers, 8/4 heads, head_dim 64, FFN 1536, vocab 32000
    100m        llama:  dim 768, 12 layers, 12/4 heads, head_dim 64, FFN 2048, vocab 32000
    qwen3_0.6b  qwen3:  dim 1024, 28 layers, 16/8 heads, head_dim 128, FFN 3072, vocab 151936,
                        q/k RMSNorm, eps 1e-6, rope theta 1e6

all with tied embeddings (no output.weight tensor: llama.cpp then uses token_embd.weight
as the LM head). Weights are normal(0, 0.02), norm weights 1. The weights are NOT the
ones titan's engine_bench draws (Philox init_weights(0)): for a speed comparison only
the shapes and the dtype matter.

Format: ggml docs/gguf.md (GGUF v3, little endian): header (magic "GGUF", u32 version,
u64 tensor count, u64 metadata count), metadata key/value pairs, tensor infos (name,
n_dims, dims innermost first, ggml type, offset into the data section), padding to
general.alignment (32), tensor data (each tensor's offset a multiple of 32).

A weight of torch shape (out_features, in_features) is a GGUF tensor with dims
[in_features, out_features] (ne0 = in_features, the contiguous dimension): the bytes
are the same row-major matrix. llama.cpp's HF->GGUF conversion for llama permutes the
rows of attn_q / attn_k (HF's rotate-half RoPE layout -> llama.cpp's interleaved pairs);
with random weights that permutation is irrelevant, so none is applied here.

Tokenizer: a SentencePiece-style ("llama") vocabulary of vocab_size tokens: <unk>, <s>,
</s>, the 256 byte tokens <0x00>..<0xFF>, then filler pieces; scores and token types
(1 normal, 2 unknown, 3 control, 6 byte). The benchmark feeds token ids, never text.
"""
import argparse
import struct
import sys

import numpy as np

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf metadata value types (docs/gguf.md, enum gguf_metadata_value_type)
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY, T_UINT64 = 4, 5, 6, 7, 8, 9, 10
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1
GGML_TYPE_BF16 = 30
# general.file_type (llama_ftype): ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32
FILE_TYPE = {"f32": 0, "f16": 1, "bf16": 32}
GGML_TYPE = {"f32": GGML_TYPE_F32, "f16": GGML_TYPE_F16, "bf16": GGML_TYPE_BF16}
BYTES = {"f32": 4, "f16": 2, "bf16": 2}

FLAVORS = {
    "small": dict(arch="llama", dim=512, layers=8, heads=8, kv_heads=4, head_dim=64, ffn=1536,
                  vocab=32000, eps=1e-5, theta=10000.0, ctx=2048),
    "100m": dict(arch="llama", dim=768, layers=12, heads=12, kv_heads=4, head_dim=64, ffn=2048,
                 vocab=32000, eps=1e-5, theta=10000.0, ctx=2048),
    "qwen3_0.6b": dict(arch="qwen3", dim=1024, layers=28, heads=16, kv_heads=8, head_dim=128,
                       ffn=3072, vocab=151936, eps=1e-6, theta=1000000.0, ctx=40960),
}


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


class Metadata:
    """Ordered list of encoded key/value pairs."""

    def __init__(self):
        self.items = []

    def _add(self, key, vtype, payload):
        self.items.append(gguf_string(key) + struct.pack("<I", vtype) + payload)

    def u32(self, key, v):
        self._add(key, T_UINT32, struct.pack("<I", v))

    def f32(self, key, v):
        self._add(key, T_FLOAT32, struct.pack("<f", v))

    def string(self, key, v):
        self._add(key, T_STRING, gguf_string(v))

    def boolean(self, key, v):
        self._add(key, T_BOOL, struct.pack("<?", v))

    def str_array(self, key, values):
        body = b"".join(gguf_string(v) for v in values)
        self._add(key, T_ARRAY, struct.pack("<IQ", T_STRING, len(values)) + body)

    def f32_array(self, key, values):
        a = np.asarray(values, dtype="<f4")
        self._add(key, T_ARRAY, struct.pack("<IQ", T_FLOAT32, a.size) + a.tobytes())

    def i32_array(self, key, values):
        a = np.asarray(values, dtype="<i4")
        self._add(key, T_ARRAY, struct.pack("<IQ", T_INT32, a.size) + a.tobytes())


def tokenizer_metadata(md, vocab):
    if vocab < 259 + 1:
        sys.exit(f"make_gguf: vocab {vocab} too small for the byte tokens")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"\u2581tok{i}" for i in range(vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (vocab - 259)
    scores = [0.0] * 259 + [-float(i) for i in range(vocab - 259)]
    md.string("tokenizer.ggml.model", "llama")
    md.str_array("tokenizer.ggml.tokens", tokens)
    md.f32_array("tokenizer.ggml.scores", scores)
    md.i32_array("tokenizer.ggml.token_type", types)
    md.u32("tokenizer.ggml.unknown_token_id", 0)
    md.u32("tokenizer.ggml.bos_token_id", 1)
    md.u32("tokenizer.ggml.eos_token_id", 2)
    md.boolean("tokenizer.ggml.add_bos_token", False)
    md.boolean("tokenizer.ggml.add_eos_token", False)


def model_tensors(c):
    """[(name, torch-style shape (outer..inner))] in llama.cpp's naming."""
    D, F, V, Dh = c["dim"], c["ffn"], c["vocab"], c["head_dim"]
    Hq, Hkv = c["heads"], c["kv_heads"]
    t = [("token_embd.weight", (V, D))]
    for i in range(c["layers"]):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (D,)),
              (p + "attn_q.weight", (Hq * Dh, D)),
              (p + "attn_k.weight", (Hkv * Dh, D)),
              (p + "attn_v.weight", (Hkv * Dh, D)),
              (p + "attn_output.weight", (D, Hq * Dh))]
        if c["arch"] == "qwen3":
            t += [(p + "attn_q_norm.weight", (Dh,)), (p + "attn_k_norm.weight", (Dh,))]
        t += [(p + "ffn_norm.weight", (D,)),
              (p + "ffn_gate.weight", (F, D)),
              (p + "ffn_up.weight", (F, D)),
              (p + "ffn_down.weight", (D, F))]
    t.append(("output_norm.weight", (D,)))
    return t


def pad(n):
    return (ALIGNMENT - n % ALIGNMENT) % ALIGNMENT


def to_bf16_bits(w):
    """f32 -> bf16 bit patterns (uint16), round to nearest even (finite inputs)."""
    u = w.astype("<f4").view("<u4")
    return ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2")


def encode(w, dtype):
    if dtype == "f32":
        return w.astype("<f4").tobytes()
    if dtype == "f16":
        return w.astype("<f2").tobytes()
    return to_bf16_bits(w).tobytes()


def write_gguf(path, flavor, seed, dtype="f32"):
    c = FLAVORS[flavor]
    a = c["arch"]
    md = Metadata()
    md.string("general.architecture", a)
    md.string("general.name", f"titan-{flavor}-random")
    md.u32("general.alignment", ALIGNMENT)
    md.u32("general.file_type", FILE_TYPE[dtype])
    md.u32(f"{a}.context_length", c["ctx"])
    md.u32(f"{a}.embedding_length", c["dim"])
    md.u32(f"{a}.block_count", c["layers"])
    md.u32(f"{a}.feed_forward_length", c["ffn"])
    md.u32(f"{a}.attention.head_count", c["heads"])
    md.u32(f"{a}.attention.head_count_kv", c["kv_heads"])
    md.u32(f"{a}.attention.key_length", c["head_dim"])
    md.u32(f"{a}.attention.value_length", c["head_dim"])
    md.u32(f"{a}.rope.dimension_count", c["head_dim"])
    md.f32(f"{a}.rope.freq_base", c["theta"])
    md.f32(f"{a}.attention.layer_norm_rms_epsilon", c["eps"])
    md.u32(f"{a}.vocab_size", c["vocab"])
    tokenizer_metadata(md, c["vocab"])

    tensors = model_tensors(c)
    infos, offset = [], 0
    for name, shape in tensors:
        tdtype = "f32" if len(shape) == 1 else dtype
        dims = tuple(reversed(shape))  # GGUF: innermost (contiguous) dimension first
        infos.append(gguf_string(name) + struct.pack("<I", len(dims))
                     + struct.pack(f"<{len(dims)}Q", *dims) + struct.pack("<IQ", GGML_TYPE[tdtype], offset))
        nbytes = BYTES[tdtype] * int(np.prod(shape))
        offset += nbytes + pad(nbytes)

    rng = np.random.default_rng(seed)
    n_params = 0
    with open(path, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(md.items)))
        for item in md.items:
            f.write(item)
        for info in infos:
            f.write(info)
        f.write(b"\0" * pad(f.tell()))
        for name, shape in tensors:
            if len(shape) == 1:
                w = np.ones(shape, dtype="<f4")
            else:
                w = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype("<f4")
            b = encode(w, "f32" if len(shape) == 1 else dtype)
            f.write(b)
            f.write(b"\0" * pad(len(b)))
            n_params += w.size
    return n_params


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--flavor", default="small", choices=sorted(FLAVORS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=sorted(FILE_TYPE))
    args = ap.parse_args()
    n = write_gguf(args.out, args.flavor, args.seed, args.dtype)
    print(f"make_gguf: wrote {args.out} ({args.flavor}, {n} params, {args.dtype} 2-D weights)")


if __name__ == "__main__":
    main()
