#!/usr/bin/env python3
"""kogpt2d end to end: every endpoint and every bad-input class of issue 4.

Starts build/kogpt2d on 127.0.0.1 with a small random model (2 layers, 64 wide,
n_ctx 128, KoGPT2 v2's 51,200-id tokenizer) and checks statuses, error bodies and
that the daemon keeps serving. The limits under abuse (the 64-client soak, slow-drip
connections, --max-connections, memory per request) are in test_server_abuse.py.
Exit 0 pass, 1 fail, 77 skip (no shared data / binary).
"""
import json
import math
import os
import re
import subprocess
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server_lib as lib  # noqa: E402

# the shared check(): records a failure and goes on
check, FAILURES, CHECKS = lib.check, lib.FAILURES, lib.CHECKS


def expect_error(d, method, path, body, status, what, headers=None, param=None):
    """The request gets `status` with the documented error JSON, and the daemon lives."""
    st, hdrs, data = d.request(method, path, body, headers)
    ok = check(st == status, "%s: status %d, want %d (%r)" % (what, st, status, data[:200]))
    try:
        j = json.loads(data)
        e = j["error"]
        ok &= check(e["code"] == status and isinstance(e["type"], str) and e["type"]
                    and isinstance(e["message"], str) and e["message"] and "param" in e,
                    "%s: error JSON shape %r" % (what, j))
        if param:
            ok &= check(e["param"] == param, "%s: param %r, want %r" % (what, e["param"], param))
    except (ValueError, KeyError, TypeError):
        ok = check(False, "%s: not an error JSON: %r" % (what, data[:200]))
    check(hdrs.get("content-type", "").startswith("application/json"),
          "%s: content type %r" % (what, hdrs.get("content-type")))
    check(d.proc.poll() is None and d.request("GET", "/healthz")[0] == 200,
          "%s: daemon still serving" % what)
    return hdrs, data


def post(d, path, body):
    st, j = d.json("POST", path, body)
    check(st == 200, "POST %s %r: status %d %r" % (path, body, st, j))
    return j


# --- endpoints ---

def test_health(d):
    st, j = d.json("GET", "/healthz")
    check(st == 200 and j == {"status": "ok"}, "healthz %d %r" % (st, j))
    st, j = d.json("GET", "/readyz")
    check(st == 200 and j.get("status") == "ready", "readyz %d %r" % (st, j))
    st, hdrs, data = d.request("HEAD", "/healthz")
    check(st == 200 and data == b"", "HEAD /healthz %d %r" % (st, data))
    st, j = d.json("GET", "/v1/models")
    check(st == 200 and j["object"] == "list" and j["data"][0]["id"] == "model"
          and j["data"][0]["n_ctx"] == 128 and j["data"][0]["vocab_size"] == 51200,
          "models %r" % j)


def test_tokenize(d):
    text = "안녕하세요, 한국어 GPT-2 모델입니다."
    j = post(d, "/v1/tokenize", {"text": text})
    check(len(j["tokens"]) > 3 and len(j["pieces"]) == len(j["tokens"]), "tokenize %r" % j)
    check(j["pieces"][0].startswith("\u2581"), "tokenize: first piece has the space mark")
    back = post(d, "/v1/detokenize", {"tokens": j["tokens"]})
    check(back["text"] == text, "detokenize round trip %r" % back)
    check(post(d, "/v1/tokenize", {"text": ""})["tokens"] == [], "tokenize empty text")
    return j["tokens"]


def test_next_token(d, ids):
    j = post(d, "/v1/next-token", {"text": "안녕하세요", "top_k": 10})
    c = j["candidates"]
    check(j["model"] == "model" and j["prompt_tokens"] == len(j["tokens"]) and
          "cached_tokens" in j and j["timings"]["total_ms"] >= 0, "next-token fields %r" % j)
    check(isinstance(c, list) and len(c) == 10, "next-token: 10 candidates")
    check(all(c[i]["prob"] >= c[i + 1]["prob"] for i in range(len(c) - 1)),
          "next-token: sorted by probability")
    check(all(0 < x["prob"] <= 1 and abs(math.log(x["prob"]) - x["logprob"]) < 1e-4
              and x["piece"] and x["text"] == x["piece"].replace("\u2581", " ") for x in c),
          "next-token: candidate fields %r" % c[:2])
    j2 = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 10})
    check([x["id"] for x in j2["candidates"]] == [x["id"] for x in c],
          "next-token: text and its token ids give the same candidates")
    j3 = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 1})
    check(len(j3["candidates"]) == 1 and j3["candidates"][0]["id"] == c[0]["id"],
          "next-token top_k 1")
    hot = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 10, "temperature": 5})
    check(hot["candidates"][0]["prob"] < c[0]["prob"], "next-token: temperature flattens")
    # the Explorer's click: append the best candidate; the prefix is reused
    click = post(d, "/v1/next-token", {"tokens": j["tokens"] + [c[0]["id"]], "top_k": 10})
    check(click["prompt_tokens"] == len(j["tokens"]) + 1, "click prompt_tokens")
    print("  click: cached_tokens %d of %d, total_ms %.2f" % (
        click["cached_tokens"], click["prompt_tokens"], click["timings"]["total_ms"]))
    return c


def generate(d, body):
    return post(d, "/v1/generate", body)


def stream(d, path, body):
    st, hdrs, data = d.request("POST", path, dict(body, stream=True))
    check(st == 200 and hdrs.get("content-type", "").startswith("text/event-stream"),
          "%s stream: %d %r" % (path, st, hdrs))
    return lib.sse_events(data)


def test_generate(d):
    body = {"text": "오늘 날씨는", "max_tokens": 12, "temperature": 0.8, "top_k": 40,
            "top_p": 0.95, "seed": 42}
    a = generate(d, body)
    b = generate(d, body)
    check(a["text"] == b["text"] and a["tokens"] == b["tokens"], "generate: same seed, same output")
    check(a["finish_reason"] in ("length", "stop", "eos") and 0 < len(a["tokens"]) <= 12,
          "generate fields %r" % a)
    c = generate(d, dict(body, seed=43))
    print("  generate seed 42: %r; seed 43: %r" % (a["text"], c["text"]))
    greedy = generate(d, {"text": "오늘 날씨는", "max_tokens": 8, "temperature": 0})
    check(greedy == generate(d, {"text": "오늘 날씨는", "max_tokens": 8, "temperature": 0}) or
          greedy["tokens"] == generate(d, {"text": "오늘 날씨는", "max_tokens": 8,
                                           "temperature": 0})["tokens"], "greedy is repeatable")
    # SSE: one event per token plus a final one; texts concatenate to the whole text
    ev = stream(d, "/v1/generate", body)
    toks = [json.loads(e) for e in ev[:-1]]
    final = json.loads(ev[-1])
    check(final.get("done") is True and final["text"] == a["text"] and
          final["tokens"] == a["tokens"] and final["finish_reason"] == a["finish_reason"],
          "generate stream final %r vs %r" % (final, a))
    check(len(toks) == len(a["tokens"]) and "".join(t["text"] for t in toks) == a["text"],
          "generate stream concatenates to the non-streamed text")
    for t in toks:  # never half a UTF-8 character: each event's text is whole
        t["text"].encode("utf-8")
    # stop string: cut before its first match
    if len(a["text"]) > 4:
        stop = a["text"][2:4]
        s = generate(d, dict(body, stop=[stop]))
        check(s["finish_reason"] == "stop" and stop not in s["text"] and
              a["text"].startswith(s["text"]), "generate stop %r -> %r" % (stop, s))
    lp = generate(d, dict(body, logprobs=3))
    check(len(lp["logprobs"]) == len(lp["tokens"]) and
          all(len(x["top"]) == 3 for x in lp["logprobs"]), "generate logprobs")
    g = generate(d, {"tokens": [1], "max_tokens": 3, "seed": 1})
    check(len(g["tokens"]) <= 3, "generate from token ids")
    # temperatures and top_p too small for a float act as their limit, greedy (issue 13: a
    # temperature of 1e-40 made every probability NaN and the sampler read before its array)
    for extra in ({"temperature": 1e-40}, {"temperature": 5e-324}, {"temperature": 1e-6},
                  {"top_p": 1e-50}, {"top_p": 1e-40, "top_k": 5}, {"temperature": 1e-40, "top_p": 1e-45}):
        lim = generate(d, dict({"text": "오늘 날씨는", "max_tokens": 8, "seed": 3}, **extra))
        check(lim["tokens"] == greedy["tokens"], "generate %r acts as greedy: %r vs %r"
              % (extra, lim["tokens"], greedy["tokens"]))


def test_completions(d):
    body = {"model": "model", "prompt": "한국어 모델", "max_tokens": 10, "seed": 7,
            "temperature": 0.9, "logprobs": 2}
    a = post(d, "/v1/completions", body)
    ch = a["choices"][0]
    check(a["object"] == "text_completion" and a["id"].startswith("cmpl-") and
          a["model"] == "model" and ch["index"] == 0 and
          ch["finish_reason"] in ("length", "stop") and
          a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] +
          a["usage"]["completion_tokens"], "completions shape %r" % a)
    lp = ch["logprobs"]
    n = len(lp["tokens"])
    check(n == a["usage"]["completion_tokens"] and len(lp["token_logprobs"]) == n and
          len(lp["top_logprobs"]) == n and len(lp["text_offset"]) == n and
          "".join(lp["tokens"]) == ch["text"] and
          all(lp["text_offset"][i] <= lp["text_offset"][i + 1] for i in range(n - 1)) and
          all(1 <= len(t) <= 2 for t in lp["top_logprobs"]), "completions logprobs %r" % lp)
    b = post(d, "/v1/completions", body)
    check(b["choices"][0]["text"] == ch["text"], "completions: same seed, same text")
    e = post(d, "/v1/completions", dict(body, echo=True, logprobs=None))
    check(e["choices"][0]["text"] == "한국어 모델" + ch["text"], "completions echo %r" % e)
    t = post(d, "/v1/completions", dict(body, prompt=[[8702, 7801]], logprobs=None))
    check(t["usage"]["prompt_tokens"] == 2, "completions with a token-id prompt")
    ev = stream(d, "/v1/completions", dict(body, logprobs=None))
    check(ev and ev[-1] == "[DONE]", "completions stream ends with [DONE]")
    chunks = [json.loads(x) for x in ev[:-1]]
    check(all(c["object"] == "text_completion" for c in chunks) and
          "".join(c["choices"][0]["text"] for c in chunks) == ch["text"] and
          chunks[-1]["choices"][0]["finish_reason"] == ch["finish_reason"],
          "completions stream concatenates to the non-streamed text")
    st = post(d, "/v1/completions", dict(body, stop="\n", logprobs=None))
    check("\n" not in st["choices"][0]["text"], "completions stop as a string")
    # text_offset counts characters (as OpenAI and vLLM do), not UTF-8 bytes
    full = e["choices"][0]["text"]
    off = post(d, "/v1/completions", dict(body, echo=True))["choices"][0]["logprobs"]
    check(all(full[o:].startswith(tok) for o, tok in zip(off["text_offset"], off["tokens"])),
          "text_offset indexes the text by characters: %r" % off["text_offset"])
    # a batch of prompts and n samples: one choice each, in index order, as if asked alone
    batch = post(d, "/v1/completions", dict(body, prompt=["한국어 모델", [8702, 7801]],
                                             logprobs=None))
    check([c["index"] for c in batch["choices"]] == [0, 1] and
          batch["choices"][0]["text"] == ch["text"] and
          batch["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"] + 2,
          "prompt array: a choice per prompt, the same as alone %r" % batch)
    many = post(d, "/v1/completions", dict(body, n=3, logprobs=None))
    texts = [c["text"] for c in many["choices"]]
    check([c["index"] for c in many["choices"]] == [0, 1, 2] and texts[0] == ch["text"] and
          len(set(texts)) > 1, "n = 3: seeds seed, seed + 1, seed + 2: %r" % texts)
    ev = stream(d, "/v1/completions", dict(body, logprobs=None, n=2,
                                           stream_options={"include_usage": True}))
    usage = json.loads(ev[-2])
    per = ["".join(json.loads(x)["choices"][0]["text"] for x in ev[:-2]
                   if json.loads(x)["choices"][0]["index"] == i) for i in (0, 1)]
    check(ev[-1] == "[DONE]" and usage["choices"] == [] and
          usage["usage"]["completion_tokens"] == sum(c["usage"]["completion_tokens"]
                                                     for c in (a, a)) and
          per[0] == ch["text"], "stream with include_usage: interleaved choices, then usage")
    # penalties act: a greedy generation that repeats itself stops repeating
    g = dict(body, temperature=0, max_tokens=24, logprobs=None, prompt="이 책은")
    plain = post(d, "/v1/completions", g)["choices"][0]["text"]
    rep = post(d, "/v1/completions", dict(g, repetition_penalty=5.0))["choices"][0]["text"]
    pres = post(d, "/v1/completions", dict(g, presence_penalty=2.0,
                                            frequency_penalty=2.0))["choices"][0]["text"]
    check(rep != plain and pres != plain, "penalties change a greedy text: %r %r %r"
          % (plain, rep, pres))
    first = post(d, "/v1/generate", {"text": "이 책은", "max_tokens": 1, "temperature": 0})
    banned = first["tokens"][0]
    nb = post(d, "/v1/generate", {"text": "이 책은", "max_tokens": 8, "temperature": 0,
                                   "logit_bias": {str(banned): -100}})
    check(banned not in nb["tokens"], "logit_bias -100 bans token %d: %r" % (banned, nb["tokens"]))
    test_prompt_scoring(d)


def test_chat(d):
    body = {"messages": [{"role": "system", "content": "친절하게"},
                         {"role": "user", "content": "안녕하세요"}],
            "max_tokens": 8, "seed": 3, "temperature": 0.8}
    c = post(d, "/v1/chat/completions", body)
    ch = c["choices"][0]
    check(c["object"] == "chat.completion" and c["id"].startswith("chatcmpl-") and
          ch["message"]["role"] == "assistant" and isinstance(ch["message"]["content"], str) and
          ch["finish_reason"] in ("stop", "length") and
          c["usage"]["total_tokens"] == c["usage"]["prompt_tokens"] +
          c["usage"]["completion_tokens"], "chat completion shape %r" % c)
    ev = stream(d, "/v1/chat/completions", dict(body, stream_options={"include_usage": True}))
    chunks = [json.loads(x) for x in ev[:-1]]
    check(ev[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"] == {"role": "assistant",
                                                                     "content": ""} and
          "".join(x["choices"][0]["delta"].get("content", "") for x in chunks[:-1]) ==
          ch["message"]["content"] and chunks[-2]["choices"][0]["finish_reason"] ==
          ch["finish_reason"] and chunks[-1]["usage"] == c["usage"],
          "chat stream: role, the same content, finish, usage: %r" % ev[-3:])
    parts = dict(body, messages=[{"role": "user", "content": [{"type": "text", "text": "안녕"},
                                                               {"type": "text", "text": "하세요"}]}])
    check(post(d, "/v1/chat/completions", parts)["usage"]["prompt_tokens"] > 0,
          "chat content as text parts")
    expect_error(d, "POST", "/v1/chat/completions", dict(body, model="gpt-4"), 404,
                 "chat: another model", param="model")
    expect_error(d, "POST", "/v1/chat/completions",
                 dict(body, messages=[{"role": "user", "content": [{"type": "image_url"}]}]),
                 422, "chat: an image part")
    st, _, m = d.request("GET", "/v1/models/model")
    check(st == 200 and json.loads(m)["id"] == "model", "GET /v1/models/{id}")
    expect_error(d, "GET", "/v1/models/other", None, 404, "GET /v1/models/other", param="model")


def test_chat_no_limit(d):
    """A chat without max_tokens runs to the model's stop or the end of the context (OpenAI's
    default), not to 16 tokens; the random model does not stop, so it fills the context."""
    msgs = [{"role": "user", "content": "안녕하세요"}]
    c = post(d, "/v1/chat/completions", {"messages": msgs, "seed": 5})
    u, fin = c["usage"], c["choices"][0]["finish_reason"]
    check(u["completion_tokens"] > 16 and (fin == "stop" or (
        fin == "length" and u["prompt_tokens"] + u["completion_tokens"] == 128)),
        "chat without max_tokens: past 16 tokens, to the end of the context: %r %r" % (fin, u))
    c = post(d, "/v1/completions", {"prompt": "안녕하세요", "seed": 5})
    check(c["usage"]["completion_tokens"] == 16 and c["choices"][0]["finish_reason"] == "length",
          "completions keep OpenAI's default of 16 tokens: %r" % c["usage"])


def sse_typed(data):
    """(event name, data JSON) of each event of an SSE body, in order."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        lines = block.split("\n")
        name = [x[7:] for x in lines if x.startswith("event: ")]
        body = [x[6:] for x in lines if x.startswith("data: ")]
        if body:
            out.append((name[0] if name else None, json.loads(body[0])))
    return out


def test_responses(d):
    """POST /v1/responses: OpenAI's Responses API for text, whole and streamed."""
    body = {"input": "안녕하세요", "max_output_tokens": 8, "temperature": 0.8, "seed": 3,
            "instructions": "친절하게"}
    r = post(d, "/v1/responses", body)
    msg = r["output"][0] if r.get("output") else {}
    part = (msg.get("content") or [{}])[0]
    u = r.get("usage") or {}
    check(r.get("object") == "response" and r["id"].startswith("resp_") and
          r["status"] in ("completed", "incomplete") and r["model"] == "model" and
          r["instructions"] == "친절하게" and r["max_output_tokens"] == 8 and
          msg.get("type") == "message" and msg["id"].startswith("msg_") and
          msg["role"] == "assistant" and msg["status"] == r["status"] and
          part.get("type") == "output_text" and part.get("annotations") == [] and
          u.get("total_tokens") == u.get("input_tokens", 0) + u.get("output_tokens", 0) and
          0 < u["output_tokens"] <= 8 and "cached_tokens" in u["input_tokens_details"],
          "response object shape %r" % r)
    check((r["status"] == "incomplete") == (r["incomplete_details"] == {
        "reason": "max_output_tokens"}) and (r["status"] == "incomplete") == (
        u.get("output_tokens") == 8), "incomplete_details when max_output_tokens cut it: %r" % r)
    st, hdrs, data = d.request("POST", "/v1/responses", dict(body, stream=True))
    ev = sse_typed(data)
    types = [e[1].get("type") for e in ev]
    n_delta = types.count("response.output_text.delta")
    last = "response.incomplete" if r["status"] == "incomplete" else "response.completed"
    want = (["response.created", "response.in_progress", "response.output_item.added",
             "response.content_part.added"] + ["response.output_text.delta"] * n_delta +
            ["response.output_text.done", "response.content_part.done",
             "response.output_item.done", last])
    check(st == 200 and hdrs.get("content-type") == "text/event-stream; charset=utf-8" and
          types == want and all(name == e["type"] for name, e in ev) and
          [e["sequence_number"] for _, e in ev] == list(range(len(ev))),
          "responses stream: OpenAI's events in order, named, numbered: %r" % types)
    if types == want:
        text = "".join(e["delta"] for _, e in ev if e["type"] == "response.output_text.delta")
        final = ev[-1][1]["response"]
        check(ev[0][1]["response"]["status"] == "in_progress" and
              ev[0][1]["response"]["output"] == [] and ev[2][1]["item"]["content"] == [] and
              ev[3][1]["part"] == {"type": "output_text", "text": "", "annotations": []} and
              text == part["text"] and ev[-4][1]["text"] == text and
              ev[-3][1]["part"]["text"] == text and ev[-2][1]["item"]["content"][0]["text"] ==
              text and final["output"][0]["content"][0]["text"] == text and
              final["usage"]["output_tokens"] == u["output_tokens"] and
              all(e["item_id"] == ev[2][1]["item"]["id"] for _, e in ev[3:-2]),
              "responses stream: the same text as whole, in the deltas and the done events")
    parts = {"input": [{"type": "message", "role": "user",
                        "content": [{"type": "input_text", "text": "안녕"}]},
                       {"role": "assistant", "content": [{"type": "output_text", "text": "네"}]},
                       {"role": "user", "content": "하세요"}], "max_output_tokens": 4}
    check(post(d, "/v1/responses", parts)["usage"]["input_tokens"] > 3,
          "responses: messages with input_text / output_text parts")
    for bad, status, param, what in (
            ({}, 400, "input", "no input"),
            ({"input": []}, 422, "input", "an empty input"),
            ({"input": 5}, 400, "input", "input a number"),
            ({"input": "a", "instructions": 5}, 400, "instructions", "instructions a number"),
            ({"input": [{"type": "function_call_output", "call_id": "x", "output": "y"}]}, 422,
             "input", "a function_call_output item"),
            ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}, 422, "input",
             "an image part"),
            ({"input": "a", "tools": [{"type": "function", "name": "f"}]}, 422, "tools",
             "tools"),
            ({"input": "a", "previous_response_id": "resp_x"}, 422, "previous_response_id",
             "previous_response_id"),
            ({"input": "a", "text": {"format": {"type": "json_schema"}}}, 422, "text",
             "text.format json_schema"),
            ({"input": "a", "max_output_tokens": 0}, 422, "max_output_tokens",
             "max_output_tokens 0"),
            ({"input": "a", "model": "gpt-4.1"}, 404, "model", "another model")):
        expect_error(d, "POST", "/v1/responses", bad, status, "responses: " + what, param=param)


def test_chat_default_model():
    """The project's own model (models/default) under its own chat template (its
    tokenizer_config.json: the question line after </s>, the answer ends at </s>): a chat with
    no max_tokens gives a non-empty reply that ends at the model's stop, also through
    /v1/responses; and a system message does not turn it off."""
    model = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models", "default")
    d = lib.Daemon(model, log=os.path.join(tempfile.gettempdir(), "kg_default_chat.log"))
    try:
        for msgs in ([{"role": "user", "content": "오늘 날씨 어때요?"}],
                     [{"role": "system", "content": "You are a helpful assistant."},
                      {"role": "user", "content": "긴 시간이 걸렸지만 괜찮아."}]):
            c = post(d, "/v1/chat/completions", {"messages": msgs, "temperature": 0})
            ch = c["choices"][0]
            check(ch["message"]["content"].strip() and ch["finish_reason"] == "stop",
                  "default model, chat without max_tokens: a reply ending at its stop: %r" % c)
        r = post(d, "/v1/responses", {"input": "긴 시간이 걸렸지만 괜찮아.", "temperature": 0})
        check(r["status"] == "completed" and r["output"][0]["content"][0]["text"].strip(),
              "default model, responses: a non-empty completed reply: %r" % r)
    finally:
        d.stop()


def test_charset(d):
    """Every text type says charset=utf-8, as a client library reads it (email.message, what
    http.client's headers are), so clients that guess never read Korean as ISO-8859-1."""
    import email.message

    def charset(hdrs):
        m = email.message.Message()
        m["Content-Type"] = hdrs.get("content-type", "")
        return m.get_content_type(), m.get_content_charset()

    body = {"messages": [{"role": "user", "content": "안녕"}], "max_tokens": 2}
    for what, (st, hdrs, data) in (
            ("JSON", d.request("POST", "/v1/chat/completions", body)),
            ("an error", d.request("POST", "/v1/chat/completions", {"messages": 1})),
            ("SSE", d.request("POST", "/v1/chat/completions", dict(body, stream=True))),
            ("/metrics", d.request("GET", "/metrics")),
            ("/healthz", d.request("GET", "/healthz")),
            ("index.html", d.request("GET", "/")),
            ("app.js", d.request("GET", "/app.js"))):
        ctype, cs = charset(hdrs)
        check(cs == "utf-8", "%s: %s says charset %r" % (what, ctype, cs))
        if ctype in ("application/json", "text/event-stream"):
            check(data.decode(cs) == data.decode("utf-8"), "%s decodes as UTF-8" % what)
    _, hdrs, _ = d.request("GET", "/metrics")
    check("version=0.0.4" in hdrs.get("content-type", ""), "/metrics keeps Prometheus' version")


def expect_tgi_error(d, path, body, status, what, word):
    """A TGI route's error: `status` with TGI's {"error", "error_type"}, naming `word`."""
    st, _, data = d.request("POST", path, body)
    try:
        j = json.loads(data)
        ok = isinstance(j.get("error"), str) and isinstance(j.get("error_type"), str)
    except ValueError:
        j, ok = data[:200], False
    check(st == status and ok and word in j["error"],
          "%s: %d %r, want %d in TGI's shape naming %s" % (what, st, j, status, word))


def test_tgi(d):
    """text-generation-inference's /generate, /generate_stream, /info (issue 29, item 4)."""
    st, info = d.json("GET", "/info")
    check(st == 200 and info.get("model_id") and info["max_total_tokens"] == 128
          and info["max_input_tokens"] == 127 and info["max_stop_sequences"] == 4
          and info["model_device_type"] in ("cpu", "cuda") and info["model_dtype"]
          and info["max_concurrent_requests"] > 0 and info["version"],
          "/info: %r" % (info,))
    # greedy unless asked to sample: the same text twice, and the same as /v1/generate's
    body = {"inputs": "오늘 날씨는", "parameters": {"max_new_tokens": 6}}
    a, b = post(d, "/generate", body), post(d, "/generate", body)
    g = generate(d, {"text": "오늘 날씨는", "max_tokens": 6, "temperature": 0})
    check(set(a) == {"generated_text"} and a == b and a["generated_text"] == g["text"],
          "/generate greedy: %r %r vs %r" % (a, b, g))
    # details: tokens (their texts make the text), prefill, top_n_tokens, seed when sampling
    r = post(d, "/generate", {"inputs": "오늘 날씨는", "parameters": {
        "max_new_tokens": 5, "details": True, "decoder_input_details": True, "top_n_tokens": 3,
        "do_sample": True, "seed": 7, "return_full_text": True}})
    det = r.get("details") or {}
    toks = det.get("tokens", [])
    check(det.get("finish_reason") in ("length", "eos_token", "stop_sequence")
          and det.get("generated_tokens") == len(toks) and det.get("seed") == 7
          and all(set(t) == {"id", "text", "logprob", "special"} for t in toks)
          and r["generated_text"] == "오늘 날씨는" + "".join(t["text"] for t in toks),
          "/generate details: %r" % (r,))
    pre = det.get("prefill", [])
    check(len(pre) == 3 and pre[0]["logprob"] is None
          and all(isinstance(p["logprob"], float) for p in pre[1:])
          and "".join(p["text"] for p in pre) == "오늘 날씨는", "prefill: %r" % (pre,))
    top = det.get("top_tokens", [])
    check(len(top) == len(toks) and all(len(t) == 3 for t in top)
          and all(t[0]["logprob"] >= t[1]["logprob"] >= t[2]["logprob"] for t in top),
          "top_tokens: %r" % (top,))
    # the same seed samples the same text; greedy reports no seed
    r2 = post(d, "/generate", {"inputs": "오늘 날씨는", "parameters": {
        "max_new_tokens": 5, "do_sample": True, "seed": 7}})
    check(r2["generated_text"] == r["generated_text"][len("오늘 날씨는"):], "seeded: %r" % (r2,))
    r3 = post(d, "/generate", {"inputs": "오늘", "parameters": {"max_new_tokens": 2,
                                                               "details": True}})
    check(r3["details"]["seed"] is None and "prefill" in r3["details"], "greedy details %r" % r3)
    # the stream: one event per token, generated_text null until the last, TGI's details
    st, hdrs, data = d.request("POST", "/generate_stream", {
        "inputs": "오늘 날씨는", "parameters": {"max_new_tokens": 6, "details": True}})
    ev = [json.loads(e) for e in lib.sse_events(data)]
    check(st == 200 and hdrs.get("content-type", "").startswith("text/event-stream") and ev
          and all(e["generated_text"] is None and e["details"] is None for e in ev[:-1])
          and [e["index"] for e in ev] == list(range(1, len(ev) + 1))
          and ev[-1]["generated_text"] == a["generated_text"]
          and "".join(e["token"]["text"] for e in ev) == a["generated_text"]
          and set(ev[-1]["details"]) == {"finish_reason", "generated_tokens", "seed",
                                         "input_length"}
          and ev[-1]["details"]["input_length"] == 3 and "[DONE]" not in data.decode(),
          "/generate_stream: %d %r" % (st, ev))
    ev = [json.loads(e) for e in lib.sse_events(d.request("POST", "/generate_stream", {
        "inputs": "오늘", "parameters": {"max_new_tokens": 2, "top_n_tokens": 2}})[2])]
    check(ev and all(len(e.get("top_tokens", [])) == 2 for e in ev), "stream top_tokens %r" % ev)
    # a stop sequence ends the text before it
    s = post(d, "/generate", {"inputs": "오늘 날씨는", "parameters": {
        "max_new_tokens": 6, "stop": [a["generated_text"][2:4]], "details": True}})
    check(s["details"]["finish_reason"] == "stop_sequence"
          and a["generated_text"].startswith(s["generated_text"]), "stop: %r" % (s,))
    # errors in TGI's shape, naming the field
    for path in ("/generate", "/generate_stream"):
        expect_tgi_error(d, path, {"inputs": "x", "parameters": {"typical_p": 0.5}}, 422,
                         path + " typical_p", "typical_p")
        expect_tgi_error(d, path, {"inputs": "x", "parameters": {"max_new_tokens": 0}}, 422,
                         path + " max_new_tokens 0", "max_new_tokens")
        expect_tgi_error(d, path, {"inputs": "x", "parameters": {"top_n_tokens": 21}}, 422,
                         path + " top_n_tokens", "top_n_tokens")
        expect_tgi_error(d, path, {"parameters": {}}, 400, path + " no inputs", "inputs")
        expect_tgi_error(d, path, {"inputs": ""}, 422, path + " empty inputs", "empty")
        expect_tgi_error(d, path, {"inputs": "x", "parameters": {"temperature": "hot"}}, 400,
                         path + " temperature type", "temperature")
        expect_tgi_error(d, path, {"inputs": "x", "parameters": {"watermark": True}}, 422,
                         path + " watermark", "watermark")
    expect_tgi_error(d, "/generate_stream", {"inputs": "x", "parameters": {
        "decoder_input_details": True}}, 422, "stream decoder_input_details",
        "decoder_input_details")
    expect_tgi_error(d, "/generate", {"inputs": "x", "parameters": {"best_of": 2}}, 422,
                     "best_of", "best_of")
    st, _, data = d.request("POST", "/generate", b"{", {"Content-Type": "application/json"})
    check(st == 400 and "error_type" in json.loads(data), "bad JSON on /generate: %r" % data)
    # a model that is this server's URL (Hugging Face's clients send it) names the served one
    for m in ("http://127.0.0.1:%d" % d.port, "https://example.com/v1/"):
        st, j = d.json("POST", "/v1/completions", {"model": m, "prompt": "오늘",
                                                   "max_tokens": 2})
        check(st == 200 and j["choices"], "model %r: %d %r" % (m, st, j))
    expect_error(d, "POST", "/v1/completions", {"model": "http://", "prompt": "x"}, 404,
                 "a bare scheme is no URL")


def test_sagemaker(d):
    """SageMaker's /ping and /invocations (issue 29, item 6)."""
    st, _, _ = d.request("GET", "/ping")
    check(st == 200, "/ping: %d" % st)
    body = {"inputs": "오늘 날씨는", "parameters": {"max_new_tokens": 6}}
    j = post(d, "/invocations", body)
    g = post(d, "/generate", body)
    check(j == [g], "/invocations TGI form: %r vs [%r]" % (j, g))
    ev = [json.loads(e)
          for e in lib.sse_events(d.request("POST", "/invocations", dict(body, stream=True))[2])]
    check(ev and ev[-1]["generated_text"] == g["generated_text"], "/invocations stream %r" % ev)
    j = post(d, "/invocations", {"prompt": "오늘", "max_tokens": 2})
    check(j.get("object") == "text_completion", "/invocations prompt: %r" % (j,))
    j = post(d, "/invocations", {"messages": [{"role": "user", "content": "안녕"}],
                                 "max_tokens": 2})
    check(j.get("object") == "chat.completion", "/invocations messages: %r" % (j,))
    expect_tgi_error(d, "/invocations", {"text": "x"}, 400, "/invocations shape", "inputs")
    expect_tgi_error(d, "/invocations", {"inputs": "x", "parameters": {"top_k": -1}}, 422,
                     "/invocations range", "top_k")


def test_prompt_scoring(d):
    """echo + logprobs scores the prompt: a greedy generation's own logprobs come back as the
    scores of the same tokens when they are sent as a prompt (1e-4: batched vs one-row sums)."""
    ids = post(d, "/v1/tokenize", {"text": "한국어 모델은"})["tokens"]
    g = post(d, "/v1/generate", {"tokens": ids, "max_tokens": 3, "temperature": 0,
                                 "logprobs": 1, "ignore_eos": True})
    full = ids + g["tokens"]
    sc = post(d, "/v1/completions", {"prompt": full, "echo": True, "logprobs": 1,
                                     "max_tokens": 0})
    lp = sc["choices"][0]["logprobs"]
    want = [t["logprob"] for t in g["logprobs"]]
    got = lp["token_logprobs"][-3:]
    check(len(lp["tokens"]) == len(full) and lp["token_logprobs"][0] is None and
          lp["top_logprobs"][0] is None and all(x <= 0 for x in lp["token_logprobs"][1:]) and
          all(len(t) == 1 for t in lp["top_logprobs"][1:]) and
          sc["usage"]["completion_tokens"] == 0 and
          "".join(lp["tokens"]) == sc["choices"][0]["text"] and
          all(abs(a - b) <= 1e-4 for a, b in zip(got, want)),
          "prompt scoring: %r vs generated %r" % (got, want))
    # greedy: each generated token was the best candidate, so its score is the top logprob
    check(all(abs(list(t.values())[0] - x) <= 1e-4
              for t, x in zip(lp["top_logprobs"][-3:], got)), "scored top logprobs")
    both = post(d, "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 0,
                                       "max_tokens": 2, "temperature": 0})
    n = len(both["choices"][0]["logprobs"]["tokens"])
    check(n == len(ids) + 2, "echo + logprobs + 2 generated: %d entries" % n)
    expect_error(d, "POST", "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 1,
                 "stream": True}, 422, "scoring is not streamed", param="stream")
    expect_error(d, "POST", "/v1/completions", {"prompt": ids, "max_tokens": 0}, 422,
                 "max_tokens 0 without scoring", param="max_tokens")


def test_score(d):
    """/v1/score: per prompt token its logprob, rank and the model's top choice there, checked
    against /v1/next-token at each prefix; the whole-prompt pass, the prefix-cache path (one
    token appended) and the memo (the same prompt again) agree."""
    ids = post(d, "/v1/tokenize", {"text": "한국어 모델은 무엇을 생각할까 궁금하다"})["tokens"]
    check(len(ids) >= 4, "score: a prompt of several tokens (%d)" % len(ids))
    s = post(d, "/v1/score", {"tokens": ids})
    sc = s["scores"]
    check(s["tokens"] == ids and len(sc) == len(ids) and s["prompt_tokens"] == len(ids) and
          "cached_tokens" in s and s["timings"]["total_ms"] >= 0, "score fields %r" % s)
    check(sc[0]["logprob"] is None and sc[0]["rank"] is None and sc[0]["top"] is None and
          sc[0]["id"] == ids[0], "score: the first token is not scored %r" % sc[0])
    for k in range(1, len(ids)):
        nt = post(d, "/v1/next-token", {"tokens": ids[:k], "top_k": 100})["candidates"]
        x = sc[k]
        rank = next((r + 1 for r, c in enumerate(nt) if c["id"] == ids[k]), None)
        # rank is exact over the whole vocabulary: past next-token's 100 it is a number > 100
        check(x["id"] == ids[k] and (x["rank"] == rank if rank else x["rank"] > 100) and
              x["top"]["id"] == nt[0]["id"] and
              abs(x["top"]["prob"] - nt[0]["prob"]) <= 1e-4 and
              abs(math.exp(x["logprob"]) - x["prob"]) <= 1e-6 and
              (rank is None or abs(x["logprob"] - nt[rank - 1]["logprob"]) <= 1e-4) and
              (rank is not None or x["prob"] <= nt[-1]["prob"] + 1e-6) and
              isinstance(x["piece"], str) and isinstance(x["text"], str),
              "score position %d: %r vs next-token (rank %r, top %r)" % (k, x, rank, nt[0]))
    again = post(d, "/v1/score", {"tokens": ids})
    check(again["scores"] == sc and again["cached_tokens"] == len(ids),
          "score: the same prompt again comes from the memo (%r)" % again["cached_tokens"])
    # one token appended: the tail path (next-token at the prefix, from the prefix cache)
    nt = post(d, "/v1/next-token", {"tokens": ids, "top_k": 10, "speculate": True})["candidates"]
    longer = post(d, "/v1/score", {"tokens": ids + [nt[3]["id"]]})
    last = longer["scores"][-1]
    check(longer["scores"][:-1] == sc and last["rank"] == 4 and
          abs(last["prob"] - nt[3]["prob"]) <= 1e-5 and last["top"]["id"] == nt[0]["id"] and
          longer["cached_tokens"] == len(ids) + 1,
          "score: one token appended, from the caches %r (cached %r)" % (last, longer["cached_tokens"]))
    # a prompt only the whole pass can answer gives the same numbers as the tail path
    fresh = post(d, "/v1/score", {"text": "새로운 문장을 하나 더 써 봅니다 오늘"})
    toks = fresh["tokens"]
    check(fresh["cached_tokens"] <= 1, "score: a new prompt is computed (%r)" % fresh["cached_tokens"])
    post(d, "/v1/score", {"tokens": toks[:-2]})
    tail = post(d, "/v1/score", {"tokens": toks})
    check(all(a["rank"] == b["rank"] and a["top"]["id"] == b["top"]["id"] and
              abs(a["logprob"] - b["logprob"]) <= 1e-4
              for a, b in zip(fresh["scores"][1:], tail["scores"][1:])),
          "score: whole pass and prefix-cache path agree")
    one = post(d, "/v1/score", {"tokens": [ids[0]]})
    check(len(one["scores"]) == 1 and one["scores"][0]["rank"] is None, "score: one token")
    expect_error(d, "POST", "/v1/score", {"tokens": []}, 422, "score: empty prompt")
    expect_error(d, "POST", "/v1/score", {"tokens": [10 ** 6]}, 422, "score: id outside V")
    expect_error(d, "POST", "/v1/score", {"text": 5}, 400, "score: text not a string")


def test_metrics(d):
    st, hdrs, data = d.request("GET", "/metrics")
    text = data.decode()
    check(st == 200 and hdrs["content-type"].startswith("text/plain"), "metrics status")
    for name in ("kogpt2_requests_total{endpoint=\"/v1/next-token\",code=\"200\"}",
                 "kogpt2_request_duration_seconds_bucket{endpoint=\"/v1/generate\",le=\"+Inf\"}",
                 "kogpt2_prompt_tokens_total", "kogpt2_generated_tokens_total",
                 "kogpt2_cached_prompt_tokens_total", "kogpt2_queue_depth", "kogpt2_batch_size",
                 "kogpt2_requests_in_flight", "kogpt2_cache_bytes", "kogpt2_ready 1"):
        check(name in text, "metrics has %s" % name)


def test_static(d, web):
    st, hdrs, data = d.request("GET", "/")
    check(st == 200 and data == b"<h1>hi</h1>" and hdrs["content-type"].startswith("text/html")
          and "content-security-policy" in hdrs and hdrs["x-content-type-options"] == "nosniff",
          "GET / serves index.html %d %r" % (st, hdrs))
    st, hdrs, _ = d.request("GET", "/app.js")
    check(st == 200 and hdrs["content-type"].startswith("text/javascript"), "app.js type")
    # path traversal (issue 7): dot-dot segments plain, percent-encoded (either case, mixed,
    # double-encoded, overlong UTF-8), with backslashes, and absolute paths: always 404
    traversal = ("/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/.%2e/secret.txt",
                 "/%2e./secret.txt", "/%252e%252e/secret.txt", "/%c0%ae%c0%ae/secret.txt",
                 "/sub/../../secret.txt", "/sub/%2e%2e/%2e%2e/secret.txt", "/./../secret.txt",
                 "/index.html/../../secret.txt", "/..%2fsecret.txt", "/%2e%2e%2fsecret.txt",
                 "/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/sub/../../../../../../etc/passwd",
                 "/..\\secret.txt", "/..%5csecret.txt", "/%2e%2e%5csecret.txt",
                 "/sub\\..\\..\\secret.txt", "/....//secret.txt", "/..;/secret.txt",
                 "/..%00/secret.txt", "//etc/passwd", "///etc/passwd", "/%2Fetc%2Fpasswd",
                 "/%2fetc/passwd", "/etc/passwd", "/\\etc\\passwd", "/%5cetc%5cpasswd",
                 "/c:/windows/win.ini", "/C:\\Windows\\win.ini", "/file:///etc/passwd",
                 "http://x/../secret.txt")
    # a NUL cannot cut a path short: "/index.html%00.js" is not index.html
    traversal += ("/index.html%00.js", "/index.html%00", "/%00", "/v1/models%00")
    for path in traversal + ("/out/passwd", "/outfile", "/sub/", "/sub", "/.hidden", "/nope.html"):
        raw = d.raw(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
        line = raw.split(b"\r\n", 1)[0]
        want = ([b"404"],) if path in traversal else ([b"404"], [b"403"], [b"400"])
        check(line.split(b" ")[1:2] in want and b"root:" not in raw and b"SECRET" not in raw,
              "static %s refused: %r" % (path, line))
    # a decoded %0a in a URL cannot forge a request-log line
    d.raw(b"GET /x%0a2020-01-01T00:00:00Z%20FORGED HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    time.sleep(0.2)
    check(not any(l.startswith("2020-01-01T00:00:00Z") for l in d.log_text().splitlines()),
          "no forged log line from %0a in a URL")


# --- bad input ---

def test_bad_json(d):
    for what, body in (("malformed", b"{\"text\": \"a\" \"top_k\": 3}"),
                       ("truncated", b"{\"text\": \"\xec\x95\x88"),
                       ("truncated object", b"{\"text\": \"a\","),
                       ("empty body", b""), ("not an object", b"[1, 2]"),
                       ("a bare string", b"\"text\""), ("trailing bytes", b"{\"text\":\"a\"} x"),
                       ("NUL inside", b"{\"text\":\"a\"}\x00{}"), ("deep nesting", b"[" * 2000),
                       ("lone surrogate escape", b"{\"text\": \"\\ud800\"}")):
        expect_error(d, "POST", "/v1/next-token", body, 400, "JSON " + what,
                     {"Content-Type": "application/json"})


def test_bad_types(d):
    nt, gen, cmp_ = "/v1/next-token", "/v1/generate", "/v1/completions"
    cases = [
        (nt, {"text": 5}, "text"), (nt, {"text": ["a"]}, "text"), (nt, {"text": "a", "top_k": "10"}, "top_k"),
        (nt, {"text": "a", "top_k": 1.5}, "top_k"), (nt, {"text": "a", "top_k": True}, "top_k"),
        (nt, {"tokens": "1 2"}, "tokens"), (nt, {"tokens": [1, "2"]}, "tokens"),
        (nt, {"tokens": [1.5]}, "tokens"), (nt, {"text": "a", "temperature": "hot"}, "temperature"),
        (nt, {}, "text"), (nt, {"text": "a", "tokens": [1]}, "text"),
        (gen, {"text": "a", "stream": "yes"}, "stream"), (gen, {"text": "a", "stop": 5}, "stop"),
        (gen, {"text": "a", "stop": ["x", 1]}, "stop"), (gen, {"text": "a", "seed": "1"}, "seed"),
        (gen, {"text": "a", "max_tokens": [3]}, "max_tokens"), (gen, {"text": {}}, "text"),
        (cmp_, {"prompt": 5}, "prompt"), (cmp_, {"prompt": "a", "echo": 1}, "echo"),
        (cmp_, {"prompt": "a", "model": 3}, "model"), (cmp_, {}, "prompt"),
        ("/v1/tokenize", {"text": 1}, "text"), ("/v1/tokenize", {}, "text"),
        ("/v1/detokenize", {"tokens": "abc"}, "tokens"), ("/v1/detokenize", {}, "tokens"),
    ]
    for path, body, param in cases:
        expect_error(d, "POST", path, body, 400, "wrong type %s %r" % (path, body), param=param)
    # null means "not given": the default
    check(d.json("POST", gen, {"text": "a", "max_tokens": 2, "stop": None, "seed": None})[0] == 200,
          "null takes the default")


def test_bad_utf8(d):
    for path, key in (("/v1/next-token", "text"), ("/v1/generate", "text"),
                      ("/v1/tokenize", "text"), ("/v1/completions", "prompt")):
        for bad in (b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"ok\xf8\x88\x80\x80\x80"):
            body = b"{\"" + key.encode() + b"\": \"" + bad + b"\"}"
            expect_error(d, "POST", path, body, 400, "invalid UTF-8 %r in %s" % (bad, path),
                         {"Content-Type": "application/json"})
    expect_error(d, "POST", "/v1/generate", b"{\"text\": \"a\", \"stop\": [\"\xff\"]}", 400,
                 "invalid UTF-8 in stop", {"Content-Type": "application/json"}, param="stop")


def test_bad_values(d):
    """Every out-of-range value is a 422 whose error names its own parameter (a top_p or a
    temperature in range but tiny acts as its limit, greedy: test_limits)."""
    nt, gen, cmp_ = "/v1/next-token", "/v1/generate", "/v1/completions"
    long_text = " ".join(["안녕하세요"] * 200)
    cases = [
        (nt, {"text": ""}, "text", "empty prompt"), (nt, {"tokens": []}, "tokens", "empty token list"),
        (gen, {"text": ""}, "text", "empty prompt (generate)"),
        (cmp_, {"prompt": ""}, "prompt", "empty prompt (completions)"),
        (nt, {"tokens": list(range(5, 300))}, "tokens", "over-long prompt (ids)"),
        (nt, {"text": "a", "top_k": 0}, "top_k", "top_k 0"),
        (nt, {"text": "a", "top_k": -1}, "top_k", "top_k negative"),
        (nt, {"text": "a", "top_k": 1000000}, "top_k", "top_k huge"),
        (nt, {"text": "a", "top_k": 1e300}, "top_k", "top_k 1e300"),
        (gen, {"text": "a", "top_k": -5}, "top_k", "generate top_k negative"),
        (gen, {"text": "a", "top_k": 10 ** 12}, "top_k", "generate top_k huge"),
        (nt, {"tokens": [51200]}, "tokens", "token id = V"),
        (nt, {"tokens": [-1]}, "tokens", "token id negative"),
        (nt, {"tokens": [1, 2 ** 40]}, "tokens", "token id huge"),
        ("/v1/detokenize", {"tokens": [99999]}, "tokens", "detokenize id out of range"),
        (nt, {"text": "a", "temperature": 0}, "temperature", "next-token temperature 0"),
        (nt, {"text": "a", "temperature": 1e-50}, "temperature", "next-token temperature 1e-50"),
        (nt, {"text": "a", "temperature": 1e9}, "temperature", "next-token temperature 1e9"),
        (gen, {"text": "a", "temperature": -1}, "temperature", "temperature negative"),
        (gen, {"text": "a", "temperature": 1e9}, "temperature", "temperature 1e9"),
        (gen, {"text": "a", "top_p": 2}, "top_p", "top_p 2"), (gen, {"text": "a", "top_p": 0}, "top_p", "top_p 0"),
        (gen, {"text": "a", "top_p": -0.5}, "top_p", "top_p negative"),
        (gen, {"text": "a", "max_tokens": 0}, "max_tokens", "max_tokens 0"),
        (gen, {"text": "a", "max_tokens": 100000}, "max_tokens", "max_tokens huge"),
        (gen, {"text": "a", "max_tokens": -3}, "max_tokens", "max_tokens negative"),
        (gen, {"text": "a", "seed": -5}, "seed", "seed negative"),
        (gen, {"text": "a", "seed": 2 ** 60}, "seed", "seed over 2^53"),
        (gen, {"text": "a", "logprobs": 21}, "logprobs", "logprobs 21"),
        (gen, {"text": "a", "logprobs": -1}, "logprobs", "logprobs negative"),
        (gen, {"text": "a", "stop": ["a", "b", "c", "d", "e"]}, "stop", "5 stop strings"),
        (gen, {"text": "a", "stop": [""]}, "stop", "empty stop string"),
        (gen, {"text": "a", "stop": ["x" * 1000]}, "stop", "over-long stop string"),
        (cmp_, {"prompt": "a", "n": 17}, "n", "n 17"), (cmp_, {"prompt": "a", "best_of": 3}, "best_of", "best_of 3"),
        (cmp_, {"prompt": ["a"] * 5, "n": 4}, "prompt", "20 choices"),
        (cmp_, {"prompt": "a", "suffix": "b"}, "suffix", "suffix"),
        (cmp_, {"prompt": "a", "presence_penalty": 3}, "presence_penalty", "presence_penalty 3"),
        (cmp_, {"prompt": "a", "frequency_penalty": -2.5}, "frequency_penalty", "frequency_penalty"),
        (cmp_, {"prompt": "a", "repetition_penalty": 0}, "repetition_penalty", "repetition_penalty 0"),
        (cmp_, {"prompt": "a", "logit_bias": {"5": 101}}, "logit_bias", "logit_bias 101"),
        (cmp_, {"prompt": "a", "logit_bias": {"99999": 1}}, "logit_bias", "logit_bias id"),
        ("/v1/chat/completions", {"messages": []}, "messages", "no messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}],
                                  "tools": [{"type": "function"}]}, "tools", "tools"),
        (cmp_, {"prompt": "a", "logprobs": 50}, "logprobs", "logprobs 50"),
        (cmp_, {"prompt": "a", "max_tokens": 0}, "max_tokens", "completions max_tokens 0"),
    ]
    for path, body, param, what in cases:
        expect_error(d, "POST", path, body, 422, what, param=param)
    _, data = expect_error(d, "POST", nt, {"text": long_text}, 422, "over-long prompt (text)")
    msg = json.loads(data)["error"]["message"]
    check("n_prompt_tokens" in msg and "n_ctx" in msg and "128" in msg,
          "context overflow names n_prompt_tokens and n_ctx: %r" % msg)


def test_bad_http(d):
    expect_error(d, "POST", "/v1/next-token", b"x" * 10000, 413, "body over --max-body",
                 {"Content-Type": "application/json"})
    # chunked: no Content-Length, so the limit is found while reading (and the rest drained)
    chunk = b"x" * 3000
    req = (b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 4 + b"0\r\n\r\n")
    out = d.raw(req)
    check(out.startswith(b"HTTP/1.1 413") and b"\"code\":413" in out, "chunked body over the limit: %r" % out[:80])
    expect_error(d, "GET", "/v1/nope", None, 404, "unknown route")
    expect_error(d, "POST", "/v1/nope", {"text": "a"}, 404, "unknown POST route")
    h, _ = expect_error(d, "GET", "/v1/next-token", None, 405, "GET on a POST route")
    check(h.get("allow") == "POST", "405 says Allow: POST (%r)" % h.get("allow"))
    expect_error(d, "DELETE", "/healthz", None, 405, "DELETE /healthz")
    expect_error(d, "PUT", "/index.html", b"x", 405, "PUT a static file")
    expect_error(d, "POST", "/v1/next-token", {"text": "a"}, 415, "text/plain body",
                 {"Content-Type": "text/plain"})
    expect_error(d, "POST", "/v1/next-token", b"text=a", 415, "form body",
                 {"Content-Type": "application/x-www-form-urlencoded"})
    check(d.json("POST", "/v1/tokenize", b"{\"text\":\"a\"}",
                 {"Content-Type": "application/json; charset=utf-8"})[0] == 200,
          "charset parameter accepted")
    expect_error(d, "OPTIONS", "/v1/next-token", None, 405, "OPTIONS without --cors-origin")
    st, hdrs, _ = d.request("GET", "/healthz")
    check("access-control-allow-origin" not in hdrs, "no CORS header without --cors-origin")
    check(hdrs.get("x-content-type-options") == "nosniff", "nosniff on API replies")
    # garbage instead of HTTP: MHD answers 400 or closes; either way the daemon lives
    d.raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64))
    d.raw(b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    check(d.request("GET", "/healthz")[0] == 200, "daemon lives after garbage and huge URLs")
    # control bytes in the method and the path reach the access log escaped, never raw (a
    # raw ESC or CR could rewrite the terminal or forge a log line)
    d.raw(b"G\x1b[2JE\x08T /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    d.raw(b"GET /\x1b[31mred\x7f HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    time.sleep(0.3)
    with open(d.log_path, "rb") as f:
        log = f.read()
    check(not any(c in log for c in (b"\x1b", b"\x08", b"\x7f")),
          "no raw control byte in the access log")
    check(b"G\\x1b[2JE\\x08" in log and b"/\\x1b[31mred\\x7f" in log,
          "the method and the path logged escaped: %r" % log[-400:])


def test_slow_clients(d, timeout_s):
    """Slowloris: half a request stalls; others are served; the stall is cut at --timeout."""
    stalled = []
    for part in (b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\n",  # headers never end
                 b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"text\":"):  # body never ends
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(part)
        stalled.append(s)
    t0 = time.time()
    j = post(d, "/v1/next-token", {"text": "안녕", "top_k": 3})
    check(len(j["candidates"]) == 3 and time.time() - t0 < 2, "served while others stall")
    for s in stalled:
        s.settimeout(timeout_s + 10)
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        check(data in (b"",) or data.startswith(b"HTTP/1.1 408"), "stalled client cut: %r" % data[:60])
        check(time.time() - t0 < timeout_s + 8, "stalled client cut within the timeout")
        s.close()


def test_disconnect(d):
    """A client that hangs up cancels its job: the engine is idle long before max_tokens.
    A stream's client is gone when a write fails (a closed socket answers it with a reset);
    a client waiting for a whole answer is gone when its socket resets (SO_LINGER 0). A bare
    FIN is not a hang-up (test_half_close)."""
    def running():
        txt = d.request("GET", "/metrics")[2].decode()
        return [float(l.split()[1]) for l in txt.splitlines()
                if l.startswith("kogpt2_running_jobs ") or l.startswith("kogpt2_queue_depth ")]
    for streamed in (True, False):
        body = json.dumps({"text": "안녕", "max_tokens": 120, "ignore_eos": True,
                           "stream": streamed}).encode()
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if streamed:
            s.recv(100)  # the first event arrived: it is running
        else:
            time.sleep(0.3)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        t0 = time.time()
        while time.time() - t0 < 10 and running() != [0.0, 0.0]:
            time.sleep(0.05)
        check(running() == [0.0, 0.0], "hang-up cancels the job (stream=%s)" % streamed)
        print("  hang-up (stream=%s): engine idle after %.2fs" % (streamed, time.time() - t0))


def test_half_close(d):
    """A client that half-closes after its request (shutdown(SHUT_WR), as nc -N does) reads
    the whole answer, streamed or not, and the log says 200, not 499."""
    log_before = len(d.log_text())
    for streamed in (False, True):
        body = json.dumps({"text": "안녕", "max_tokens": 24, "ignore_eos": True,
                           "stream": streamed}).encode()
        out = d.raw(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        head, _, payload = out.partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 200"), "half-closed client answered (stream=%s): %r"
              % (streamed, out[:80]))
        if streamed:
            check(b"data: [DONE]" in payload or b'"finish_reason"' in payload,
                  "half-closed stream runs to its end: %r" % payload[-120:])
        else:
            check(json.loads(payload)["generated_tokens"] == 24,
                  "half-closed client gets every token: %r" % payload[-120:])
    time.sleep(0.2)
    check(" 499 " not in d.log_text()[log_before:], "no 499 logged for a half-close")


def test_framing(d):
    """Ambiguous or malformed request framing gets exactly one well-formed 4xx, at once."""
    body = b'{"text":"abc","top_k":2}'
    head = b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = [(b"Content-Length: 24\r\nContent-Length: 5\r\n", 400, "two Content-Lengths"),
             (b"Content-Length: 24\r\nContent-Length: 24\r\n", 400, "a repeated Content-Length"),
             (b"Transfer-Encoding: gzip, chunked\r\n", 400, "an unknown Transfer-Encoding"),
             (b"Transfer-Encoding: identity\r\nContent-Length: 24\r\n", 400, "TE identity"),
             (b"Transfer-Encoding: chunked\r\nContent-Length: 24\r\n", 400, "TE and CL"),
             (b"Content-Length: 18446744073709551616\r\n", 413, "Content-Length 2^64")]
    for v in (b"-1", b"+24", b"0x18", b"24, 24", b" ", b"2 4"):
        cases.append((b"Content-Length: " + v + b"\r\n", 400, "Content-Length %r" % v))
    for extra, status, what in cases:
        t0 = time.time()
        out = d.raw(head + extra + b"\r\n" + body, shutdown=False, timeout=5)
        dt = time.time() - t0
        check(out.startswith(b"HTTP/1.1 %d" % status), "%s: %d, got %r" % (what, status, out[:40]))
        check(out.count(b"HTTP/1.1 ") == 1, "%s: one response head: %r" % (what, out[:300]))
        h, _, b = out.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", h)
        check(m is not None and int(m.group(1)) == len(b), "%s: the body its head announces" % what)
        check(dt < 2, "%s: answered at once (%.2fs)" % (what, dt))
    check(d.request("GET", "/healthz")[0] == 200, "daemon serves after bad framing")


def test_linger(d):
    """A body over --max-body (4096 here) sent whole before the answer is read (as Python's
    http.client, requests and httpx do) still gets its 413, not a broken pipe; a body far over
    the limit is refused before it is read."""
    for size in (5000, 300000, 4 << 20):
        c = d.conn(timeout=30)
        try:
            c.request("POST", "/v1/next-token", body=b"x" * size,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            j = json.loads(r.read())
            check(r.status == 413 and j["error"]["code"] == 413,
                  "%d-byte body: 413 read by http.client (%d)" % (size, r.status))
        except OSError as e:
            check(False, "%d-byte body: %r instead of the 413" % (size, e))
        finally:
            c.close()
    t0 = time.time()
    out = d.raw(b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\nxxxx" % (1 << 30), shutdown=False)
    check(out.startswith(b"HTTP/1.1 413") and time.time() - t0 < 2,
          "a 1 GiB body is refused at once: %r" % out[:40])


def test_concurrency(d, n_threads=16, seconds=4):
    """Mixed concurrent clients: no 5xx, answers equal the sequential ones."""
    texts = ["안녕하세요", "오늘 날씨는", "한국어 모델", "서울의 봄", "KoGPT2 는"]
    want = {t: post(d, "/v1/next-token", {"text": t, "top_k": 5})["candidates"] for t in texts}
    gen_body = {"text": "서울", "max_tokens": 6, "seed": 3}
    want_gen = generate(d, gen_body)["text"]
    bad = []
    count = [0]
    stop_at = time.time() + seconds

    def client(k):
        i = k
        while time.time() < stop_at:
            i += 1
            t = texts[i % len(texts)]
            if i % 4 == 0:
                st, j = d.json("POST", "/v1/generate", gen_body)
                if st != 200 or j["text"] != want_gen:
                    bad.append(("generate", st, j))
            else:
                st, j = d.json("POST", "/v1/next-token", {"text": t, "top_k": 5})
                got = j.get("candidates") if st == 200 else None
                if (st != 200 or [c["id"] for c in got] != [c["id"] for c in want[t]] or
                        any(abs(a["prob"] - b["prob"]) > 1e-4 for a, b in zip(got, want[t]))):
                    bad.append(("next-token", st, j))
            count[0] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not bad, "concurrent answers equal sequential ones (%d bad of %d): %r" % (
        len(bad), count[0], bad[:2]))
    print("  concurrency: %d requests from %d clients in %ds" % (count[0], n_threads, seconds))


def test_chat_templates(model_dir):
    """The model's own chat_template is used; one outside the Jinja subset refuses chat (422,
    naming the construct) while everything else serves; --chat-template FILE overrides it, and
    an unusable FILE stops the start with the reason."""
    cfg = os.path.join(model_dir, "tokenizer_config.json")
    msgs = {"messages": [{"role": "user", "content": "안녕"}], "max_tokens": 2}
    try:
        with open(cfg, "w") as f:
            json.dump({"chat_template": "{% for m in messages %}{{ m.content | tojson }}"
                                        "{% endfor %}"}, f)
        d = lib.Daemon(model_dir, log=os.path.join(model_dir, "chat.log"))
        try:
            st, _, body = d.request("POST", "/v1/chat/completions", msgs)
            check(st == 422 and b"tojson" in body and b"--chat-template" in body,
                  "a model template outside the subset: chat 422 naming it: %r" % body[:200])
            check(d.request("POST", "/v1/tokenize", {"text": "a"})[0] == 200,
                  "the rest serves with an unusable chat template")
        finally:
            d.stop()
        check("warning: /v1/chat/completions is refused" in d.log_text(), "a warning line")
        with open(cfg, "w") as f:
            json.dump({"chat_template": "{{ bos_token }}{% for m in messages %}Q: {{ m.content }}"
                                        "{% endfor %} A:"}, f)
        tpl = os.path.join(model_dir, "plain.jinja")
        with open(tpl, "w") as f:
            f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
        for args, want in (((), "Q: 안녕 A:"), (("--chat-template", tpl), "안녕")):
            d = lib.Daemon(model_dir, *args, log=os.path.join(model_dir, "chat.log"))
            try:
                c = post(d, "/v1/chat/completions", msgs)
                ids = post(d, "/v1/tokenize", {"text": want})["tokens"]
                bos = 1 if not args else 0  # the model template starts with bos_token
                check(c["usage"]["prompt_tokens"] == len(ids) + bos,
                      "chat renders %r: %d prompt tokens, want %d" %
                      (args or "the model's template", c["usage"]["prompt_tokens"], len(ids) + bos))
            finally:
                d.stop()
        with open(tpl, "w") as f:
            f.write("{% macro x() %}{% endmacro %}")
        r = lib.kogpt2d_run(model_dir, "--chat-template", tpl, "--port", "0")
        check(r.returncode == 1 and "macro" in r.stderr and tpl in r.stderr,
              "an unusable --chat-template stops the start: %r" % r.stderr[-300:])
        # a NUL inside the file's strings would cut the template short (or make a template
        # named "default\u0000x" the default): refused at start, naming the file
        with open(cfg, "w") as f:
            f.write('{"chat_template": "{{ messages[0].content }}\\u0000{{ bos_token }}"}')
        r = lib.kogpt2d_run(model_dir, "--port", "0")
        check(r.returncode != 0 and "tokenizer_config.json" in r.stderr and "NUL" in r.stderr,
              "a NUL in tokenizer_config.json stops the start: %d %r" % (
                  r.returncode, r.stderr[-300:]))
    finally:
        for path in (cfg, os.path.join(model_dir, "plain.jinja")):
            if os.path.exists(path):
                os.remove(path)


def test_auth_cors_busy(model_dir):
    d = lib.Daemon(model_dir, "--api-key", "s3cret", "--cors-origin", "https://example.org",
                   "--max-batch", "1", "--max-queue", "1", log=os.path.join(model_dir, "auth.log"))
    try:
        expect_error(d, "POST", "/v1/tokenize", {"text": "a"}, 401, "no API key")
        expect_error(d, "POST", "/v1/tokenize", {"text": "a"}, 401, "wrong API key",
                     {"Authorization": "Bearer s3cre"})
        expect_error(d, "GET", "/v1/models", None, 401, "models needs the key")
        key = {"Authorization": "Bearer s3cret"}
        st, hdrs, _ = d.request("POST", "/v1/tokenize", {"text": "a"}, key)
        check(st == 200 and hdrs.get("access-control-allow-origin") == "https://example.org",
              "right key + CORS header (%d %r)" % (st, hdrs))
        for path in ("/healthz", "/readyz", "/metrics"):
            check(d.request("GET", path)[0] == 200, "%s stays open" % path)
        st, hdrs, _ = d.request("OPTIONS", "/v1/next-token", None,
                                {"Origin": "https://example.org",
                                 "Access-Control-Request-Method": "POST"})
        check(st == 204 and "POST" in hdrs.get("access-control-allow-methods", "") and
              "Authorization" in hdrs.get("access-control-allow-headers", ""),
              "CORS preflight %d %r" % (st, hdrs))
        # 429: one running, one queued, the rest are refused with Retry-After
        results = []

        def slow():
            # 127 tokens fill the 128-position context: the first job holds the one slot
            results.append(d.request("POST", "/v1/generate", {"tokens": [5], "max_tokens": 127,
                                                              "ignore_eos": True}, key))

        threads = [threading.Thread(target=slow) for _ in range(4)]
        for t in threads:
            t.start()
            time.sleep(0.03)
        for t in threads:
            t.join()
        codes = sorted(r[0] for r in results)
        busy = [r for r in results if r[0] == 429]
        check(codes.count(200) >= 2 and busy and all(r[1].get("retry-after") for r in busy) and
              all(json.loads(r[2])["error"]["code"] == 429 for r in busy),
              "queue full gives 429 + Retry-After: %r" % codes)
    finally:
        check(d.stop() == 0, "auth daemon exits 0")


def test_sigterm(model_dir):
    """SIGTERM under load: every in-flight request completes, /readyz 503, exit 0."""
    d = lib.Daemon(model_dir, "--timeout", "60", log=os.path.join(model_dir, "term.log"))
    results = []
    keep = d.conn()
    keep.request("GET", "/healthz")
    keep.getresponse().read()

    def client(i):
        results.append(d.request("POST", "/v1/generate", {"text": "안녕", "max_tokens": 40,
                                                          "ignore_eos": True, "seed": i,
                                                          "stream": i % 2 == 0}))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    d.proc.send_signal(15)
    time.sleep(0.1)
    try:
        keep.request("GET", "/readyz")
        st = keep.getresponse().status
    except OSError:
        st = None
    check(st in (503, None), "readyz while draining: %r" % st)
    for t in threads:
        t.join()
    ok = [r for r in results if r[0] == 200]
    full = 0
    for st_, hdrs, data in ok:
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            ev = lib.sse_events(data)
            full += bool(ev) and json.loads(ev[-1]).get("generated_tokens") == 40
        else:
            full += json.loads(data)["generated_tokens"] == 40
    check(len(results) == 8 and full == 8, "no in-flight request lost: %d of 8 complete (%r)" % (
        full, [r[0] for r in results]))
    try:
        rc = d.proc.wait(65)
    except Exception:
        rc = None
    check(rc == 0, "exit 0 after SIGTERM (rc %r)" % rc)
    d.stop()


def test_signals(model_dir):
    """SIGHUP does not kill the daemon; a second SIGTERM during the drain ends the requests in
    flight at once, each stream with a final event, and the daemon still exits 0 (issue 13:
    a thread started before main took the signals' default action and cut every stream)."""
    d = lib.Daemon(model_dir, "--timeout", "60", log=os.path.join(model_dir, "signals.log"))
    d.proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    check(d.proc.poll() is None and d.request("GET", "/healthz")[0] == 200,
          "alive and serving after SIGHUP")
    results = []

    def client(i):
        try:
            results.append(d.request("POST", "/v1/generate", {
                "text": "안녕", "max_tokens": 120, "ignore_eos": True, "seed": i, "stream": True}))
        except OSError as e:
            results.append((None, {}, repr(e).encode()))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.3)
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    d.proc.send_signal(signal.SIGHUP)  # ignored during the drain too
    d.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    ended = 0  # streams whose last event is the final one: done, or an error saying why
    for st, _, data in results:
        ev = lib.sse_events(data) if st == 200 else []
        last = json.loads(ev[-1]) if ev else {}
        ended += "done" in last or "error" in last
    check(len(results) == 4 and ended == 4,
          "every stream ends with a final event after a second SIGTERM: %d of %d (%r)"
          % (ended, len(results), [r[0] for r in results]))
    try:
        rc = d.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "exit 0 after a second SIGTERM (rc %r)" % rc)
    d.stop()


def test_truncated_model(model_dir):
    """The served model.safetensors truncated under the daemon: the mapping loses its pages and
    the next read is a SIGBUS. The daemon dies (nothing can be done with the mapping), but says
    why in one line first (issue 13: it died with no log line)."""
    tmp = tempfile.mkdtemp(prefix="kg_trunc_")
    copy = os.path.join(tmp, "model")
    shutil.copytree(model_dir, copy)
    d = lib.Daemon(copy, "--cache-mb", "0", log=os.path.join(tmp, "d.log"))
    with open(os.path.join(copy, "model.safetensors"), "r+b") as f:
        f.truncate(4096)
    try:
        d.request("POST", "/v1/next-token", {"text": "새로운 문장을 하나 보냅니다"}, timeout=10)
    except OSError:
        pass
    try:
        rc = d.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    log = d.log_text()
    check(rc == -signal.SIGBUS and "SIGBUS: the model file changed or shrank" in log,
          "a truncated model: rc %r, log %r" % (rc, log[-300:]))
    d.stop()


def test_short_tokenizer(model_dir):
    """A tokenizer.json with fewer ids than config.json's special ids fails at start-up with a
    line naming the config field (issue 13: "token id 2 is outside the vocabulary (0..1)")."""
    tmp = tempfile.mkdtemp(prefix="kg_shorttok_")
    copy = os.path.join(tmp, "model")
    shutil.copytree(model_dir, copy)
    path = os.path.join(copy, "tokenizer.json")
    with open(path) as f:
        t = json.load(f)
    # six ids (<unk> is 5), and an eos_token_id past them
    t["model"]["vocab"] = {k: v for k, v in t["model"]["vocab"].items() if v < 6}
    t["model"]["merges"] = []
    t["added_tokens"] = [a for a in t.get("added_tokens", []) if a["id"] < 6]
    with open(path, "w") as f:
        json.dump(t, f)
    cfg_path = os.path.join(copy, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    eos = cfg["eos_token_id"] = 9
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    p = lib.kogpt2d_run(copy, "--port", "0")
    check(p.returncode == 1 and "eos_token_id %s" % eos in p.stderr and "tokenizer" in p.stderr,
          "a tokenizer shorter than the config's ids: exit %d, %r" % (p.returncode, p.stderr[-300:]))


def test_nul(d):
    """U+0000 in a text is refused with 422, never cut at (issue 13: "ab\\u0000cd" tokenized
    as "ab"); an escaped backslash before u0000 is plain text."""
    for path, key in (("/v1/tokenize", "text"), ("/v1/next-token", "text"),
                      ("/v1/generate", "text"), ("/v1/completions", "prompt")):
        st, _, data = d.request("POST", path, b'{"%s": "ab\\u0000cd"}' % key.encode(),
                                {"Content-Type": "application/json"})
        check(st == 422 and b"u0000" in data, "%s with a NUL: %d %r" % (path, st, data[:120]))
    st, _, data = d.request("POST", "/v1/tokenize", b'{"text": "ab\\\\u0000cd"}',
                            {"Content-Type": "application/json"})
    pieces = json.loads(data).get("pieces", []) if st == 200 else []
    check(st == 200 and "u0000" in "".join(pieces), "a literal \\u0000 is text: %d %r" % (st, data[:120]))


def test_detokenize_nul():
    """A byte token 0x00 (SentencePiece byte fallback: the default model's tokenizer) makes
    /v1/detokenize refuse with 422 instead of cutting its text at the NUL."""
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    model = os.path.join(src, "models", "default")
    if not os.path.isfile(os.path.join(model, "kogpt2-default.model")):
        return
    d = lib.Daemon(model, log=os.path.join(tempfile.mkdtemp(prefix="kg_nul_"), "d.log"))
    try:
        st, _, data = d.request("POST", "/v1/tokenize", {"text": "a\x01"})
        out = json.loads(data)
        one = out["tokens"][out["pieces"].index("<0x01>")]
        st, _, data = d.request("POST", "/v1/detokenize", {"tokens": [one - 1, one]})
        check(st == 422 and b"NUL" in data, "detokenize of <0x00>: %d %r" % (st, data[:160]))
        st, _, data = d.request("POST", "/v1/detokenize", {"tokens": [one]})
        check(st == 200 and json.loads(data)["text"] == "\x01", "detokenize of <0x01>: %r" % data)
    finally:
        d.stop()


def test_port_in_use(d, model_dir):
    """A second daemon on a port already served fails at once ("address already in use",
    exit 1) instead of sharing the port's traffic (issue 13: SO_REUSEPORT let it)."""
    p = lib.kogpt2d_run(model_dir, "--port", str(d.port), "--threads", "1")
    check(p.returncode == 1 and "address already in use" in p.stderr,
          "second daemon on a busy port: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    # a model that is not there: one line saying so, and no "listening on" before it
    p = lib.kogpt2d_run(os.path.join(model_dir, "nonexistent"), "--port", "0")
    check(p.returncode == 1 and "nonexistent: No such file" in p.stderr and
          "listening" not in p.stderr,
          "a missing --model fails before listening: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    check(d.request("GET", "/healthz")[0] == 200, "the first daemon still serves")


PRECISION_TOL = 2e-2  # |prob bf16 - prob f32| per rank: operands rounded to 8 bits, f32 sums


def test_precision(model_dir, d):
    """--precision: a bad value stops kogpt2d and kogpt2 next with a message naming the flag;
    bf16 serves and its candidates for a 24-token prompt (past the 12 rows from which prompts
    take the tiled matmul, vdpbf16ps where the CPU has it) are within PRECISION_TOL of the f32
    daemon d's, with the same top-1, and not bit-identical (the rounding really happens)."""
    r = lib.kogpt2d_run(model_dir, "--precision", "bogus", "--port", "0")
    check(r.returncode == 2 and "--precision: unknown precision 'bogus': f32 or bf16" in r.stderr,
          "kogpt2d --precision bogus: exit %d, %r" % (r.returncode, r.stderr[-200:]))
    ids = [(1000 + 977 * i) % 51200 for i in range(24)]
    body = {"tokens": ids, "top_k": 5}
    f32 = post(d, "/v1/next-token", body)["candidates"]
    b = lib.Daemon(model_dir, "--precision", "bf16", "--cache-mb", "0",
                   log=os.path.join(model_dir, "bf16.log"))
    try:
        bf16 = post(b, "/v1/next-token", body)["candidates"]
    finally:
        b.stop()
    log = b.log_text()
    ready = re.search(r"ready: .* on (\S+), precision (\w+)", log)
    check(ready and ready.group(2) == "bf16", "the ready line names bf16: %r" % log[-300:])
    check("Sanitizer" not in log and "runtime error" not in log, "no sanitizer reports, bf16")
    for name, c in (("f32 ", f32), ("bf16", bf16)):
        print("  %s %s" % (name, " ".join("%d:%.6f" % (x["id"], x["prob"]) for x in c)))
    diff = max(abs(x["prob"] - y["prob"]) for x, y in zip(f32, bf16))
    same = [x["logprob"] for x in f32] == [y["logprob"] for y in bf16]
    print("  max |prob diff| %.2e (tolerance %.0e), bit-identical: %s" % (diff, PRECISION_TOL, same))
    check(len(bf16) == len(f32) and bf16[0]["id"] == f32[0]["id"] and diff <= PRECISION_TOL,
          "bf16 candidates within %g of f32's" % PRECISION_TOL)
    check(not same, "bf16 rounds: its probabilities differ from f32's")
    cli = os.path.join(os.path.dirname(lib.kogpt2d_path()), "kogpt2")
    if not os.path.isfile(cli):
        return
    dev = os.environ.get("KG_TEST_DEVICE", "auto")
    r = subprocess.run([cli, "next", "--model", model_dir, "--tokens", "5", "--precision", "f16"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--precision: unknown precision 'f16': f32 or bf16" in r.stderr,
          "kogpt2 next --precision f16: exit %d, %r" % (r.returncode, r.stderr[-200:]))
    r = subprocess.run([cli, "next", "--model", model_dir, "--device", dev, "--threads", "2",
                        "--precision", "bf16", "--top-k", "5", "--json",
                        "--tokens", ",".join(map(str, ids))],
                       capture_output=True, text=True, timeout=60)
    c = json.loads(r.stdout)["candidates"] if r.returncode == 0 else []
    check(c and c[0]["id"] == bf16[0]["id"] and abs(c[0]["prob"] - bf16[0]["prob"]) <= 1e-4,
          "kogpt2 next --precision bf16 gives the daemon's top-1: %r %r" % (c[:1], r.stderr[-200:]))


def main():
    lib.shared_tokenizer()
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_srv_")
    model_dir = lib.make_model(os.path.join(tmp, "model"))
    web = os.path.join(tmp, "web")
    os.makedirs(os.path.join(web, "sub"))
    with open(os.path.join(web, "index.html"), "w") as f:
        f.write("<h1>hi</h1>")
    with open(os.path.join(web, "app.js"), "w") as f:
        f.write("1;")
    with open(os.path.join(web, ".hidden"), "w") as f:
        f.write("SECRET")
    with open(os.path.join(tmp, "secret.txt"), "w") as f:
        f.write("SECRET")
    os.symlink("/etc", os.path.join(web, "out"))
    os.symlink(os.path.join(tmp, "secret.txt"), os.path.join(web, "outfile"))
    timeout_s = 3
    d = lib.Daemon(model_dir, "--web-dir", web, "--max-body", "4096", "--timeout",
                   str(timeout_s), "--max-batch", "8")
    try:
        for name, fn in (("health", lambda: test_health(d)), ("tokenize", lambda: test_tokenize(d)),
                         ("next-token", lambda: test_next_token(d, None)),
                         ("score", lambda: test_score(d)),
                         ("generate", lambda: test_generate(d)),
                         ("completions", lambda: test_completions(d)),
                         ("chat", lambda: test_chat(d)),
                         ("chat without max_tokens", lambda: test_chat_no_limit(d)),
                         ("responses", lambda: test_responses(d)),
                         ("charset", lambda: test_charset(d)),
                         ("tgi", lambda: test_tgi(d)),
                         ("sagemaker", lambda: test_sagemaker(d)),
                         ("static", lambda: test_static(d, web)),
                         ("bad JSON", lambda: test_bad_json(d)),
                         ("bad types", lambda: test_bad_types(d)),
                         ("bad UTF-8", lambda: test_bad_utf8(d)),
                         ("bad values", lambda: test_bad_values(d)),
                         ("bad HTTP", lambda: test_bad_http(d)),
                         ("slow clients", lambda: test_slow_clients(d, timeout_s)),
                         ("disconnect", lambda: test_disconnect(d)),
                         ("half-close", lambda: test_half_close(d)),
                         ("framing", lambda: test_framing(d)),
                         ("lingering 413", lambda: test_linger(d)),
                         ("concurrency", lambda: test_concurrency(d)),
                         ("metrics", lambda: test_metrics(d)),
                         ("port in use", lambda: test_port_in_use(d, model_dir)),
                         ("NUL", lambda: test_nul(d)), ("detokenize NUL", test_detokenize_nul),
                         ("short tokenizer", lambda: test_short_tokenizer(model_dir)),
                         ("precision", lambda: test_precision(model_dir, d))):
            print("-", name, flush=True)
            try:
                fn()
            except Exception as e:  # a crash of the test is a failure, keep going
                import traceback
                traceback.print_exc()
                check(False, "%s raised %r" % (name, e))
        check(d.proc.poll() is None, "daemon alive after everything")
    finally:
        rc = d.stop()
        check(rc == 0, "daemon exits 0 on SIGTERM (rc %r)" % rc)
        log = d.log_text()
        check("Sanitizer" not in log and "runtime error" not in log,
              "no sanitizer reports in the daemon log")
        if FAILURES:
            print("--- daemon log (last 60 lines) ---")
            print("\n".join(log.splitlines()[-60:]))
    print("- chat templates", flush=True)
    test_chat_templates(model_dir)
    print("- chat on the default model", flush=True)
    test_chat_default_model()
    print("- auth, CORS, 429", flush=True)
    test_auth_cors_busy(model_dir)
    print("- SIGTERM under load", flush=True)
    test_sigterm(model_dir)
    print("- SIGHUP, a second SIGTERM", flush=True)
    test_signals(model_dir)
    print("- the model file truncated while served", flush=True)
    test_truncated_model(model_dir)
    for name in ("auth.log", "term.log", "signals.log"):
        with open(os.path.join(model_dir, name)) as f:
            text = f.read()
        check("Sanitizer" not in text and "runtime error" not in text,
              "no sanitizer reports in %s" % name)
    print("%d checks, %d failed" % (CHECKS[0], len(FAILURES)))
    if not FAILURES:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("daemon logs kept in", model_dir)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
