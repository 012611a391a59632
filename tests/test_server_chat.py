#!/usr/bin/env python3
"""test_server_chat: /v1/chat/completions and chat templates (split from test_server_e2e.py,
issue 33 item 6): the object and its stream, text parts, errors, /v1/models/{id}; no max_tokens
runs to the context's end; the model's own template, one outside the subset, --chat-template
FILE, a NUL in tokenizer_config.json; the default model under its own template. kogpt2d on
127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default
model's 12,000-id SentencePiece tokenizer), one daemon for the file (the template cases start
their own).
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import sys
import tempfile

import test_server_lib as lib
from test_server_lib import check, expect_error, post, stream


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


def main():
    tmp, model_dir, d = lib.start("kg_chat_", "--max-batch", "8")
    return lib.run_tests([("chat", lambda: test_chat(d)),
                          ("chat without max_tokens", lambda: test_chat_no_limit(d)),
                          ("chat templates", lambda: test_chat_templates(model_dir)),
                          ("chat on the default model", test_chat_default_model)],
                         daemons=[d], logs=[os.path.join(model_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
