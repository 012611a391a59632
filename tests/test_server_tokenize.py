#!/usr/bin/env python3
"""test_server_tokenize: /v1/tokenize and /v1/detokenize (split from test_server_e2e.py, issue
33 item 6): the round trip, U+0000 refused in every text (422), a byte token 0x00 refused by
detokenize, and a tokenizer shorter than the config's special ids refused at start-up. kogpt2d
on 127.0.0.1 with a small random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the
default model's 12,000-id SentencePiece tokenizer), one daemon for the file; the byte-token case
on models/default itself.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import shutil
import sys
import tempfile

import test_server_lib as lib
from test_server_lib import check, post


def test_tokenize(d):
    text = "안녕하세요, 한국어 GPT-2 모델입니다."
    j = post(d, "/v1/tokenize", {"text": text})
    check(len(j["tokens"]) > 3 and len(j["pieces"]) == len(j["tokens"]), "tokenize %r" % j)
    check(j["pieces"][0].startswith("\u2581"), "tokenize: first piece has the space mark")
    back = post(d, "/v1/detokenize", {"tokens": j["tokens"]})
    check(back["text"] == text, "detokenize round trip %r" % back)
    check(post(d, "/v1/tokenize", {"text": ""})["tokens"] == [], "tokenize empty text")
    return j["tokens"]


def test_nul(d):
    """U+0000 in a text is refused with 422, never cut at (issue 13: "ab\\u0000cd" tokenized
    as "ab"); an escaped backslash before u0000 is plain text."""
    for path, key in (("/v1/tokenize", "text"), ("/v1/next-token", "text"),
                      ("/v1/generate", "text"), ("/v1/completions", "prompt")):
        st, _, data = d.request("POST", path, b'{"%s": "ab\\u0000cd"}' % key.encode(),
                                {"Content-Type": "application/json"})
        check(st == 422 and b"u0000" in data, "%s with a NUL: %d %r" % (path, st, data[:120]))
    st, _, data = d.request("POST", "/v1/tokenize", b'{"text": "ab\\\\u0000cd"}',
                            {"Content-Type": "application/json"})
    pieces = json.loads(data).get("pieces", []) if st == 200 else []
    check(st == 200 and "u0000" in "".join(pieces), "a literal \\u0000 is text: %d %r" % (st, data[:120]))


def test_detokenize_nul():
    """A byte token 0x00 (SentencePiece byte fallback: the default model's tokenizer) makes
    /v1/detokenize refuse with 422 instead of cutting its text at the NUL."""
    model = lib.DEFAULT_MODEL
    if not os.path.isfile(lib.DEFAULT_SPM):
        lib.skip("%s is missing" % lib.DEFAULT_SPM)
    d = lib.Daemon(model, log=os.path.join(tempfile.mkdtemp(prefix="kg_nul_"), "d.log"))
    try:
        st, _, data = d.request("POST", "/v1/tokenize", {"text": "a\x01"})
        out = json.loads(data)
        one = out["tokens"][out["pieces"].index("<0x01>")]
        st, _, data = d.request("POST", "/v1/detokenize", {"tokens": [one - 1, one]})
        check(st == 422 and b"NUL" in data, "detokenize of <0x00>: %d %r" % (st, data[:160]))
        st, _, data = d.request("POST", "/v1/detokenize", {"tokens": [one]})
        check(st == 200 and json.loads(data)["text"] == "\x01", "detokenize of <0x01>: %r" % data)
    finally:
        d.stop()


def test_short_tokenizer(model_dir):
    """A tokenizer.json with fewer ids than config.json's special ids fails at start-up with a
    line naming the config field (issue 13: "token id 2 is outside the vocabulary (0..1)")."""
    tmp = tempfile.mkdtemp(prefix="kg_shorttok_")
    copy = os.path.join(tmp, "model")
    shutil.copytree(model_dir, copy)
    os.remove(os.path.join(copy, os.path.basename(lib.DEFAULT_SPM)))
    # six ids (the specials alone, <unk> is 5), and an eos_token_id past them
    lib.small_tokenizer_json(os.path.join(copy, "tokenizer.json"), [])
    cfg_path = os.path.join(copy, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    eos = cfg["eos_token_id"] = 9
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    p = lib.kogpt2d_run(copy, "--port", "0")
    check(p.returncode == 1 and "eos_token_id %s" % eos in p.stderr and "tokenizer" in p.stderr,
          "a tokenizer shorter than the config's ids: exit %d, %r" % (p.returncode, p.stderr[-300:]))


def main():
    tmp, model_dir, d = lib.start("kg_tokenize_")
    return lib.run_tests([("tokenize", lambda: test_tokenize(d)), ("NUL", lambda: test_nul(d)),
                          ("detokenize NUL", test_detokenize_nul),
                          ("short tokenizer", lambda: test_short_tokenizer(model_dir))],
                         daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
