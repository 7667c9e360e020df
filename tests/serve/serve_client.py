"""Real-client checks of `titan serve`, run by serve_test.cpp with the venv's python.

    python serve_client.py BASE_URL MODEL_DIR CASE

BASE_URL is http://127.0.0.1:PORT, MODEL_DIR the served HF directory (config.json +
model.safetensors), CASE one of the functions below. Exits 0 when every assertion
holds; an AssertionError (with the values) otherwise.
"""
import concurrent.futures as cf
import json
import sys
import time
import urllib.request

import http.client
import urllib.parse
import openai

BASE, MODEL_DIR, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = "tiny"
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=120)


def connect():
    u = urllib.parse.urlparse(BASE)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60)


def raw_post(path, data):
    """POST data (bytes, or an object sent as JSON); returns (status, parsed JSON body)."""
    c = connect()
    body = data if isinstance(data, bytes) else json.dumps(data).encode()
    c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    out = r.status, json.loads(r.read())
    c.close()
    return out


def sse_lines(path, data, max_events=None):
    """POSTs a streaming request; returns (content type, the non-empty lines read). With
    max_events, closes the connection after that many data: lines (mid-stream)."""
    c = connect()
    c.request("POST", path, body=json.dumps(data).encode(), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    lines, events = [], 0
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\r\n")
        if line:
            lines.append(line)
            events += line.startswith("data: ")
            if max_events and events >= max_events:
                break
    ctype = r.getheader("Content-Type")
    c.sock.close()
    c.close()
    return ctype, lines


def health():
    try:
        with urllib.request.urlopen(BASE + "/health", timeout=10) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read())


def wait_idle(timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        h = health()
        if h["requests"]["engine_in_flight"] == 0 and h["requests"]["http_in_flight"] == 0 and \
                h["requests"]["waiting"] == 0:
            return h
        time.sleep(0.05)
    raise AssertionError(f"server not idle after {timeout} s: {health()}")


def byte_chat_tokens(text):
    """Token count of text under byte_chat: one per byte, one per marker."""
    for marker in ("<|im_start|>", "<|im_end|>", "</think>", "<think>"):
        text = text.replace(marker, "\0")
    return len(text.encode())


def ids_of(tokens):
    return [int(t.split(":")[1]) for t in tokens]


def completions():
    r = client.completions.create(model=MODEL, prompt="Hello", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.model == MODEL, r
    assert len(r.choices) == 1 and isinstance(r.choices[0].text, str), r
    assert r.choices[0].finish_reason in ("stop", "length"), r
    assert r.usage.prompt_tokens == 5 and 1 <= r.usage.completion_tokens <= 8, r.usage
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    r2 = client.completions.create(model=MODEL, prompt="Hello", max_tokens=8, temperature=0)
    assert r2.choices[0].text == r.choices[0].text
    # a list of prompts, n = 2: choices ordered prompt-major
    r3 = client.completions.create(model=MODEL, prompt=["Hello", "Hi there"], max_tokens=4, temperature=0.7,
                                   n=2, seed=3)
    assert [c.index for c in r3.choices] == [0, 1, 2, 3], r3
    assert r3.usage.prompt_tokens == 5 + 8
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL], models


def chat():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=8, temperature=0)
    assert r.object == "chat.completion", r
    c = r.choices[0]
    assert c.message.role == "assistant" and isinstance(c.message.content, str), c
    # Qwen3's template, rendered; every byte is one token of byte_chat, each marker one token
    text = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    expected = byte_chat_tokens(text)
    assert r.usage.prompt_tokens == expected, (r.usage.prompt_tokens, expected)
    # the same prompt as a completion of the rendered text (the markers parse as special tokens)
    r2 = client.completions.create(model=MODEL, prompt=text, max_tokens=8, temperature=0)
    assert r2.choices[0].text == c.message.content, (r2.choices[0].text, c.message.content)
    # content as a list of text parts, and enable_thinking=False (an empty think block)
    r3 = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": [
        {"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}], max_tokens=4, temperature=0,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    want = byte_chat_tokens("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert r3.usage.prompt_tokens == want, (r3.usage, want)


def streaming():
    kw = dict(model=MODEL, prompt="Once upon a time", max_tokens=24, temperature=0.9, seed=11, logprobs=2,
              extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    whole = client.completions.create(**kw)
    text, toks, lps, finish = "", [], [], None
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kw))
    for ch in chunks[:-1]:
        assert len(ch.choices) == 1
        text += ch.choices[0].text
        if ch.choices[0].logprobs:
            toks += ch.choices[0].logprobs.tokens
            lps += ch.choices[0].logprobs.token_logprobs
        finish = ch.choices[0].finish_reason or finish
    assert len(chunks) > 3, len(chunks)
    w = whole.choices[0]
    assert text == w.text, (text, w.text)
    assert toks == w.logprobs.tokens and lps == w.logprobs.token_logprobs
    assert finish == w.finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 24, chunks[-1]
    # chat streaming: the first delta carries the role
    msgs = [{"role": "user", "content": "tell me"}]
    whole = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0)
    parts = list(client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=16, temperature=0,
                                                stream=True))
    assert parts[0].choices[0].delta.role == "assistant"
    assert "".join(p.choices[0].delta.content or "" for p in parts) == whole.choices[0].message.content
    assert parts[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    # the raw wire format: SSE lines, ending in data: [DONE]
    ctype, lines = sse_lines("/v1/completions", {"model": MODEL, "prompt": "a", "max_tokens": 3, "stream": True})
    assert ctype.startswith("text/event-stream"), ctype
    assert all(l.startswith("data: ") for l in lines) and lines[-1] == "data: [DONE]", lines


def logprobs():
    """Logprobs against transformers on the same safetensors (an outside oracle)."""
    import torch
    import transformers
    prompt = [72, 101, 108, 108, 111, 44, 32]  # "Hello, "
    r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0, logprobs=3,
                                  extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    lp = r.choices[0].logprobs
    gen = ids_of(lp.tokens)
    assert len(gen) == 12 and len(lp.top_logprobs) == 12
    hf = transformers.AutoModelForCausalLM.from_pretrained(MODEL_DIR, dtype=torch.float32).eval()
    with torch.no_grad():
        logits = hf(torch.tensor([prompt + gen])).logits[0].double()
    ref = torch.log_softmax(logits, -1)
    for i, tok in enumerate(gen):
        row = ref[len(prompt) - 1 + i]
        assert abs(lp.token_logprobs[i] - row[tok].item()) < 1e-4, (i, lp.token_logprobs[i], row[tok].item())
        top = sorted(((v, int(k.split(":")[1])) for k, v in lp.top_logprobs[i].items()), reverse=True)
        assert len(top) == 3 and top[0][1] == tok, (i, top, tok)  # greedy = the top token
        want = torch.topk(row, 3)
        for (v, k), wv, wk in zip(top, want.values.tolist(), want.indices.tolist()):
            assert abs(v - wv) < 1e-4, (i, v, wv)
    # chat logprobs: content entries with top_logprobs
    c = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], max_tokens=5,
                                       temperature=0, logprobs=True, top_logprobs=2,
                                       extra_body={"ignore_eos": True})
    ents = c.choices[0].logprobs.content
    assert len(ents) == 5 and all(len(e.top_logprobs) == 2 and e.logprob == e.top_logprobs[0].logprob
                                  for e in ents), ents


def batch_invariance():
    """The same seeded request alone and among 20 others: identical tokens and logprobs."""
    kw = dict(model=MODEL, prompt="The cat sat on", max_tokens=32, temperature=0.8, top_p=0.95, seed=7, n=2,
              logprobs=2, extra_body={"return_tokens_as_token_ids": True, "ignore_eos": True})
    alone = client.completions.create(**kw)
    wait_idle()

    def other(i):
        return client.completions.create(model=MODEL, prompt="x" * (3 + 7 * i), max_tokens=8 + 3 * i,
                                         temperature=1.0, seed=100 + i, extra_body={"ignore_eos": True})
    with cf.ThreadPoolExecutor(24) as ex:
        futs = [ex.submit(other, i) for i in range(10)]
        target = ex.submit(client.completions.create, **kw)
        futs += [ex.submit(other, i) for i in range(10, 20)]
        crowd = target.result()
        for f in futs:
            f.result()
    for a, b in zip(alone.choices, crowd.choices):
        assert a.text == b.text and a.logprobs.tokens == b.logprobs.tokens, (a, b)
        assert a.logprobs.token_logprobs == b.logprobs.token_logprobs  # exact floats
        assert a.logprobs.top_logprobs == b.logprobs.top_logprobs
    assert alone.choices[0].logprobs.tokens != alone.choices[1].logprobs.tokens  # n samples differ


def concurrent100():
    before = health()
    assert before["kv_cache"]["blocks_free"] == before["kv_cache"]["blocks_total"], before

    def one(i):
        if i % 3 == 0:
            s = client.completions.create(model=MODEL, prompt=f"request {i}", max_tokens=16, temperature=0.5,
                                          seed=i, stream=True)
            return "".join(c.choices[0].text for c in s)
        if i % 3 == 1:
            r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": f"q{i}"}],
                                               max_tokens=16, temperature=0.5, seed=i)
            return r.choices[0].message.content
        r = client.completions.create(model=MODEL, prompt=f"request {i}", max_tokens=16, temperature=0.5, seed=i)
        return r.choices[0].text
    t0 = time.time()
    with cf.ThreadPoolExecutor(100) as ex:
        outs = list(ex.map(one, range(100)))
    assert len(outs) == 100 and all(isinstance(o, str) for o in outs)
    h = wait_idle()
    assert h["kv_cache"]["blocks_free"] == h["kv_cache"]["blocks_total"], h
    assert h["requests"]["total"] >= before["requests"]["total"] + 100, (before, h)
    print(f"100 concurrent requests in {time.time() - t0:.2f} s; health after: {h}")


def disconnect():
    before = wait_idle()
    body = {"model": MODEL, "prompt": "Start", "max_tokens": 1500, "temperature": 1.0, "ignore_eos": True,
            "stream": True}
    _, lines = sse_lines("/v1/completions", body, max_events=3)
    assert len(lines) == 3, lines
    # the connection is closed here, mid-stream
    h = wait_idle()
    assert h["requests"]["aborted"] == before["requests"]["aborted"] + 1, (before, h)
    assert h["tokens"]["generated"] - before["tokens"]["generated"] < 1500, (before, h)
    assert h["kv_cache"]["blocks_free"] == h["kv_cache"]["blocks_total"], h
    r = client.completions.create(model=MODEL, prompt="still there?", max_tokens=4)
    assert r.choices[0].finish_reason in ("stop", "length")


def bad_input():
    post = raw_post
    ok = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    cases = [
        ("/v1/completions", b"{not json", 400, None),
        ("/v1/completions", b"[1, 2]", 400, None),
        ("/v1/completions", {"model": MODEL}, 400, "prompt"),
        ("/v1/completions", {"prompt": "hi"}, 400, "model"),
        ("/v1/completions", {**ok, "model": "other"}, 404, "model"),
        ("/v1/completions", {**ok, "max_tokens": "ten"}, 400, "max_tokens"),
        ("/v1/completions", {**ok, "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {**ok, "max_tokens": 100000}, 400, "max_tokens"),
        ("/v1/completions", {**ok, "temperature": "hot"}, 400, "temperature"),
        ("/v1/completions", {**ok, "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {**ok, "top_p": 0}, 400, "top_p"),
        ("/v1/completions", {**ok, "n": 1000}, 400, "n"),
        ("/v1/completions", {**ok, "stop": 5}, 400, "stop"),
        ("/v1/completions", {**ok, "stream": "yes"}, 400, "stream"),
        ("/v1/completions", {**ok, "logprobs": 50}, 400, "logprobs"),
        ("/v1/completions", {**ok, "prompt": 42}, 400, "prompt"),
        ("/v1/completions", {**ok, "prompt": [1, 2, 99999]}, 400, "prompt"),
        ("/v1/completions", {**ok, "prompt": "x" * 400}, 400, "prompt"),  # over --max-prompt-tokens
        ("/v1/completions", {**ok, "frobnicate": 1}, 400, "frobnicate"),
        ("/v1/completions", {**ok, "echo": True}, 400, "echo"),
        ("/v1/chat/completions", {"model": MODEL, "messages": "hi"}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"content": "hi"}]}, 400, "messages[0].role"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "pirate", "content": "hi"}]}, 400,
         "messages[0].role"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": 3}]}, 400,
         "messages[0].content"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                  "tools": []}, 400, "tools"),
        ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                  "top_logprobs": 2}, 400, "top_logprobs"),
    ]
    for path, data, status, param in cases:
        code, body = post(path, data)
        assert code == status, (path, data, code, body)
        err = body["error"]
        assert set(err) == {"message", "type", "param", "code"} and err["message"], body
        assert err["type"] == "invalid_request_error", body
        if param is not None:
            assert err["param"] == param, (data, body)
    code, body = post("/v1/completions", {**ok, "prompt": "y" * 70000})
    assert code == 413 and body["error"]["message"], (code, body)
    c = connect()
    c.request("GET", "/v1/nothing")
    r = c.getresponse()
    assert r.status == 404 and json.loads(r.read())["error"]["code"] == "not_found"
    # the openai client raises its typed errors
    try:
        client.completions.create(model=MODEL, prompt="hi", max_tokens=100000)
        raise AssertionError("no error")
    except openai.BadRequestError as e:
        assert e.body["param"] == "max_tokens", e.body
    h = wait_idle()
    assert h["status"] == "ok" and h["kv_cache"]["blocks_free"] == h["kv_cache"]["blocks_total"], h
    r = client.completions.create(model=MODEL, prompt="fine", max_tokens=3)
    assert r.choices[0].text is not None


def stop_in_token():
    """A stop string ending inside a token: the text is cut at the stop string (BPE model)."""
    kw = dict(model=MODEL, prompt="The weather today", max_tokens=40, temperature=1.0, seed=1, logprobs=0,
              extra_body={"ignore_eos": True})
    full = client.completions.create(**kw).choices[0]
    text, toks, offs = full.text, full.logprobs.tokens, full.logprobs.text_offset
    for k in range(2, len(toks)):
        if len(toks[k]) < 2 or offs[k] < 2:
            continue
        stop = text[offs[k] - 2: offs[k] + 1]  # ends after the first character of token k
        if text.find(stop) != offs[k] - 2:
            continue
        want = text[: offs[k] - 2]
        r = client.completions.create(stop=[stop], **kw).choices[0]
        assert r.text == want and r.finish_reason == "stop", (stop, r.text, want)
        s = "".join(c.choices[0].text for c in client.completions.create(stop=stop, stream=True, **kw))
        assert s == want, (stop, s, want)
        r = client.completions.create(stop=[stop], **{**kw, "extra_body": {"ignore_eos": True,
                                                                          "include_stop_str_in_output": True}})
        assert r.choices[0].text == want + stop
        print(f"stop {stop!r} inside token {k} ({toks[k]!r}): text cut to {len(want)} chars")
        return
    raise AssertionError(f"no multi-character token to cut in {toks}")


globals()[CASE]()
print(f"{CASE}: ok")
