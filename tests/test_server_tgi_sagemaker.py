#!/usr/bin/env python3
"""test_server_tgi_sagemaker: text-generation-inference's /generate, /generate_stream and /info,
and SageMaker's /ping and /invocations (split from test_server_e2e.py, issue 33 item 6). kogpt2d
on 127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the
default model's 12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import sys

import test_server_lib as lib
from test_server_lib import check, expect_error, generate, post


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
    """text-generation-inference's /generate, /generate_stream, /info (issue 29, item 4). The
    prompt's token count comes from the reference tokenizer (libsentencepiece)."""
    n_prompt = len(lib.spm_encode("오늘 날씨는"))
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
    check(len(pre) == n_prompt and pre[0]["logprob"] is None
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
          and ev[-1]["details"]["input_length"] == n_prompt and "[DONE]" not in data.decode(),
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


def main():
    tmp, model_dir, d = lib.start("kg_tgi_")
    return lib.run_tests([("tgi", lambda: test_tgi(d)), ("sagemaker", lambda: test_sagemaker(d))],
                         daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
