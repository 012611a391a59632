#!/usr/bin/env python3
"""test_server_auth_cors: --api-key, --cors-origin and a full queue (split from
test_server_e2e.py, issue 33 item 6): 401 without the key or with a wrong one, the probes open,
the CORS header and preflight, 429 with Retry-After past --max-queue. kogpt2d on 127.0.0.1 with
a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default model's
12,000-id SentencePiece tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import sys
import tempfile
import threading
import time

import test_server_lib as lib
from test_server_lib import check, expect_error


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


def main():
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_auth_")
    model_dir = lib.make_model(os.path.join(tmp, "model"))
    return lib.run_tests([("auth, CORS, 429", lambda: test_auth_cors_busy(model_dir))],
                         logs=[os.path.join(model_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
