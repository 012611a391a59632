#!/usr/bin/env python3
"""test_server_logprobs.py - the top logprob lists' tokens (issue 36 item 4) on models/default.

A byte-fallback token (SentencePiece's <0xAB> pieces) among the candidates shows as what it
adds to the text when that is UTF-8 alone, else as OpenAI's "bytes:\\xab", never as its piece:
  - /v1/completions' top_logprobs keys and /v1/generate's top lists (with their "bytes") after a
    prompt that ends inside a character (its next candidates are continuation bytes);
  - TGI's top_tokens on a prompt of rare hanja (its candidates are byte tokens);
  - chat's top_logprobs: "token" the candidate's text, "bytes" its UTF-8 bytes.
The expected form of every candidate comes from libsentencepiece's Python binding on the model's
own .model (is_byte, id_to_piece), not from the daemon.
Exit 0 pass, 1 fail, 77 skip (no kogpt2d, no models/default, no sentencepiece module).
"""
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_server_lib as lib  # noqa: E402

MODEL = os.path.join(HERE, "..", "models", "default")
check = lib.check


def expected(sp, i):
    """(text, bytes) a candidate id must show: OpenAI's bytes form for a byte piece that is not
    a character alone, the piece's text (▁ as a space) otherwise, "" for a control piece."""
    if sp.is_byte(i):
        b = int(sp.id_to_piece(i)[3:5], 16)
        return (chr(b) if b < 0x80 else "bytes:\\x%02x" % b), [b]
    if sp.is_control(i):
        return "", []
    t = sp.id_to_piece(i).replace("\u2581", " ")
    return t, list(t.encode())


def test_logprobs():
    try:
        import sentencepiece
    except ImportError:
        lib.skip("no sentencepiece Python module (python3-sentencepiece)")
    spm = glob.glob(os.path.join(MODEL, "*.model"))
    if not spm:
        lib.skip("no models/default")
    sp = sentencepiece.SentencePieceProcessor(model_file=spm[0])
    raw = re.compile(r"^<0x[0-9A-Fa-f]{2}>$")
    d = lib.Daemon(MODEL, "--quiet")
    try:
        # a prompt ending inside a character: "오늘" and the lead byte of "진" (0xEC)
        prompt = sp.encode("오늘") + [sp.piece_to_id("<0xEC>")]
        st, g = d.json("POST", "/v1/generate", {"tokens": prompt, "max_tokens": 2, "logprobs": 5,
                                                 "temperature": 0})
        tops = [c for t in g.get("logprobs", []) for c in t["top"]]
        n_bytes = sum(sp.is_byte(c["id"]) for c in tops)
        check(st == 200 and n_bytes >= 5, "/v1/generate: byte tokens among the candidates (%d)" % n_bytes)
        bad = [(c["id"], c["text"], c.get("bytes")) for c in tops
               if (c["text"], c.get("bytes")) != expected(sp, c["id"])]
        check(not bad, "/v1/generate's top lists: each candidate's text and bytes as sentencepiece "
              "has them (bytes:\\xNN for a byte piece): %r" % bad[:5])
        st, c = d.json("POST", "/v1/completions", {"prompt": prompt, "max_tokens": 2, "logprobs": 5,
                                                    "temperature": 0})
        keys = [k for tl in c["choices"][0]["logprobs"]["top_logprobs"] for k in tl]
        want = [expected(sp, x["id"])[0] for t in g["logprobs"] for x in t["top"]]
        check(st == 200 and keys == want and not any(raw.match(k) for k in keys),
              "/v1/completions' top_logprobs keys: %r (want %r)" % (keys, want))
        # TGI: rare hanja, whose continuations are byte tokens
        st, t = d.json("POST", "/generate", {"inputs": "漢字 漢字", "parameters": {
            "max_new_tokens": 3, "top_n_tokens": 10, "details": True, "do_sample": False}})
        tt = [x for step in t["details"]["top_tokens"] for x in step]
        n_bytes = sum(sp.is_byte(x["id"]) for x in tt)
        bad = [(x["id"], x["text"]) for x in tt if x["text"] != expected(sp, x["id"])[0]]
        check(st == 200 and n_bytes >= 5 and not bad and not any(raw.match(x["text"]) for x in tt),
              "TGI's top_tokens: %d byte tokens, each as sentencepiece has it: %r" % (n_bytes, bad[:5]))
        # chat: the candidates' token and bytes
        st, ch = d.json("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "오늘 날씨 어때요?"}], "max_tokens": 3,
            "logprobs": True, "top_logprobs": 5, "temperature": 0})
        content = ch["choices"][0]["logprobs"]["content"]
        bad = []
        for e in content:
            for x in e["top_logprobs"]:
                if raw.match(x["token"]) or (x["token"] and not x["token"].startswith("bytes:") and
                                             x["bytes"] != list(x["token"].encode())):
                    bad.append(x)
        check(st == 200 and content and not bad, "chat's top_logprobs: token and bytes agree: %r" % bad[:3])
    finally:
        rc = d.stop()
    check(rc == 0, "kogpt2d exits 0 on SIGTERM (rc %r)" % rc)
    lib.check_log_clean(d.log_path)


def main():
    return lib.run_tests([("byte-fallback candidates in the top logprob lists", test_logprobs)])


if __name__ == "__main__":
    sys.exit(main())
