#!/usr/bin/env python3
"""test_server_auth_cors: --api-key, --cors-origin and a full queue (split from
test_server_e2e.py, issue 33 item 6): 401 without the key or with a wrong one, the probes open,
the CORS header and preflight, 429 with Retry-After past --max-queue. kogpt2d on 127.0.0.1 with
a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 1024, the default model's
12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import sys
import tempfile
import threading

import test_server_lib as lib
from test_server_lib import check, expect_error


N_CTX = 1024  # room for a long first job: the queue's states are seen while it runs


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
        # 429: one job running, one queued, the next refused with Retry-After. Each state is
        # seen in /metrics before the next request is sent (not guessed from sleeps: the
        # first job's 1,023 tokens take ~0.1 s on a fast machine), and the running job is a
        # stream whose first event has arrived.
        long_job = {"tokens": [5], "max_tokens": N_CTX - 1, "ignore_eos": True}
        running = d.conn()
        running.request("POST", "/v1/generate", json.dumps(dict(long_job, stream=True)),
                        dict(key, **{"Content-Type": "application/json"}))
        first = running.getresponse()
        first_line = first.readline()
        queued = []
        waiter = threading.Thread(target=lambda: queued.append(
            d.request("POST", "/v1/generate", long_job, key)))
        waiter.start()
        lib.wait_for(lambda: lib.engine_jobs(d, headers=key), lambda jobs: jobs == (1, 1),
                     "one job running, one queued before the third")
        hdrs, body = expect_error(d, "POST", "/v1/generate", long_job, 429, "queue full",
                                  key)
        check(hdrs.get("retry-after", "").isdigit(), "429 has Retry-After %r" % hdrs)
        rest = first.read()
        running.close()
        waiter.join()
        events = lib.sse_events(first_line + rest)
        check(first.status == 200 and len(events) == N_CTX and
              json.loads(events[-1]).get("done") is True, "the running stream ends whole")
        check(queued and queued[0][0] == 200 and
              len(json.loads(queued[0][2])["tokens"]) == N_CTX - 1,
              "the queued job ran after it (%r)" % (queued[0][:2] if queued else None,))
    finally:
        check(d.stop() == 0, "auth daemon exits 0")


def main():
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_auth_")
    model_dir = lib.make_model(os.path.join(tmp, "model"), n_ctx=N_CTX)
    return lib.run_tests([("auth, CORS, 429", lambda: test_auth_cors_busy(model_dir))],
                         logs=[os.path.join(model_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
