"""Reads a run's TensorBoard event files back with tensorboard's EventAccumulator and
checks them against its metrics.jsonl: the same tags as the numeric keys (nested
objects as "a/b", booleans as 0/1), and for every tag the same steps and values
(float32, as TensorBoard's simple_value stores them).

    python tb_readback.py DUMP_FOLDER [TB_SUBFOLDER]
"""
import json
import os
import sys

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

dump = sys.argv[1]
tb = os.path.join(dump, sys.argv[2] if len(sys.argv) > 2 else "tb")


def flatten(row, prefix=""):
    for k, v in row.items():
        if not prefix and k == "step":
            continue
        tag = f"{prefix}/{k}" if prefix else k
        if isinstance(v, dict):
            yield from flatten(v, tag)
        elif isinstance(v, bool):
            yield tag, float(v)
        elif isinstance(v, (int, float)):
            yield tag, v


expected = {}
with open(os.path.join(dump, "metrics.jsonl")) as f:
    for line in f:
        row = json.loads(line)
        for tag, v in flatten(row):
            expected.setdefault(tag, []).append((row["step"], float(np.float32(v))))

files = [n for n in os.listdir(tb) if "tfevents" in n]
assert len(files) == 1, files
acc = EventAccumulator(tb, size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
assert tags == set(expected), (sorted(tags ^ set(expected)))
for tag, want in expected.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)]
    assert got == want, (tag, got[:5], want[:5])
print(f"tensorboard read-back ok: {len(tags)} tags, {sum(map(len, expected.values()))} scalars, "
      f"steps {min(s for v in expected.values() for s, _ in v)}..{max(s for v in expected.values() for s, _ in v)}")
