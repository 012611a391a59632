#!/usr/bin/env python3
"""test_server_kv: kogpt2d's KV cache end to end (issue 34), on the project's default model.

Checked: /v1/models and /metrics report the pool (its bytes, the dtype, blocks by state);
--kv-cache-mb below one context and --kv-dtype q4_0 are refused at start-up naming the flag;
a prompt that extends an answered one is served from its blocks (cached_tokens is the whole
shared prefix, the partly filled last block included), and so is the same prompt again;
four greedy generations in a cache of one context and a block (--kv-cache-mb 8: 34 blocks of
16 positions, each generation needing 14) preempt one another
(kogpt2_kv_preemptions_total grows) and still return exactly the tokens each returns alone;
--kv-dtype bf16 serves, reports its dtype and keeps the greedy answer's top candidate of f32
(the default model's top candidates are far apart: the rounding moves log-probs by ~1e-2)."""
import concurrent.futures
import os
import re
import sys

import test_server_lib as lib
from test_server_lib import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = "여러분 2019년 수고하셨습니다. 올해에는 좋은 일만 가득하시길 바랍니다. 그리고"


def post(d, path, body):
    status, j = d.json("POST", path, body)
    check(status == 200, "%s: HTTP %d %r" % (path, status, j))
    return j if status == 200 else {}


def metric(d, name, state=None):
    """The value of name's /metrics line for the one model served (labelled model="..."; with
    state, its state="..." line), or None."""
    text = d.request("GET", "/metrics")[2].decode()
    labels = r'\{model="[^"]*"%s\}' % (',state="%s"' % state if state else "")
    m = re.search(r"^%s%s (\S+)$" % (re.escape(name), labels), text, re.M)
    return float(m.group(1)) if m else None


def test_reports_and_sharing(model):
    d = lib.Daemon(model, "--device", "cpu")
    try:
        status, j = d.json("GET", "/v1/models")
        m = j["data"][0] if status == 200 else {}
        check(m.get("kv_dtype") == "F32" and m.get("kv_block_tokens") == 16 and
              m.get("kv_cache_bytes", 0) > 0 and "kv_cache_used_bytes" in m,
              "/v1/models reports the KV cache: %r" % m)
        for name, state in (("kogpt2_kv_blocks", "used"), ("kogpt2_kv_blocks", "cached"),
                            ("kogpt2_kv_blocks", "free"), ("kogpt2_kv_cache_bytes", None),
                            ("kogpt2_kv_block_refs", None), ("kogpt2_kv_preemptions_total", None)):
            check(metric(d, name, state) is not None,
                  "/metrics has %s%s per model" % (name, "{state=%s}" % state if state else ""))
        ids = post(d, "/v1/tokenize", {"text": TEXT})["tokens"]
        first = post(d, "/v1/next-token", {"tokens": ids, "top_k": 3})
        again = post(d, "/v1/next-token", {"tokens": ids, "top_k": 3})
        longer = post(d, "/v1/next-token", {"tokens": ids + [first["candidates"][0]["id"], 7],
                                            "top_k": 3})
        print("  %d-token prompt: cached %d, again %d; extended by 2: %d" % (
            len(ids), first["cached_tokens"], again["cached_tokens"], longer["cached_tokens"]))
        check(first["cached_tokens"] == 0, "a first prompt has nothing cached")
        check(again["cached_tokens"] == len(ids) and
              again["candidates"] == first["candidates"],
              "the same prompt again: every position cached, the same answer")
        check(longer["cached_tokens"] == len(ids),
              "a prompt extending an answered one shares its %d positions (blocks of 16 and the "
              "partly filled last one): %d" % (len(ids), longer["cached_tokens"]))
    finally:
        d.stop()


def test_refusals(model):
    r = lib.kogpt2d_run(model, "--kv-cache-mb", "1", "--port", "0", "--device", "cpu")
    check(r.returncode != 0 and "--kv-cache-mb 1 holds" in r.stderr and "needs 33" in r.stderr,
          "--kv-cache-mb 1 is refused naming what one context needs: %d %r" %
          (r.returncode, r.stderr[-300:]))
    r = lib.kogpt2d_run(model, "--kv-dtype", "q4_0", "--port", "0")
    check(r.returncode == 2 and "--kv-dtype" in r.stderr,
          "--kv-dtype q4_0 is refused: %d %r" % (r.returncode, r.stderr[-200:]))


def generate(d, prompt):
    j = post(d, "/v1/generate", {"tokens": prompt, "max_tokens": 200, "temperature": 0,
                                  "ignore_eos": True})
    return j.get("tokens")


def test_preemption(model):
    d = lib.Daemon(model, "--device", "cpu", "--kv-cache-mb", "8", "--max-batch", "4")
    try:
        prompts = [[100 + 37 * i + k for k in range(10)] for i in range(4)]
        alone = [generate(d, p) for p in prompts]
        before = metric(d, "kogpt2_kv_preemptions_total")
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda p: generate(d, p), prompts))
        after = metric(d, "kogpt2_kv_preemptions_total")
        print("  4 x 200 greedy tokens in 34 blocks: %s preemptions" % (after - before))
        check(after > before, "the generations were preempted (%s -> %s)" % (before, after))
        check(together == alone and all(len(t or []) == 200 for t in alone),
              "preempted generations return the tokens they return alone")
    finally:
        d.stop()


def test_bf16(model):
    f32 = lib.Daemon(model, "--device", "cpu")
    try:
        want = post(f32, "/v1/next-token", {"text": TEXT, "top_k": 1})["candidates"]
    finally:
        f32.stop()
    d = lib.Daemon(model, "--device", "cpu", "--kv-dtype", "bf16")
    try:
        status, j = d.json("GET", "/v1/models")
        check(status == 200 and j["data"][0].get("kv_dtype") == "BF16",
              "/v1/models says bf16: %r" % j)
        got = post(d, "/v1/next-token", {"text": TEXT, "top_k": 1})["candidates"]
        print("  bf16 KV: top %d %.4f, f32 KV: top %d %.4f" % (
            got[0]["id"], got[0]["logprob"], want[0]["id"], want[0]["logprob"]))
        check(got[0]["id"] == want[0]["id"] and abs(got[0]["logprob"] - want[0]["logprob"]) < 0.05,
              "bf16 KV keeps the top candidate within 0.05 nats")
        check("KV cache BF16" in d.log_text(), "the ready line names the KV dtype")
    finally:
        d.stop()


def main():
    model = os.path.join(ROOT, "models", "default")
    if not os.path.isfile(os.path.join(model, "model.safetensors")):
        print("SKIP: no default model")
        return lib.SKIP
    test_reports_and_sharing(model)
    test_refusals(model)
    test_preemption(model)
    test_bf16(model)
    print("%d checks, %d failed" % (lib.CHECKS[0], len(lib.FAILURES)))
    return 1 if lib.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
