#!/usr/bin/env python3
"""Peer of bench/safetensors_open_bench.cpp: the reference (Rust) safetensors reader
opening the same files, written by that benchmark to $TMPDIR (or /tmp).

    /work/venv/bin/python bench/safetensors_open_peer.py

Per file: the best of 3 of safe_open(path, "numpy") + keys(). The Rust reader's
header cap is 100 MB (MAX_HEADER_SIZE), so the 1M-tensor file (~100 MB of header)
may be refused; that is printed.
"""
import os
import time

from safetensors import safe_open

tmp = os.environ.get("TMPDIR") or "/tmp"
for n in (10000, 100000, 1000000):
    path = os.path.join(tmp, f"titan_st_open_{n}.safetensors")
    if not os.path.exists(path):
        print(f"{n}: {path} missing (run safetensors_open_bench first)")
        continue
    best = None
    try:
        for _ in range(3):
            t0 = time.perf_counter()
            with safe_open(path, "numpy") as f:
                k = len(list(f.keys()))
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        print(f"safetensors (Rust) safe_open {n} tensors: {best * 1e3:.1f} ms ({k} keys)")
    except Exception as e:  # noqa: BLE001 - report the reference reader's refusal
        print(f"safetensors (Rust) safe_open {n} tensors: refused: {str(e)[:120]}")
