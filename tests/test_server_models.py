#!/usr/bin/env python3
"""test_server_models: several models in one kogpt2d (issue 26 item 13). One daemon serves the
project's default model as "base" and a small random model (a tokenizer.json of a few hundred
pieces, lib.small_tokenizer_json) as "tiny"; the request's "model" picks one on every endpoint
that takes a model.

Checked: /v1/models lists both with their own vocabulary and memory figures, and
/v1/models/{name} answers each; each name answers with its own tokenizer and weights (ids,
vocabulary bounds, candidates, the reply's "model"); an unknown name is 404 model_not_found
naming the served models, on every such endpoint; streams run on the second model; a request
naming no model gets the first, and its answers are those of a daemon serving that model alone
(greedy candidates, tokens, the 404's message with one name); two models with one name are
refused at start-up."""
import json
import re
import os
import sys
import tempfile

import test_server_lib as lib
from test_server_lib import check, sse_events

TEXT = "여러분 2019년 수고하셨습니다"
# the endpoints that take a model, each with a body it accepts
BODIES = {
    "/v1/next-token": {"text": TEXT, "top_k": 5},
    "/v1/score": {"text": TEXT},
    "/v1/generate": {"text": TEXT, "max_tokens": 3, "temperature": 0},
    "/v1/completions": {"prompt": TEXT, "max_tokens": 3, "temperature": 0},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": TEXT}], "max_tokens": 3},
    "/v1/responses": {"input": TEXT, "max_output_tokens": 3},
    "/v1/tokenize": {"text": TEXT},
    "/v1/detokenize": {"tokens": [100, 200]},
    "/generate": {"inputs": TEXT, "parameters": {"max_new_tokens": 3}},
}
# tiny's vocabulary: TEXT's characters and the first 300 Hangul syllables, one piece each
TINY_PIECES = ["\u2581"] + sorted(set(TEXT) - {" "}) + [chr(0xAC00 + i) for i in range(300)]


def post(d, path, body):
    status, j = d.json("POST", path, body)
    check(status == 200, "%s %r: HTTP %d %r" % (path, body.get("model"), status, j))
    return j if status == 200 else {}


def answers(d, model=None):
    """What the daemon answers for model (None: no "model" field): ids, greedy candidates."""
    extra = {} if model is None else {"model": model}
    tok = post(d, "/v1/tokenize", dict(text=TEXT, **extra))
    nt = post(d, "/v1/next-token", dict(text=TEXT, top_k=5, **extra))
    return {"tokens": tok.get("tokens"), "model": nt.get("model"),
            "candidates": [(c["id"], round(c["logprob"], 4)) for c in nt.get("candidates", [])]}


def not_found(d, path, body, served):
    status, j = d.json("POST", path, dict(body, model="nope"))
    e = (j or {}).get("error", {})
    if isinstance(e, str):  # TGI's shape: {"error": message, "error_type"}
        e = {"message": e, "param": "model"}
    msg = e.get("message", "")
    check(status == 404 and e.get("param") == "model" and "model_not_found" in msg and
          all("'%s'" % s in msg for s in served),
          "%s with an unknown model: 404 naming %r: %d %r" % (path, served, status, j))
    return msg


def test_single(model):
    """The default model alone: the answers a request naming no model must keep."""
    d = lib.Daemon(model, "--device", "cpu")
    try:
        base = answers(d)
        status, j = d.json("GET", "/v1/models")
        check(status == 200 and [m["id"] for m in j["data"]] == ["default"],
              "one model: /v1/models lists it alone: %r" % j)
        msg = not_found(d, "/v1/next-token", BODIES["/v1/next-token"], ["default"])
        check(msg.endswith("this server serves 'default'"), "one model: the 404 names it: " + msg)
    finally:
        d.stop()
    return base


def test_two(model, tiny, single):
    d = lib.Daemon(model, "--model", "tiny=" + tiny, "--device", "cpu", "--alias", "base")
    try:
        check(d.request("GET", "/readyz")[0] == 200, "ready once both are loaded")
        status, j = d.json("GET", "/v1/models")
        data = {m["id"]: m for m in j.get("data", [])}
        check(status == 200 and [m["id"] for m in j["data"]] == ["base", "tiny"],
              "/v1/models lists both, in --model order: %r" % j)
        check(data["base"]["vocab_size"] == 12000 and
              data["tiny"]["vocab_size"] == lib.model_vocab(tiny),
              "each its own vocabulary: %r" % {k: v["vocab_size"] for k, v in data.items()})
        check(all(m["weight_bytes"] > 0 and m["device"] and m["dtype"] and m["ready"]
                  for m in data.values()) and
              data["base"]["weight_bytes"] != data["tiny"]["weight_bytes"],
              "each its own memory figures: %r" % data)
        for name in ("base", "tiny"):
            status, j = d.json("GET", "/v1/models/" + name)
            check(status == 200 and j["id"] == name and
                  j["vocab_size"] == data[name]["vocab_size"], "/v1/models/%s: %r" % (name, j))
        status, j = d.json("GET", "/v1/models/nope")
        msg = j.get("error", {}).get("message", "")
        check(status == 404 and "'base'" in msg and "'tiny'" in msg,
              "/v1/models/nope: 404 naming the served models: %d %r" % (status, j))

        # routing: no model is the first, which answers as it does alone; tiny its own way
        first = answers(d)
        check(first == dict(single, model="base"),
              "no model: the first model's answers, as when served alone: %r vs %r" %
              (first, single))
        check(answers(d, "base") == first, "model base: the same")
        other = answers(d, "tiny")
        check(other["model"] == "tiny" and other["tokens"] != first["tokens"] and
              other["candidates"] != first["candidates"],
              "model tiny: its own tokenizer and weights: %r" % other)
        status, _ = d.json("POST", "/v1/detokenize", {"tokens": [5000], "model": "base"})
        check(status == 200, "base's vocabulary: id 5000 is a token (%d)" % status)
        status, _ = d.json("POST", "/v1/detokenize", {"tokens": [5000], "model": "tiny"})
        check(status == 422, "tiny's vocabulary: id 5000 is not (%d)" % status)

        for path, body in BODIES.items():
            for name in ("base", "tiny"):
                j = post(d, path, dict(body, model=name))
                if "model" in j:
                    check(j["model"] == name, "%s: the reply names %s: %r" % (path, name, j))
            not_found(d, path, body, ["base", "tiny"])
        url = dict(BODIES["/v1/next-token"], model="http://127.0.0.1:%d" % d.port)
        check(post(d, "/v1/next-token", url).get("model") == "base",
              "a URL as the model is this server: the first model")

        # streams on the second model
        status, _, data = d.request("POST", "/v1/completions",
                                    dict(BODIES["/v1/completions"], model="tiny", stream=True))
        ev = sse_events(data)
        chunks = [json.loads(e) for e in ev[:-1]]
        check(status == 200 and ev[-1] == "[DONE]" and chunks and
              all(c["model"] == "tiny" for c in chunks),
              "completions stream on tiny: %d %r" % (status, ev[:3]))
        status, _, data = d.request("POST", "/v1/generate",
                                    dict(BODIES["/v1/generate"], model="tiny", stream=True))
        ev = [json.loads(e) for e in sse_events(data)]
        whole = post(d, "/v1/generate", dict(BODIES["/v1/generate"], model="tiny"))
        check(status == 200 and len(ev) >= 3 and ev[-1].get("tokens") == whole.get("tokens"),
              "generate stream on tiny: tiny's greedy tokens %r: %d %r" %
              (whole.get("tokens"), status, ev[-1:]))
        # /metrics (issue 36): each engine's figures labelled by its model, never summed
        status, _, data = d.request("GET", "/metrics")
        text = data.decode()

        def series(name, **labels):
            want = ",".join('%s="%s"' % kv for kv in labels.items())
            m = re.search(r"^%s\{%s\} (\S+)$" % (re.escape(name), re.escape(want)), text, re.M)
            return float(m.group(1)) if m else None
        tokens = {m: series("kogpt2_generated_tokens_total", endpoint="/v1/generate", model=m)
                  for m in ("base", "tiny")}
        n_tiny = 2 * len(whole.get("tokens", []))  # the stream and the whole reply above
        check(status == 200 and None not in tokens.values() and tokens["tiny"] >= n_tiny > 0 and
              series("kogpt2_generated_tokens_total", endpoint="/v1/generate") is None,
              "/metrics counts /v1/generate's tokens per model (tiny's >= %d), no summed series: %r"
              % (n_tiny, tokens))
        gauges = [series(g, model=m) for g in ("kogpt2_queue_depth", "kogpt2_running_jobs",
                                                "kogpt2_cache_bytes", "kogpt2_cache_capacity_bytes")
                  for m in ("base", "tiny")]
        check(all(v is not None for v in gauges) and series("kogpt2_queue_depth") is None,
              "/metrics has each engine's gauges per model, no summed series: %r" % gauges)
        check(series("kogpt2_decode_seconds_total", model="tiny") > 0 and
              re.search(r'^kogpt2_time_to_first_token_seconds_count\{model="tiny"\} [1-9]', text, re.M),
              "decode time and time to first token per model")
    finally:
        d.stop()


def test_same_name(model, tiny):
    r = lib.kogpt2d_run(model, "--model", "default=" + tiny, "--port", "0")
    check(r.returncode == 2 and "two models are named 'default'" in r.stderr,
          "two models with one name are refused: %d %r" % (r.returncode, r.stderr))


def test_per_model_options(model):
    """--model NAME=DIR,dtype=T,ctx-size=N,chat-template=FILE (issue 36): each model its own."""
    tmp = tempfile.mkdtemp(prefix="kg_models_opt_")
    tpl = os.path.join(tmp, "only,contents.jinja")  # a comma in the path: still one value
    with open(tpl, "w") as f:
        f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
    d = lib.Daemon(model, "--model", "a=%s,dtype=f32,ctx-size=128" % model,
                   "--model", "b=%s,chat-template=%s,dtype=q8_0" % (model, tpl),
                   "--device", "cpu", "--ctx-size", "256")
    try:
        listed = {m["id"]: m for m in d.json("GET", "/v1/models")[1]["data"]}
        a, b = listed.get("a", {}), listed.get("b", {})
        check(a.get("n_ctx") == 128 and a.get("dtype", "").lower() == "f32" and
              b.get("n_ctx") == 256 and b.get("dtype", "").lower() == "q8_0",
              "per-model dtype and ctx-size, the flag's elsewhere: %r"
              % ({k: (v.get("n_ctx"), v.get("dtype")) for k, v in listed.items()}))
        long = {"tokens": [100] * 200, "top_k": 1}
        check(d.json("POST", "/v1/next-token", dict(long, model="a"))[0] == 422
              and "candidates" in post(d, "/v1/next-token", dict(long, model="b")),
              "a 200-token prompt: 422 on a (ctx-size=128), answered on b (256)")
        chat = {"messages": [{"role": "user", "content": "안녕하세요"}], "max_tokens": 1}
        ua = post(d, "/v1/chat/completions", dict(chat, model="a")).get("usage", {})
        ub = post(d, "/v1/chat/completions", dict(chat, model="b")).get("usage", {})
        n_plain = len(d.json("POST", "/v1/tokenize", {"text": "안녕하세요", "model": "b"})[1]["tokens"])
        check(ub.get("prompt_tokens") == n_plain and ua.get("prompt_tokens", 0) > n_plain,
              "b renders chat with its own template (the content alone: %d tokens), a with the "
              "model's: %r %r" % (n_plain, ua, ub))
    finally:
        d.stop()
    for opt, what in [("dtype=f99", "dtype"), ("ctx-size=0", "ctx-size")]:
        r = lib.kogpt2d_run(model, "--model", "x=%s,%s" % (model, opt), "--port", "0")
        check(r.returncode == 2 and what in r.stderr,
              "a bad per-model %s is refused: %d %r" % (what, r.returncode, r.stderr[-200:]))


def test_models():
    model = lib.default_model()
    tiny = lib.make_model(os.path.join(tempfile.mkdtemp(prefix="kg_models_"), "tiny"),
                          pieces=TINY_PIECES)
    single = test_single(model)
    test_two(model, tiny, single)
    test_same_name(model, tiny)


def main():
    return lib.run_tests([("two models in one daemon", test_models),
                          ("per-model options", lambda: test_per_model_options(lib.default_model()))])


if __name__ == "__main__":
    sys.exit(main())
