#!/usr/bin/env python3
"""The kogpt2 command line over bytes with a NUL in them (issue 32 item 2's class: a length
taken from a C string where the input has its own length), on the project's models/default:

- `kogpt2 tokenize --jsonl`: a line "ab\\u0000cd" is a 5-character string (Python's json
  module reads it so); cJSON's C string ended at the NUL and the tokens of "ab" came out as
  if they were the line's. Now that line gets {"error"} naming the NUL, the exit status is 1,
  and the other lines' tokens are those of `kogpt2 tokenize --json` on the same text.
- a Hugging Face cache whose refs/main holds "<40 hex digits>\\0junk": huggingface_hub reads
  the whole file as the revision (no snapshot has that name); kogpt2 took the digits before
  the NUL and loaded that snapshot. Now the repo id is not found there, exit 1 saying so.

Exit 0 pass, 1 fail, 77 skip (kogpt2 not built).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("KG_BUILD_DIR") or os.path.join(ROOT, "build")
KOGPT2 = os.path.join(BUILD, "kogpt2")
DEFAULT = os.path.join(ROOT, "models", "default")
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def kogpt2(*args, stdin=None, env=None):
    p = subprocess.run([KOGPT2] + list(args), input=stdin, capture_output=True, text=True,
                       timeout=120, env=env)
    return p.returncode, p.stdout, p.stderr


def test_jsonl():
    lines = ["안녕하세요", "ab\u0000cd", "오늘 날씨"]
    text = "".join(json.dumps(t) + "\n" for t in lines)
    check(len(json.loads(json.dumps(lines[1]))) == 5, "the reference reads 5 characters")
    rc, out, err = kogpt2("tokenize", "--jsonl", stdin=text)
    got = [json.loads(o) for o in out.splitlines()]
    check(rc == 1 and len(got) == 3, "tokenize --jsonl: exit %d, %d lines" % (rc, len(got)))
    if len(got) != 3:
        return
    check("error" in got[1] and "NUL" in got[1]["error"] and "line 2" in got[1]["error"],
          "the line with \\u0000: an error naming it, not the tokens of 'ab': %r" % got[1])
    for i in (0, 2):
        rc, one, _ = kogpt2("tokenize", "--json", lines[i])
        check(rc == 0 and got[i].get("tokens") == json.loads(one)["tokens"],
              "line %d: the tokens of tokenize --json (%r vs %r)" % (i + 1, got[i], one))
    print("tokenize --jsonl: %r" % got[1])


def test_hf_ref(tmp):
    h = "0123456789abcdef0123456789abcdef01234567"
    repo = os.path.join(tmp, "hub", "models--org--nul")
    snap = os.path.join(repo, "snapshots", h)
    os.makedirs(snap)
    os.makedirs(os.path.join(repo, "refs"))
    for name in os.listdir(DEFAULT):
        if name != "README.md":
            os.symlink(os.path.join(DEFAULT, name), os.path.join(snap, name))
    env = dict(os.environ, HF_HUB_CACHE=os.path.join(tmp, "hub"))
    with open(os.path.join(repo, "refs", "main"), "wb") as f:
        f.write(h.encode() + b"\n")
    rc, out, err = kogpt2("next", "--model", "org/nul", "--tokens", "5", "--top-k", "1", env=env)
    check(rc == 0, "a clean ref: the snapshot loads: %d %r" % (rc, err[-200:]))
    with open(os.path.join(repo, "refs", "main"), "wb") as f:
        f.write(h.encode() + b"\x00junk\n")
    rc, out, err = kogpt2("next", "--model", "org/nul", "--tokens", "5", "--top-k", "1", env=env)
    check(rc == 1 and "not in the Hugging Face cache" in err,
          "a ref with a NUL: no revision, exit 1: %d %r" % (
        rc, err.strip()[-200:]))
    print("ref with a NUL: exit %d: %s" % (rc, err.strip().splitlines()[-1][:120] if err else ""))


def main():
    if not os.path.isfile(KOGPT2):
        print("SKIP: %s was not built" % KOGPT2)
        return 77
    tmp = tempfile.mkdtemp(prefix="kg_cli_nul_")
    try:
        test_jsonl()
        test_hf_ref(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAIL: %d" % len(FAILURES) if FAILURES else "PASS")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
