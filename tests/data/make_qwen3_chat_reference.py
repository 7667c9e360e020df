#!/usr/bin/python3
"""Writes tests/data/qwen3_chat_reference.jsonl: conversations rendered with the
chat_template of data/qwen3-tokenizer/tokenizer_config.json by Jinja2
(Debian python3-jinja2), set up as Hugging Face transformers' apply_chat_template
does (sandboxed environment, trim_blocks, lstrip_blocks, tools=None).
One {"messages", "add_generation_prompt", "enable_thinking"?, "text"} per line.

  apt-get install -y python3-jinja2
  /usr/bin/python3 tests/data/make_qwen3_chat_reference.py . > tests/data/qwen3_chat_reference.jsonl
"""
import json
import os
import sys

from jinja2.sandbox import ImmutableSandboxedEnvironment

shared = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
cfg = json.load(open(os.path.join(shared, "data", "qwen3-tokenizer", "tokenizer_config.json")))
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
template = env.from_string(cfg["chat_template"])


def U(c): return {"role": "user", "content": c}
def A(c): return {"role": "assistant", "content": c}
def S(c): return {"role": "system", "content": c}
def T(c): return {"role": "tool", "content": c}


convs = [
    [U("Hello")],
    [S("You are a helpful assistant."), U("What is 2+2?")],
    [S("Be brief."), U("Hi"), A("Hello! How can I help?"), U("Tell me a joke.")],
    [U("Hi"), A("Hello!")],
    [U("Hi"), A("<think>\nThe user greets.\n</think>\n\nHello!")],
    [U("Q1"), A("<think>r1</think>A1"), U("Q2"), A("<think>\n\nr2\n\n</think>\n\n\nA2")],
    [U("Q1"), A("A1"), U("Q2"), A("A2")],
    [U("Q"), A("partial <think>inner</think> tail")],
    [U("Q"), A("x</think>y</think>z")],
    [U("Q"), dict(A("visible"), reasoning_content="\nhidden thoughts\n")],
    [U("Q1"), dict(A("A1"), reasoning_content="r1"), U("Q2"), dict(A("A2"), reasoning_content="")],
    [S("sys"), S("second system"), U("u")],
    [U("Call the tool"), A("I will call it."), T('{"result": 42}'), T("second"), A("It is 42.")],
    [U("q"), A("a"), T("r")],
    [U("<tool_response>\nx\n</tool_response>"), A("ok")],
    [U("Q"), U("<tool_response>y</tool_response>"), A("<think>because</think>done")],
    [U("日本語で答えて 🦙"), A("はい、どうぞ。")],
    [U("multi\nline\n\ncontent  "), A("\n\nleading newlines")],
    [A("assistant first")],
]  # (an empty list is an error in the template itself: messages[0])
for messages in convs:
    for add_gen, thinking in [(False, None), (True, None), (True, False)]:
        if not messages and not add_gen:
            continue
        kwargs = dict(messages=messages, tools=None, documents=None, add_generation_prompt=add_gen,
                      eos_token=cfg["eos_token"], pad_token=cfg["pad_token"])
        if thinking is not None:
            kwargs["enable_thinking"] = thinking
        row = {"messages": messages, "add_generation_prompt": add_gen}
        if thinking is not None:
            row["enable_thinking"] = thinking
        row["text"] = template.render(**kwargs)
        print(json.dumps(row, ensure_ascii=False))
