#!/usr/bin/env python3
"""test_server_next_token: /v1/next-token, the Explorer's endpoint (split from
test_server_e2e.py, issue 33 item 6): candidates and their fields, text vs ids, top_k,
temperature, the prefix reused on a click; --precision bf16 against f32 (and kogpt2 next's); 16
concurrent clients get the answers a lone client gets. kogpt2d on 127.0.0.1 with a small random
model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default model's 12,000-id SentencePiece
tokenizer), one daemon for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import math
import os
import re
import subprocess
import sys
import threading
import time

import test_server_lib as lib
from test_server_lib import check, generate, post


def test_next_token(d):
    j = post(d, "/v1/next-token", {"text": "안녕하세요", "top_k": 10})
    c = j["candidates"]
    check(j["model"] == "model" and j["prompt_tokens"] == len(j["tokens"]) and
          "cached_tokens" in j and j["timings"]["total_ms"] >= 0, "next-token fields %r" % j)
    check(isinstance(c, list) and len(c) == 10, "next-token: 10 candidates")
    check(all(c[i]["prob"] >= c[i + 1]["prob"] for i in range(len(c) - 1)),
          "next-token: sorted by probability")
    check(all(0 < x["prob"] <= 1 and abs(math.log(x["prob"]) - x["logprob"]) < 1e-4
              and x["piece"] and x["text"] == x["piece"].replace("\u2581", " ") for x in c),
          "next-token: candidate fields %r" % c[:2])
    j2 = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 10})
    check([x["id"] for x in j2["candidates"]] == [x["id"] for x in c],
          "next-token: text and its token ids give the same candidates")
    j3 = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 1})
    check(len(j3["candidates"]) == 1 and j3["candidates"][0]["id"] == c[0]["id"],
          "next-token top_k 1")
    hot = post(d, "/v1/next-token", {"tokens": j["tokens"], "top_k": 10, "temperature": 5})
    check(hot["candidates"][0]["prob"] < c[0]["prob"], "next-token: temperature flattens")
    # the Explorer's click: append the best candidate; the prefix is reused
    click = post(d, "/v1/next-token", {"tokens": j["tokens"] + [c[0]["id"]], "top_k": 10})
    check(click["prompt_tokens"] == len(j["tokens"]) + 1, "click prompt_tokens")
    print("  click: cached_tokens %d of %d, total_ms %.2f" % (
        click["cached_tokens"], click["prompt_tokens"], click["timings"]["total_ms"]))


PRECISION_TOL = 2e-2  # |prob bf16 - prob f32| per rank: operands rounded to 8 bits, f32 sums


def test_precision(model_dir, d):
    """--precision: a bad value stops kogpt2d and kogpt2 next with a message naming the flag;
    bf16 serves and its candidates for a 24-token prompt (past the 12 rows from which prompts
    take the tiled matmul, vdpbf16ps where the CPU has it) are within PRECISION_TOL of the f32
    daemon d's, with the same top-1, and not bit-identical (the rounding really happens)."""
    r = lib.kogpt2d_run(model_dir, "--precision", "bogus", "--port", "0")
    check(r.returncode == 2 and "--precision: unknown precision 'bogus': f32 or bf16" in r.stderr,
          "kogpt2d --precision bogus: exit %d, %r" % (r.returncode, r.stderr[-200:]))
    ids = [(1000 + 977 * i) % lib.model_vocab(model_dir) for i in range(24)]
    body = {"tokens": ids, "top_k": 5}
    f32 = post(d, "/v1/next-token", body)["candidates"]
    b = lib.Daemon(model_dir, "--precision", "bf16", "--cache-mb", "0",
                   log=os.path.join(model_dir, "bf16.log"))
    try:
        bf16 = post(b, "/v1/next-token", body)["candidates"]
    finally:
        b.stop()
    log = b.log_text()
    ready = re.search(r"ready: .* on (\S+), precision (\w+)", log)
    check(ready and ready.group(2) == "bf16", "the ready line names bf16: %r" % log[-300:])
    check("Sanitizer" not in log and "runtime error" not in log, "no sanitizer reports, bf16")
    for name, c in (("f32 ", f32), ("bf16", bf16)):
        print("  %s %s" % (name, " ".join("%d:%.6f" % (x["id"], x["prob"]) for x in c)))
    diff = max(abs(x["prob"] - y["prob"]) for x, y in zip(f32, bf16))
    same = [x["logprob"] for x in f32] == [y["logprob"] for y in bf16]
    print("  max |prob diff| %.2e (tolerance %.0e), bit-identical: %s" % (diff, PRECISION_TOL, same))
    check(len(bf16) == len(f32) and bf16[0]["id"] == f32[0]["id"] and diff <= PRECISION_TOL,
          "bf16 candidates within %g of f32's" % PRECISION_TOL)
    check(not same, "bf16 rounds: its probabilities differ from f32's")
    cli = os.path.join(os.path.dirname(lib.kogpt2d_path()), "kogpt2")
    if not os.path.isfile(cli):
        lib.skip("%s was not built: kogpt2 next --precision unchecked" % cli)
    dev = os.environ.get("KG_TEST_DEVICE", "auto")
    r = subprocess.run([cli, "next", "--model", model_dir, "--tokens", "5", "--precision", "f16"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--precision: unknown precision 'f16': f32 or bf16" in r.stderr,
          "kogpt2 next --precision f16: exit %d, %r" % (r.returncode, r.stderr[-200:]))
    r = subprocess.run([cli, "next", "--model", model_dir, "--device", dev, "--threads", "2",
                        "--precision", "bf16", "--top-k", "5", "--json",
                        "--tokens", ",".join(map(str, ids))],
                       capture_output=True, text=True, timeout=60)
    c = json.loads(r.stdout)["candidates"] if r.returncode == 0 else []
    check(c and c[0]["id"] == bf16[0]["id"] and abs(c[0]["prob"] - bf16[0]["prob"]) <= 1e-4,
          "kogpt2 next --precision bf16 gives the daemon's top-1: %r %r" % (c[:1], r.stderr[-200:]))


def test_concurrency(d, n_threads=16, seconds=4):
    """Mixed concurrent clients: no 5xx, answers equal the sequential ones."""
    texts = ["안녕하세요", "오늘 날씨는", "한국어 모델", "서울의 봄", "KoGPT2 는"]
    want = {t: post(d, "/v1/next-token", {"text": t, "top_k": 5})["candidates"] for t in texts}
    gen_body = {"text": "서울", "max_tokens": 6, "seed": 3}
    want_gen = generate(d, gen_body)["text"]
    bad = []
    count = [0]
    stop_at = time.time() + seconds

    def client(k):
        i = k
        while time.time() < stop_at:
            i += 1
            t = texts[i % len(texts)]
            if i % 4 == 0:
                st, j = d.json("POST", "/v1/generate", gen_body)
                if st != 200 or j["text"] != want_gen:
                    bad.append(("generate", st, j))
            else:
                st, j = d.json("POST", "/v1/next-token", {"text": t, "top_k": 5})
                got = j.get("candidates") if st == 200 else None
                if (st != 200 or [c["id"] for c in got] != [c["id"] for c in want[t]] or
                        any(abs(a["prob"] - b["prob"]) > 1e-4 for a, b in zip(got, want[t]))):
                    bad.append(("next-token", st, j))
            count[0] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check(not bad, "concurrent answers equal sequential ones (%d bad of %d): %r" % (
        len(bad), count[0], bad[:2]))
    print("  concurrency: %d requests from %d clients in %ds" % (count[0], n_threads, seconds))


def main():
    tmp, model_dir, d = lib.start("kg_next_token_", "--max-batch", "8")
    return lib.run_tests([("next-token", lambda: test_next_token(d)),
                          ("precision", lambda: test_precision(model_dir, d)),
                          ("concurrency", lambda: test_concurrency(d))],
                         daemons=[d], logs=[os.path.join(model_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
