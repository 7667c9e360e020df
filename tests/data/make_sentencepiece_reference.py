#!/usr/bin/python3
"""Writes tests/data/tok512_reference.jsonl: ids and decoded text of a few strings
under data/stories260k/tok512.model, from Debian's python3-sentencepiece
(the Python binding of the same libsentencepiece titan links).
One {"text", "ids", "decoded"} per line.

  apt-get install -y python3-sentencepiece
  /usr/bin/python3 tests/data/make_sentencepiece_reference.py . > tests/data/tok512_reference.jsonl
"""
import json
import os
import sys

import sentencepiece as spm

shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sp = spm.SentencePieceProcessor(model_file=os.path.join(shared, "data", "stories260k", "tok512.model"))
texts = [
    "Once upon a time, there was a little girl named Lily.",
    "She loved to play outside in the park.",
    "Hello world",
    "  leading and   multiple   spaces  ",
    "line one\nline two\n",
    "Numbers 12345 and 3.14",
    "café naïve 日本語 🦙",
    "<s> and </s> are plain text here",
    "",
    "Tom's dog can't run!",
]
shakes = open(os.path.join(shared, "data", "tinyshakespeare", "input.txt"), encoding="utf-8").read()
texts.append(shakes[:500])
for t in texts:
    ids = sp.encode(t)
    print(json.dumps({"text": t, "ids": ids, "decoded": sp.decode(ids)}, ensure_ascii=False))
