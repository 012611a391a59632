#!/usr/bin/env python3
"""test_server_tgi.py - text-generation-inference's compat route, POST / (issue 36 item 4), on
models/default.

huggingface_hub's InferenceClient, given a URL as its model, posts the TGI body to the URL itself:
{"inputs", "parameters", "stream"}. TGI answers there an array of one GenerateResponse, or its
SSE stream with "stream": true; kogpt2d does the same, with /generate's and /generate_stream's
answers for the same request; a GET of / is still the Explorer's page; errors are TGI's
{"error", "error_type"}; another method is 405 naming what / allows.
Exit 0 pass, 1 fail, 77 skip (no kogpt2d, no models/default).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_server_lib as lib  # noqa: E402

MODEL = os.path.join(HERE, "..", "models", "default")
check = lib.check
BODY = {"inputs": "오늘 날씨는", "parameters": {"max_new_tokens": 8, "do_sample": False,
                                              "details": True}}


def test_root_route():
    if not os.path.isfile(os.path.join(MODEL, "config.json")):
        lib.skip("no models/default")
    d = lib.Daemon(MODEL, "--quiet", "--web-dir", os.path.join(HERE, "..", "web"))
    try:
        st, gen = d.json("POST", "/generate", BODY)
        st_root, root = d.json("POST", "/", dict(BODY, stream=False))
        check(st == 200 and st_root == 200 and isinstance(root, list) and len(root) == 1 and
              root[0]["generated_text"] == gen["generated_text"] and
              root[0]["details"]["tokens"] == gen["details"]["tokens"],
              "POST / (stream false): an array of one, /generate's answer: %r" % (root,))
        st, _, data = d.request("POST", "/", dict(BODY, stream=True))
        events = [json.loads(e) for e in lib.sse_events(data)]
        st2, _, data2 = d.request("POST", "/generate_stream", BODY)
        events2 = [json.loads(e) for e in lib.sse_events(data2)]
        check(st == 200 and len(events) >= 2 and events[-1]["generated_text"] == gen["generated_text"]
              and [e["token"]["id"] for e in events] == [e["token"]["id"] for e in events2],
              "POST / (stream true): /generate_stream's events: %r" % events[-1:])
        st, hdrs, page = d.request("GET", "/")
        check(st == 200 and hdrs.get("content-type", "").startswith("text/html") and
              b"KoGPT-2" in page, "GET / is still the Explorer's page (%d %s)"
              % (st, hdrs.get("content-type")))
        st, bad = d.json("POST", "/", {"inputs": "", "parameters": {"max_new_tokens": 4}})
        check(st == 422 and isinstance(bad.get("error"), str) and "error_type" in bad,
              "POST / errors are TGI's {error, error_type}: %d %r" % (st, bad))
        st, hdrs, _ = d.request("PUT", "/", b"{}", {"Content-Type": "application/json"})
        allow = {m.strip() for m in hdrs.get("allow", "").split(",")}
        check(st == 405 and "POST" in allow, "PUT / is 405, Allow: %s" % hdrs.get("allow"))
        st, _ = d.json("POST", "/", {"parameters": {}})
        check(st in (400, 422), "POST / without inputs is refused (%d)" % st)
    finally:
        rc = d.stop()
    check(rc == 0, "kogpt2d exits 0 on SIGTERM (rc %r)" % rc)
    lib.check_log_clean(d.log_path)


def main():
    return lib.run_tests([("TGI's POST /", test_root_route)])


if __name__ == "__main__":
    sys.exit(main())
