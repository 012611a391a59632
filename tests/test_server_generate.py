#!/usr/bin/env python3
"""test_server_generate: /v1/generate (split from test_server_e2e.py, issue 33 item 6): seeded
and greedy sampling, the SSE stream equal to the whole answer, stop strings, logprobs,
temperatures and top_p too small for a float; a client that hangs up cancels its job; one that
half-closes gets its whole answer. kogpt2d on 127.0.0.1 with a small random model
(lib.make_model: 2 layers, 64 wide, n_ctx 128, the default model's 12,000-id SentencePiece
tokenizer), one daemon for the file; the hang-ups' jobs run on a slower one (4 layers, 256
wide, n_ctx 1024) of their own, so that they are seen running.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import re
import socket
import struct
import sys
import time

import test_server_lib as lib
from test_server_lib import check, generate, stream

# test_disconnect's job, on lib.SLOW_MODEL: 1,000 tokens (120 on the small model took ~10 ms,
# so a hang-up came after the end), long enough to be seen running and cut short
LONG = 1000


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


def test_disconnect(tmp):
    """A client that hangs up cancels its job: the engine is idle long before max_tokens.
    A stream's client is gone when a write fails (a closed socket answers it with a reset);
    a client waiting for a whole answer is gone when its socket resets (SO_LINGER 0). A bare
    FIN is not a hang-up (test_half_close)."""
    model_dir = lib.make_model(os.path.join(tmp, "long"), **lib.SLOW_MODEL)
    d = lib.Daemon(model_dir, "--max-batch", "8", log=os.path.join(tmp, "long.log"))
    try:
        hang_up(d)
    finally:
        check(d.stop() == 0, "the hang-ups' daemon exits 0")


def hang_up(d):
    for streamed in (True, False):
        # the tokens counted say whether the job was cut short
        generated = lib.metric_sum(lib.metrics(d), "kogpt2_generated_tokens_total")
        body = json.dumps({"text": "안녕", "max_tokens": LONG, "ignore_eos": True,
                           "stream": streamed}).encode()
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body)
        if streamed:
            s.recv(100)  # the first event arrived: it is running
        else:
            # hang up while it runs: seen running in /metrics (a 0.3 s sleep guessed it), then
            # the reset
            lib.wait_for(lambda: lib.engine_jobs(d), lambda jobs: jobs == (1, 0),
                         "the whole-answer job running before the hang-up")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        t0 = time.time()
        lib.wait_for(lambda: lib.engine_jobs(d), lambda jobs: jobs == (0, 0),
                     "hang-up cancels the job (stream=%s)" % streamed)
        generated = lib.metric_sum(lib.metrics(d), "kogpt2_generated_tokens_total") - generated
        check(generated < LONG, "the hung-up job stopped short of its %d tokens (stream=%s):"
              " %d generated" % (LONG, streamed, generated))
        print("  hang-up (stream=%s): engine idle after %.2fs" % (streamed, time.time() - t0))


def test_half_close(d):
    """A client that half-closes after its request (shutdown(SHUT_WR), as nc -N does) reads
    the whole answer, streamed or not, and the log says 200, not 499."""
    log_before = len(d.log_text())
    for streamed in (False, True):
        body = json.dumps({"text": "안녕", "max_tokens": 24, "ignore_eos": True,
                           "stream": streamed}).encode()
        out = d.raw(b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"X-Request-Id: half-%d\r\nConnection: close\r\nContent-Length: %d\r\n\r\n"
                    % (streamed, len(body)) + body)
        head, _, payload = out.partition(b"\r\n\r\n")
        check(head.startswith(b"HTTP/1.1 200"), "half-closed client answered (stream=%s): %r"
              % (streamed, out[:80]))
        if streamed:
            check(b"data: [DONE]" in payload or b'"finish_reason"' in payload,
                  "half-closed stream runs to its end: %r" % payload[-120:])
        else:
            check(json.loads(payload)["generated_tokens"] == 24,
                  "half-closed client gets every token: %r" % payload[-120:])
    # each request's access line is written as it completes, maybe after its answer arrived
    # (and test_disconnect's hung-up requests may be logged meanwhile)
    def ours(text):
        return [l for l in text.splitlines() if re.search(r" id=half-[01]( aborted)?$", l)]
    log = lib.wait_log(d, lambda t: len(ours(t)) >= 2, "the two half-closed requests' access "
                       "lines", log_before)
    lines = ours(log)
    check(len(lines) == 2 and all('"POST /v1/generate" 200 ' in l for l in lines),
          "200 logged for a half-close, not 499: %r" % lines)


def main():
    tmp, model_dir, d = lib.start("kg_generate_", "--max-batch", "8")
    return lib.run_tests([("generate", lambda: test_generate(d)),
                          ("disconnect", lambda: test_disconnect(tmp)),
                          ("half-close", lambda: test_half_close(d))], daemons=[d],
                         logs=[os.path.join(tmp, "long.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
