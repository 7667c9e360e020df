#!/usr/bin/python3
"""Independent safetensors reader/writer for tests/checkpoint/safetensors_test.cpp.

Debian's python3-torch 1.13 has no `safetensors` package, so this follows the
format spec (github.com/huggingface/safetensors README) by hand with struct+json:
u64 little-endian header length N, N bytes of JSON, then the data buffer.
numpy only (importing torch takes seconds): f16 and ints through numpy dtypes,
bf16 by widening its bits to f32, FP8 by a hand-written OCP OFP8 decoder (torch
1.13 has no float8 dtypes anyway). Special floats in the expected-value
JSON are the strings "nan", "inf", "-inf".

  safetensors_ref.py write OUT.safetensors OUT.expected.json
      writes a file the way another writer could (header NOT padded, so tensors are
      misaligned; data order differs from name order) and the decoded values.
  safetensors_ref.py read IN.safetensors IN.expected.json
      parses a titan-written file, checks the layout rules titan promises and the
      values against the expected JSON; prints OK and exits 0, or exits 1.
"""
import json
import math
import struct
import sys

import numpy as np

ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2, "I32": 4, "I64": 8, "U8": 1, "BOOL": 1,
            "F8_E4M3": 1, "F8_E5M2": 1}


def f8_e4m3(b):
    s, e, m = b >> 7, (b >> 3) & 0xF, b & 7
    if e == 15 and m == 7:
        return math.nan
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if s else v


def f8_e5m2(b):
    s, e, m = b >> 7, (b >> 2) & 0x1F, b & 3
    if e == 31:
        v = math.inf if m == 0 else math.nan
    else:
        v = (m / 4.0) * 2.0 ** -14 if e == 0 else (1 + m / 4.0) * 2.0 ** (e - 15)
    return -v if s else v


def decode(dtype, raw):
    """Raw little-endian bytes -> list of Python floats/ints (row-major)."""
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").astype(np.float64).tolist()
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").astype(np.float64).tolist()
    if dtype == "BF16":
        # bf16 is the upper half of an f32: widen the bits exactly.
        a = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return a.view(np.float32).astype(np.float64).tolist()
    if dtype == "I32":
        return np.frombuffer(raw, dtype="<i4").tolist()
    if dtype == "I64":
        return np.frombuffer(raw, dtype="<i8").tolist()
    if dtype == "U8":
        return list(raw)
    if dtype == "BOOL":
        return [1 if b else 0 for b in raw]
    if dtype == "F8_E4M3":
        return [f8_e4m3(b) for b in raw]
    if dtype == "F8_E5M2":
        return [f8_e5m2(b) for b in raw]
    raise ValueError(dtype)


def enc(v):
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
    return v


def same(a, b):
    if isinstance(b, str):
        b = float(b)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


def write(path, expected_path):
    rng = np.random.default_rng(1234)
    t = {}  # name -> (dtype, shape, raw bytes); insertion order = data order
    t["bytes.u8"] = ("U8", [16, 16], bytes(range(256)))
    f32 = rng.standard_normal((3, 5)).astype("<f4")
    t["w.f32"] = ("F32", [3, 5], f32.tobytes())
    t["mask.bool"] = ("BOOL", [7], bytes([1, 0, 0, 1, 1, 0, 1]))
    # bf16 values exactly representable (f32 with the low 16 bits cleared), so the
    # file holds their upper halves; rounding itself is tests/core/dtype_test's job.
    bf = (rng.standard_normal(12) * 100).astype("<f4").view("<u4") >> 16
    t["w.bf16"] = ("BF16", [4, 3], bf.astype("<u2").tobytes())
    h = np.array([0.0, -0.0, 1.0, -2.5, 65504.0, 6.1e-5, 5.96e-8, np.inf, 3.14159], dtype="<f2")
    t["w.f16"] = ("F16", [9], h.tobytes())
    t["idx.i32"] = ("I32", [2, 3], np.array([-7, 0, 1, 2**31 - 1, -2**31, 42], dtype="<i4").tobytes())
    t["idx.i64"] = ("I64", [4], np.array([-1, 2**40 + 3, 0, -2**52], dtype="<i8").tobytes())
    t["q.f8e4m3"] = ("F8_E4M3", [256], bytes(range(256)))
    t["q.f8e5m2"] = ("F8_E5M2", [2, 128], bytes(range(256)))
    t["scalar.f32"] = ("F32", [], struct.pack("<f", -0.15625))
    t["empty.f32"] = ("F32", [0, 4], b"")

    header, pos, data = {"__metadata__": {"format": "pt", "source": "python"}}, 0, b""
    for name, (dt, shape, raw) in t.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [pos, pos + len(raw)]}
        pos += len(raw)
        data += raw
    hb = json.dumps(header).encode()
    if (8 + len(hb)) % 8 == 0:
        hb += b" "  # keep the buffer misaligned: exercises the reader's copy fallback
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + data)
    exp = {"__metadata__": header["__metadata__"]}
    for name, (dt, shape, raw) in t.items():
        exp[name] = {"dtype": dt, "shape": shape, "values": [enc(v) for v in decode(dt, raw)]}
    with open(expected_path, "w") as f:
        json.dump(exp, f)


def read(path, expected_path):
    with open(path, "rb") as f:
        blob = f.read()
    with open(expected_path) as f:
        exp = json.load(f)
    errors = []
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        errors.append(f"header length {n} is not a multiple of 8")
    hdr = blob[8:8 + n]
    if not hdr.startswith(b"{"):
        errors.append("header does not start with '{'")
    header = json.loads(hdr.decode("utf-8"))
    base = 8 + n
    buf_len = len(blob) - base
    meta = header.pop("__metadata__", None)
    if meta != exp.get("__metadata__"):
        errors.append(f"metadata {meta} != expected {exp.get('__metadata__')}")
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        if b != pos:
            errors.append(f"tensor {k} starts at {b}, previous ended at {pos}")
        pos = e
    if pos != buf_len:
        errors.append(f"tensors end at {pos}, buffer has {buf_len} bytes")
    names = set(exp) - {"__metadata__"}
    if set(header) != names:
        errors.append(f"names {sorted(header)} != expected {sorted(names)}")
    for name in sorted(names & set(header)):
        v, x = header[name], exp[name]
        b, e = v["data_offsets"]
        if v["dtype"] != x["dtype"] or v["shape"] != x["shape"]:
            errors.append(f"{name}: {v['dtype']} {v['shape']} != expected {x['dtype']} {x['shape']}")
            continue
        if (base + b) % ITEMSIZE[v["dtype"]] != 0:
            errors.append(f"{name}: data at file offset {base + b} not aligned to {ITEMSIZE[v['dtype']]}")
        if e - b != ITEMSIZE[v["dtype"]] * math.prod(v["shape"]):
            errors.append(f"{name}: {e - b} bytes for shape {v['shape']}")
            continue
        got = decode(v["dtype"], blob[base + b:base + e])
        bad = [i for i, (g_, w_) in enumerate(zip(got, x["values"])) if not same(g_, w_)]
        if len(got) != len(x["values"]) or bad:
            i = bad[0] if bad else 0
            errors.append(f"{name}: value {i}: got {got[i] if got else None}, want {x['values'][i]}")
    if errors:
        print("\n".join(errors))
        sys.exit(1)
    print(f"OK {len(names)} tensors")


if __name__ == "__main__":
    {"write": write, "read": read}[sys.argv[1]](sys.argv[2], sys.argv[3])
