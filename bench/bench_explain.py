#!/usr/bin/env python3
"""bench_explain.py - what /v1/next-token's "explain" costs per request (issue 36), at a prompt of
512 tokens on the KoGPT2-base shape (12 layers, 768 wide, 51,200 vocabulary; random f32
weights: tests/ref/gpt2_ref.py's kogpt2_f32, with KoGPT2 v2's tokenizer.json beside it).

One kogpt2d (--threads as given), then rounds; in each round, in turn:
  cold  plain / lens / attention / both: a new 512-token prompt each (no prefix cached)
  warm  plain / lens: the round's first prompt again (plain: answered from the prefix cache;
        lens: its last token runs again, then the lens)
Per request: the client's wall time (request to parsed JSON) and the server's timings (total_ms;
prefill_ms, after which the lens and attention are computed). Printed: the median of each kind
and its difference from the plain request of the same temperature (cold or warm). Figures
only; timing on a shared machine is noisy: the kinds run interleaved in the same rounds.

Usage: bench/bench_explain.py MODEL_DIR [--build BUILD_DIR] [--rounds N] [--threads N]
  MODEL_DIR: a KoGPT2-base-shape model directory with a tokenizer (see above)
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
import test_server_lib as lib  # noqa: E402

N_PROMPT = 512
KINDS = [
    ("cold plain", None),
    ("cold lens", {"lens": True}),
    ("cold attention", {"attention": True}),
    ("cold lens+attention", {"lens": True, "attention": True}),
    ("warm plain", None),
    ("warm lens", {"lens": True}),
]


def one(d, tokens, explain):
    body = {"tokens": tokens, "top_k": 10}
    if explain:
        body["explain"] = explain
    t0 = time.perf_counter()
    status, _, data = d.request("POST", "/v1/next-token", body, timeout=600)
    j = json.loads(data)
    wall = (time.perf_counter() - t0) * 1e3
    if status != 200:
        sys.exit("HTTP %d: %s" % (status, data[:200]))
    t = j["timings"]
    return wall, t["queue_ms"], t["prefill_ms"], t["total_ms"] - t["queue_ms"] - t["prefill_ms"], \
        wall - t["total_ms"], len(data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ["KG_BUILD_DIR"] = a.build
    with open(os.path.join(a.model, "config.json")) as f:
        V = json.load(f)["vocab_size"]
    rng = random.Random(36)
    d = lib.Daemon(a.model, "--quiet", "--threads", str(a.threads), "--cache-mb", "512")
    res = {k: [] for k, _ in KINDS}
    try:
        one(d, [rng.randrange(V) for _ in range(N_PROMPT)], None)  # warm-up
        for r in range(a.rounds):
            first = [rng.randrange(V) for _ in range(N_PROMPT)]
            for name, explain in KINDS:
                tokens = first if name.startswith("warm") or name == "cold plain" else \
                    [rng.randrange(V) for _ in range(N_PROMPT)]
                res[name].append(one(d, tokens, explain))
            print("round %d: %s" % (r + 1, ", ".join("%s %.0f ms" % (k, v[-1][0]) for k, v in res.items())),
                  flush=True)
    finally:
        d.stop()
    cols = ("wall", "queue", "prompt", "answer", "reply", "JSON KB", "extra wall", "extra w/o queue")
    print("\n%-20s" % "kind (median ms)" + "".join("%11s" % c for c in cols))
    med = lambda name, i: statistics.median(x[i] for x in res[name])
    for name, _ in KINDS:
        ref = "cold plain" if name.startswith("cold") else "warm plain"
        v = [med(name, i) for i in range(6)]
        extra = v[0] - med(ref, 0)
        extra_nq = (v[0] - v[1]) - statistics.median(x[0] - x[1] for x in res[ref])
        print("%-20s" % name + "".join("%11.1f" % x for x in v[:5]) + "%11.1f" % (v[5] / 1024) +
              ("%11s%11s" % ("-", "-") if name == ref else "%+11.1f%+11.1f" % (extra, extra_nq)))
    print("\n(queue: waiting for the engine; prompt: admission to the prompt's logits (KV copy of a"
          " cached prefix, the passes); answer: the candidates, the lens and the attention view;"
          " reply: building, sending and parsing the JSON; extra: the median wall time over the"
          " plain request of the same kind, and the same without the queue; %d rounds, %d threads)"
          % (a.rounds, a.threads))


if __name__ == "__main__":
    main()
