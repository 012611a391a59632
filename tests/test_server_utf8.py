#!/usr/bin/env python3
"""test_server_utf8: no U+FFFD reaches a client (issue 26 item 7). kogpt2d on the project's
default model, whose SentencePiece vocabulary falls back to <0xAB> byte tokens, samples hot
(temperature 1.5, past end-of-text) on every endpoint that samples, streamed and not: with
utf8_strict (the default) every reply is valid UTF-8 without U+FFFD; with it off the same
draws do show U+FFFD, so the check can fail. About 9,000 tokens."""
import json
import os
import sys

import test_server_lib as lib
from test_server_lib import check

PROMPT = "옛날 옛적에"
HOT = {"temperature": 1.5, "ignore_eos": True}


# Each sampling endpoint's (path, body) for n tokens from seed, streamed or not.
def bodies(n, seed, stream, extra):
    hot = dict(HOT, seed=seed, stream=stream, **extra)
    tgi = {k: v for k, v in hot.items() if k != "stream"}
    return [
        ("/v1/generate", dict(hot, text=PROMPT, max_tokens=n)),
        ("/v1/completions", dict(hot, prompt=PROMPT, max_tokens=n)),
        ("/v1/chat/completions",
         dict(hot, messages=[{"role": "user", "content": PROMPT}], max_tokens=n)),
        ("/v1/responses", dict(hot, input=PROMPT, max_output_tokens=n)),
        ("/generate_stream" if stream else "/generate",
         {"inputs": PROMPT, "parameters": dict(tgi, max_new_tokens=n)}),
    ]


def strings(x):
    """Every string in a JSON value."""
    if isinstance(x, str):
        yield x
    elif isinstance(x, dict):
        for k, v in x.items():
            yield k
            yield from strings(v)
    elif isinstance(x, list):
        for v in x:
            yield from strings(v)


def replacements(d, path, body):
    """How many U+FFFD the reply's strings hold; the reply must be valid UTF-8 JSON."""
    status, _, data = d.request("POST", path, body, timeout=300)
    check(status == 200, "%s %s: HTTP %d %r" % (path, json.dumps(body)[:80], status, data[:200]))
    try:
        text = data.decode("utf-8")  # strict: an invalid byte is a failure by itself
    except UnicodeDecodeError as e:
        check(False, "%s: the reply is not UTF-8: %s" % (path, e))
        return 0
    payloads = lib.sse_events(data) if body.get("stream") or path == "/generate_stream" else [text]
    return sum(s.count("\ufffd") for p in payloads if p != "[DONE]"
               for s in strings(json.loads(p)))


def test_no_replacement():
    d = lib.Daemon(lib.default_model(), "--device", os.environ.get("KG_TEST_DEVICE", "cpu"))
    try:
        runs = [(seed, stream, bodies(500, seed, stream, {})[0])  # /v1/generate: 4 x 500 x 2
                for seed in (1, 2, 3, 4) for stream in (False, True)]
        runs += [(5, stream, pb) for stream in (False, True)  # the others: 300 each, x 2
                 for pb in bodies(300, 5, stream, {})[1:]]
        strict = 0
        for seed, stream, (path, body) in runs:
            k = replacements(d, path, body)
            strict += k
            check(k == 0, "utf8_strict (the default): %d U+FFFD from %s, seed %d%s" %
                  (k, path, seed, ", streamed" if stream else ""))
        loose = sum(replacements(d, *bodies(500, seed, False, {"utf8_strict": False})[0])
                    for seed in (1, 2, 3, 4))
        check(loose > 0, "utf8_strict false: the same draws show U+FFFD (%d), so the check "
              "above can fail" % loose)
        print("U+FFFD: %d with utf8_strict, %d without" % (strict, loose))
    finally:
        d.stop()


def main():
    return lib.run_tests([("no U+FFFD with utf8_strict", test_no_replacement)])


if __name__ == "__main__":
    sys.exit(main())
