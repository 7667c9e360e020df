"""Reference for tests/rl/rl_difflib_test.cpp: Python's own difflib, str.splitlines
and re.findall on the cases the test writes (JSON in argv[1]); prints JSON results."""
import difflib
import json
import re
import sys

cases = json.load(open(sys.argv[1], encoding="utf-8"))
out = {"lists": [], "texts": [], "splitlines": [], "tags": []}
for c in cases["lists"]:
    sm = difflib.SequenceMatcher(None, c["a"], c["b"], autojunk=c["autojunk"])
    out["lists"].append({"ratio": sm.ratio(), "blocks": [list(m) for m in sm.get_matching_blocks()[:-1]]})
for c in cases["texts"]:
    sm = difflib.SequenceMatcher(None, c["a"], c["b"], autojunk=c["autojunk"])
    out["texts"].append({"ratio": sm.ratio(), "blocks": [list(m) for m in sm.get_matching_blocks()[:-1]]})
for s in cases["splitlines"]:
    out["splitlines"].append(s.splitlines())
for c in cases["tags"]:
    tag = c["tag"]
    out["tags"].append(re.findall(rf"<\s*{tag}\s*>(.*?)</\s*{tag}\s*>", c["text"], re.DOTALL | re.IGNORECASE))
json.dump(out, sys.stdout)
