#!/usr/bin/env python3
"""test_server_score: /v1/score, two ways.

score vs next-token (from test_server_e2e.py, issue 33 item 6): on a small random model
(lib.make_model), each prompt token's logprob, rank and the model's top choice there agree
with /v1/next-token at each prefix; the whole-prompt pass, the prefix-cache path (one token
appended) and the memo (the same prompt again) agree; the bad requests are refused.

ranks vs kogpt2 next, the GLTR view (issue 26 item 12): kogpt2d on the project's
default model scores a prompt asking top_alternatives 5 and 10; at every position the rank
(exact over the whole vocabulary, far past the old top 100) and the alternatives are checked
against `kogpt2 next --top-k V --json` on the same prefix, the whole distribution. Both ways
the server scores are covered: one pass over a long prompt, and a prompt one token longer
(its earlier positions from the memo, the last through the prefix cache). Also: the field's
bounds, its default (no alternatives), and the first token's nulls.

Tolerance: the daemon scores a prompt in one batched forward, the CLI each prefix alone, so
the float32 sums may differ in their last bits: logprobs agree within 1e-4, and a rank or an
alternative's place may differ only among tokens whose logprobs lie within 1e-4 of each
other (a near-tie)."""
import json
import math
import os
import subprocess
import sys

import test_server_lib as lib
from test_server_lib import check, expect_error, post

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = "여러분 2019년 수고하셨습니다. 올해에는 모두 건강하세요"
RARE = 7777  # an id put into the prompt so that some rank is far past 100
TOL = 1e-4


def cli_path():
    build = os.environ.get("KG_BUILD_DIR") or os.path.join(ROOT, "build")
    return os.path.join(build, "kogpt2")


def full_distribution(model, prefix, vocab):
    """Every token's logprob after prefix, from the CLI: {id: logprob} and the ids best first."""
    out = subprocess.run([cli_path(), "next", "--model", model, "--device", "cpu", "--tokens",
                          ",".join(map(str, prefix)), "--top-k", str(vocab), "--json"],
                         capture_output=True, check=True, timeout=300).stdout
    cands = json.loads(out)["candidates"]
    return {c["id"]: c["logprob"] for c in cands}, [c["id"] for c in cands]


def rank_range(lps, id_):
    """The ranks id_ may have: 1 + the tokens surely above it .. 1 + those within TOL or above."""
    x = lps[id_]
    above = sum(1 for v in lps.values() if v > x + TOL)
    near = sum(1 for i, v in lps.items() if v >= x - TOL and i != id_)
    return above + 1, near + 1


def check_position(k, s, lps, order, n_alt):
    """Position k's score s against the CLI's whole distribution there (lps, order)."""
    lo, hi = rank_range(lps, s["id"])
    check(lo <= s["rank"] <= hi, "position %d: rank %s, the CLI's %d..%d" % (k, s["rank"], lo, hi))
    check(abs(s["logprob"] - lps[s["id"]]) < TOL,
          "position %d: logprob %.6f vs the CLI's %.6f" % (k, s["logprob"], lps[s["id"]]))
    alts = s.get("alternatives")
    check(isinstance(alts, list) and len(alts) == n_alt,
          "position %d: %d alternatives asked, got %r" % (k, n_alt, alts and len(alts)))
    for r, a in enumerate(alts or []):
        # the CLI's r-th id, or a near-tie of it
        ok = a["id"] == order[r] or abs(lps[a["id"]] - lps[order[r]]) < TOL
        check(ok and abs(a["logprob"] - lps[a["id"]]) < TOL and
              abs(a["prob"] - math.exp(a["logprob"])) < 1e-6,
              "position %d alternative %d: %r vs the CLI's id %d (%.6f)" %
              (k, r + 1, {x: a.get(x) for x in ("id", "logprob")}, order[r], lps[order[r]]))
        check(all(f in a for f in ("piece", "text", "display", "bytes")),
              "position %d alternative %d has api_token_json's fields: %r" % (k, r + 1, a))
    check(bool(alts) and s["top"]["id"] == alts[0]["id"], "position %d: top is alternative 1" % k)


def score(d, tokens, **extra):
    status, j = d.json("POST", "/v1/score", dict(tokens=tokens, **extra))
    check(status == 200, "/v1/score %r: HTTP %d %r" % (extra, status, j))
    return j


def test_score(d):
    """/v1/score: per prompt token its logprob, rank and the model's top choice there, checked
    against /v1/next-token at each prefix; the whole-prompt pass, the prefix-cache path (one
    token appended) and the memo (the same prompt again) agree."""
    ids = post(d, "/v1/tokenize", {"text": "한국어 모델은 무엇을 생각할까 궁금하다"})["tokens"]
    check(len(ids) >= 4, "score: a prompt of several tokens (%d)" % len(ids))
    s = post(d, "/v1/score", {"tokens": ids})
    sc = s["scores"]
    check(s["tokens"] == ids and len(sc) == len(ids) and s["prompt_tokens"] == len(ids) and
          "cached_tokens" in s and s["timings"]["total_ms"] >= 0, "score fields %r" % s)
    check(sc[0]["logprob"] is None and sc[0]["rank"] is None and sc[0]["top"] is None and
          sc[0]["id"] == ids[0], "score: the first token is not scored %r" % sc[0])
    for k in range(1, len(ids)):
        nt = post(d, "/v1/next-token", {"tokens": ids[:k], "top_k": 100})["candidates"]
        x = sc[k]
        rank = next((r + 1 for r, c in enumerate(nt) if c["id"] == ids[k]), None)
        # rank is exact over the whole vocabulary: past next-token's 100 it is a number > 100
        check(x["id"] == ids[k] and (x["rank"] == rank if rank else x["rank"] > 100) and
              x["top"]["id"] == nt[0]["id"] and
              abs(x["top"]["prob"] - nt[0]["prob"]) <= 1e-4 and
              abs(math.exp(x["logprob"]) - x["prob"]) <= 1e-6 and
              (rank is None or abs(x["logprob"] - nt[rank - 1]["logprob"]) <= 1e-4) and
              (rank is not None or x["prob"] <= nt[-1]["prob"] + 1e-6) and
              isinstance(x["piece"], str) and isinstance(x["text"], str),
              "score position %d: %r vs next-token (rank %r, top %r)" % (k, x, rank, nt[0]))
    again = post(d, "/v1/score", {"tokens": ids})
    check(again["scores"] == sc and again["cached_tokens"] == len(ids),
          "score: the same prompt again comes from the memo (%r)" % again["cached_tokens"])
    # one token appended: the tail path (next-token at the prefix, from the prefix cache)
    nt = post(d, "/v1/next-token", {"tokens": ids, "top_k": 10, "speculate": True})["candidates"]
    longer = post(d, "/v1/score", {"tokens": ids + [nt[3]["id"]]})
    last = longer["scores"][-1]
    check(longer["scores"][:-1] == sc and last["rank"] == 4 and
          abs(last["prob"] - nt[3]["prob"]) <= 1e-5 and last["top"]["id"] == nt[0]["id"] and
          longer["cached_tokens"] == len(ids) + 1,
          "score: one token appended, from the caches %r (cached %r)" % (last, longer["cached_tokens"]))
    # a prompt only the whole pass can answer gives the same numbers as the tail path
    fresh = post(d, "/v1/score", {"text": "새로운 문장을 하나 더 써 봅니다 오늘"})
    toks = fresh["tokens"]
    check(fresh["cached_tokens"] <= 1, "score: a new prompt is computed (%r)" % fresh["cached_tokens"])
    post(d, "/v1/score", {"tokens": toks[:-2]})
    tail = post(d, "/v1/score", {"tokens": toks})
    check(all(a["rank"] == b["rank"] and a["top"]["id"] == b["top"]["id"] and
              abs(a["logprob"] - b["logprob"]) <= 1e-4
              for a, b in zip(fresh["scores"][1:], tail["scores"][1:])),
          "score: whole pass and prefix-cache path agree")
    one = post(d, "/v1/score", {"tokens": [ids[0]]})
    check(len(one["scores"]) == 1 and one["scores"][0]["rank"] is None, "score: one token")
    expect_error(d, "POST", "/v1/score", {"tokens": []}, 422, "score: empty prompt")
    expect_error(d, "POST", "/v1/score", {"tokens": [10 ** 6]}, 422, "score: id outside V")
    expect_error(d, "POST", "/v1/score", {"text": 5}, 400, "score: text not a string")


def test_ranks():
    """Ranks and top_alternatives vs the CLI's whole distribution (the docstring's second part)."""
    model = lib.default_model()
    if not os.path.isfile(cli_path()):
        lib.skip("%s was not built" % cli_path())
    with open(os.path.join(model, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    log = os.path.join(os.environ.get("KG_BUILD_DIR") or ROOT, "test_server_score.log")
    d = lib.Daemon(model, "--device", "cpu", log=log)  # not into the model's tracked directory
    try:
        status, j = d.json("POST", "/v1/tokenize", {"text": TEXT})
        check(status == 200, "tokenize: HTTP %d" % status)
        tokens = j["tokens"][:6] + [RARE] + j["tokens"][6:]

        # the bounds of top_alternatives, and its default: today's answer, no alternatives
        for bad in (-1, 11, 2.5, "5", True):
            status, j = d.json("POST", "/v1/score", {"tokens": tokens, "top_alternatives": bad})
            check(status in (400, 422) and "top_alternatives" in j["error"]["message"],
                  "top_alternatives %r is refused by name (400/422): %d %r" % (bad, status, j))
        # one pass over the prompt (more than two positions to score: one prompt job)
        five = score(d, tokens, top_alternatives=5)
        first = five["scores"][0]
        check(first["rank"] is None and first["top"] is None and first["alternatives"] is None,
              "the first token's rank, top and alternatives are null: %r" % first)
        ranks = []
        for k in range(1, len(tokens)):
            lps, order = full_distribution(model, tokens[:k], vocab)
            check(len(order) == vocab, "the CLI ranks all %d tokens" % vocab)
            check_position(k, five["scores"][k], lps, order, 5)
            ranks.append(five["scores"][k]["rank"])
        check(max(ranks) > 100, "some rank is past the old limit of 100: %r" % ranks)
        print("ranks %r (the rare id %d at position 6: %d)" % (ranks, RARE, ranks[5]))
        plain = score(d, tokens)  # now all from the memo
        check(all("alternatives" not in s for s in plain["scores"]) and
              [s["rank"] for s in plain["scores"][1:]] == ranks,
              "without top_alternatives: the same ranks and no alternatives")

        # one token more: the earlier positions from the memo, the last one through the
        # prefix cache (a next-token job); ten alternatives from what the memo kept
        longer = tokens + [five["scores"][-1]["id"]]
        ten = score(d, longer, top_alternatives=10)
        check(ten["cached_tokens"] >= len(tokens) - 1,
              "the longer prompt's earlier positions came from the memo: cached_tokens %d" %
              ten["cached_tokens"])
        for k in (1, len(tokens) - 1, len(longer) - 1):
            lps, order = full_distribution(model, longer[:k], vocab)
            check_position(k, ten["scores"][k], lps, order, 10)
    finally:
        d.stop()


def main():
    tmp, _, d = lib.start("kg_score_")
    return lib.run_tests([("score vs next-token", lambda: test_score(d)),
                          ("ranks vs kogpt2 next", test_ranks)], daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
