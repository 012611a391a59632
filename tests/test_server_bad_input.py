#!/usr/bin/env python3
"""test_server_bad_input: every class of bad request body (split from test_server_e2e.py, issue
33 item 6): malformed JSON, wrong types, invalid UTF-8, out-of-range values: each a 400 or 422
in the documented error shape naming its parameter, and the daemon serves on. kogpt2d on
127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default
model's 12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import sys

import test_server_lib as lib
from test_server_lib import check, expect_error


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


def test_bad_values(d, vocab):
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
        (nt, {"tokens": [vocab]}, "tokens", "token id = V"),
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


def main():
    tmp, model_dir, d = lib.start("kg_bad_input_")
    vocab = lib.model_vocab(model_dir)
    return lib.run_tests([("bad JSON", lambda: test_bad_json(d)),
                          ("bad types", lambda: test_bad_types(d)),
                          ("bad UTF-8", lambda: test_bad_utf8(d)),
                          ("bad values", lambda: test_bad_values(d, vocab))],
                         daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
