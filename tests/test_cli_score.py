#!/usr/bin/env python3
"""test_cli_score.py - kogpt2 score (issue 36 item 3) on the project's default model.

A text file of Korean lines (one longer than the model's context, so it is scored in windows),
an empty line and a line that is not UTF-8, then:
  - each scored line's figures equal models/eval_bpb.sh's on that line alone (bits per byte to
    the script's 4 decimals, its tokens and bytes exactly, nats/token to 4 decimals);
  - a line that fits the context has the summed logprob of kogpt2d's /v1/score over EOS, the
    line's tokens, EOS (the same definition: every token after the first EOS, the closing one
    too), within 2e-3 nats;
  - the empty and the non-UTF-8 lines are kept in their place as {"line", "skipped"};
  - the same lines as JSONL ({"text": ...}, and --field) give the same figures; stdin (-) too;
    --batch 1 and --batch 3 --chunk 7 agree (batching changes sums only in float rounding);
  - the progress line (a line per 10 % off a terminal, with an ETA) and the summary line on stderr.
Exit 0 pass, 1 fail, 77 skip (not built, no models/default).
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import test_server_lib as lib  # noqa: E402

MODEL = os.path.join(ROOT, "models", "default")
BUILD = os.environ.get("KG_BUILD_DIR") or os.path.join(ROOT, "build")
LINES = [
    "여러분 2019년 수고하셨습니다. 올해에는 더 좋은 일이 가득하길 바랍니다.",
    "",
    "오늘 날씨가 정말 좋아서 공원에 산책을 다녀왔어요.",
    None,  # bytes that are not UTF-8
    "이 책은 정말 재미있다",
    " ".join(["한국어 언어 모델은 문장의 다음 단어를 예측합니다."] * 60),  # > n_ctx tokens
]
# logprob sums of float32 logits over up to ~40 tokens, one forward against another (the
# daemon's prefix chunks vs this run's): each token within ~1e-5, the sum well within 2e-3
SUM_TOL = 2e-3
check = lib.check


def need(path):
    if not os.path.isfile(path):
        print("SKIP: %s is missing" % path)
        sys.exit(lib.SKIP)
    return path


def score(args, stdin=None):
    """kogpt2 score ARGS on the default model: (records, stderr)."""
    r = subprocess.run([need(os.path.join(BUILD, "kogpt2")), "score", "--model", MODEL,
                        "--device", "cpu", "--threads", "2"] + args,
                       capture_output=True, input=stdin, timeout=600)
    check(r.returncode == 0, "kogpt2 score %s: exit %d: %s" % (" ".join(args), r.returncode,
                                                                r.stderr.decode()[-300:]))
    return [json.loads(l) for l in r.stdout.decode().splitlines()], r.stderr.decode()


def eval_bpb(path):
    """models/eval_bpb.sh on one file: (bpb, nats/token, tokens, bytes) as it prints them."""
    r = subprocess.run(["sh", os.path.join(ROOT, "models", "eval_bpb.sh"), MODEL, path, BUILD],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, NOCOMP="1"))
    m = re.search(r"-> (\d+) tokens", r.stdout)
    b = re.search(r"model +([0-9.]+) bits per byte \(([0-9.]+) nats/token, windows of \d+ tokens, "
                  r"(\d+) bytes\)", r.stdout)
    if not check(r.returncode == 0 and m and b, "eval_bpb.sh %s: %s" % (path, r.stdout + r.stderr)):
        return None
    return float(b.group(1)), float(b.group(2)), int(m.group(1)), int(b.group(3))


def main():
    need(os.path.join(MODEL, "config.json"))
    need(os.path.join(BUILD, "kogpt2-train"))
    tmp = tempfile.mkdtemp(prefix="kg_score_")
    raw = b"".join((l.encode() if l is not None else b"\xff\xfe\xfd broken") + b"\n" for l in LINES)
    text = os.path.join(tmp, "docs.txt")
    with open(text, "wb") as f:
        f.write(raw)
    recs, err = score([text, "--batch", "3", "--chunk", "7"])
    check([r["line"] for r in recs] == list(range(1, len(LINES) + 1)), "one record per line, in order")
    check(recs[1].get("skipped") == "empty" and recs[3].get("skipped") == "not UTF-8",
          "the empty and the non-UTF-8 lines are kept in place, skipped: %s %s" % (recs[1], recs[3]))
    scored = [k for k, l in enumerate(LINES) if l]
    # the progress (not a terminal: a line per 10 %) and the summary
    check(re.search(r"score: +100% .*ETA", err) and
          re.search(r"kogpt2 score: %d documents \(2 not scored\), \d+ tokens, \d+ bytes: [0-9.]+ bits "
                    r"per byte" % len(scored), err), "the progress lines and the summary: %s" % err[-400:])

    # models/eval_bpb.sh on each line alone
    for k in scored:
        one = os.path.join(tmp, "line%d.txt" % k)
        with open(one, "w") as f:
            f.write(LINES[k] + "\n")
        ev = eval_bpb(one)
        r = recs[k]
        if ev is None or "bits_per_byte" not in r:
            check(False, "line %d: %s" % (k + 1, r))
            continue
        bpb, npt, tokens, nbytes = ev
        check(abs(r["bits_per_byte"] - bpb) <= 6e-5 and abs(-r["mean_logprob"] - npt) <= 6e-5 and
              r["tokens"] == tokens and r["bytes"] == nbytes,
              "line %d: kogpt2 score = eval_bpb.sh: %.4f bpb, %.4f nats/token, %d tokens, %d bytes "
              "(eval_bpb.sh: %.4f, %.4f, %d, %d)" % (k + 1, r["bits_per_byte"], -r["mean_logprob"],
                                                     r["tokens"], r["bytes"], bpb, npt, tokens, nbytes))
    check(recs[5].get("tokens", 0) > 512, "the long line is longer than the context (%s tokens)"
          % recs[5].get("tokens"))

    # /v1/score over EOS, the line, EOS
    d = lib.Daemon(MODEL, "--quiet")
    try:
        eos = 2  # the default model's </s> (config.json eos_token_id)
        for k in scored[:-1]:
            ids = d.json("POST", "/v1/tokenize", {"text": LINES[k]})[1]["tokens"]
            st, j = d.json("POST", "/v1/score", {"tokens": [eos] + ids + [eos]})
            lp = sum(s["logprob"] for s in j["scores"][1:])
            nbytes = len(LINES[k].encode()) + 1
            check(st == 200 and abs(lp - recs[k]["logprob"]) <= SUM_TOL and
                  recs[k]["tokens"] == len(ids) + 1 and
                  abs(-lp / math.log(2) / nbytes - recs[k]["bits_per_byte"]) <= SUM_TOL / nbytes,
                  "line %d: kogpt2 score = /v1/score: logprob %.5f vs %.5f (%d tokens)"
                  % (k + 1, recs[k]["logprob"], lp, len(ids) + 1))
    finally:
        d.stop()

    # the same documents as JSONL, through stdin, and batched otherwise
    jl = os.path.join(tmp, "docs.jsonl")
    with open(jl, "w") as f:
        for l in LINES:
            f.write(json.dumps({"id": 1, "body": l if l is not None else "x"}, ensure_ascii=False) + "\n")
    jrecs, _ = score([jl, "--field", "body", "--quiet"])
    same = lambda a, b: abs(a["logprob"] - b["logprob"]) <= 1e-4 and a["tokens"] == b["tokens"]
    check(all(same(jrecs[k], recs[k]) for k in scored) and jrecs[1].get("skipped") == "empty",
          "JSONL (--field body) gives the text's figures")
    srecs, _ = score(["-", "--batch", "1", "--quiet"], stdin=raw)
    check(len(srecs) == len(recs) and all(same(srecs[k], recs[k]) for k in scored),
          "stdin with --batch 1 gives --batch 3 --chunk 7's figures (1e-4)")
    bad, _ = score([os.path.join(tmp, "docs.jsonl"), "--quiet"])
    check(all("error" in r for r in bad), "JSONL without the text field: an error per line, in place")
    print("%d checks, %d failed" % (lib.CHECKS[0], len(lib.FAILURES)))
    return 1 if lib.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
