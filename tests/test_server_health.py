#!/usr/bin/env python3
"""test_server_health: kogpt2d's probes and its metrics (split from test_server_e2e.py, issue 33
item 6): /healthz, /readyz, HEAD, /v1/models, and /metrics' families once each endpoint has
answered. kogpt2d on 127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide,
n_ctx 128, the default model's 12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import sys

import test_server_lib as lib
from test_server_lib import check, post


def test_health(d, vocab):
    st, j = d.json("GET", "/healthz")
    check(st == 200 and j == {"status": "ok"}, "healthz %d %r" % (st, j))
    st, j = d.json("GET", "/readyz")
    check(st == 200 and j.get("status") == "ready", "readyz %d %r" % (st, j))
    st, hdrs, data = d.request("HEAD", "/healthz")
    check(st == 200 and data == b"", "HEAD /healthz %d %r" % (st, data))
    st, j = d.json("GET", "/v1/models")
    check(st == 200 and j["object"] == "list" and j["data"][0]["id"] == "model"
          and j["data"][0]["n_ctx"] == 128 and j["data"][0]["vocab_size"] == vocab,
          "models %r" % j)


def test_metrics(d):
    # the per-endpoint families below appear once their endpoint has answered
    post(d, "/v1/next-token", {"text": "안녕하세요", "top_k": 10})
    post(d, "/v1/generate", {"text": "오늘 날씨는", "max_tokens": 2})
    st, hdrs, data = d.request("GET", "/metrics")
    text = data.decode()
    check(st == 200 and hdrs["content-type"].startswith("text/plain"), "metrics status")
    for name in ("kogpt2_requests_total{endpoint=\"/v1/next-token\",code=\"200\"}",
                 "kogpt2_request_duration_seconds_bucket{endpoint=\"/v1/generate\",le=\"+Inf\"}",
                 "kogpt2_prompt_tokens_total", "kogpt2_generated_tokens_total",
                 "kogpt2_cached_prompt_tokens_total", "kogpt2_queue_depth", "kogpt2_batch_size",
                 "kogpt2_requests_in_flight", "kogpt2_cache_bytes", "kogpt2_ready 1"):
        check(name in text, "metrics has %s" % name)


def main():
    tmp, model_dir, d = lib.start("kg_health_")
    return lib.run_tests([("health", lambda: test_health(d, lib.model_vocab(model_dir))),
                          ("metrics", lambda: test_metrics(d))], daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
