#!/usr/bin/env python3
"""test_server_completions: OpenAI's /v1/completions (split from test_server_e2e.py, issue 33
item 6): the object's shape, logprobs and text_offset, echo, token-id prompts, streams and
include_usage, prompt arrays and n, penalties and logit_bias, and scoring a prompt (echo +
logprobs + max_tokens 0). kogpt2d on 127.0.0.1 with a small random model (lib.make_model: 2
layers, 64 wide, n_ctx 128, the default model's 12,000-id SentencePiece tokenizer), one daemon
for the file.
Exit 0 pass, 1 fail, 77 skip."""
import json
import sys

import test_server_lib as lib
from test_server_lib import check, expect_error, post, stream


def test_completions(d):
    body = {"model": "model", "prompt": "한국어 모델", "max_tokens": 10, "seed": 7,
            "temperature": 0.9, "logprobs": 2}
    a = post(d, "/v1/completions", body)
    ch = a["choices"][0]
    check(a["object"] == "text_completion" and a["id"].startswith("cmpl-") and
          a["model"] == "model" and ch["index"] == 0 and
          ch["finish_reason"] in ("length", "stop") and
          a["usage"]["total_tokens"] == a["usage"]["prompt_tokens"] +
          a["usage"]["completion_tokens"], "completions shape %r" % a)
    lp = ch["logprobs"]
    n = len(lp["tokens"])
    check(n == a["usage"]["completion_tokens"] and len(lp["token_logprobs"]) == n and
          len(lp["top_logprobs"]) == n and len(lp["text_offset"]) == n and
          "".join(lp["tokens"]) == ch["text"] and
          all(lp["text_offset"][i] <= lp["text_offset"][i + 1] for i in range(n - 1)) and
          all(1 <= len(t) <= 2 for t in lp["top_logprobs"]), "completions logprobs %r" % lp)
    b = post(d, "/v1/completions", body)
    check(b["choices"][0]["text"] == ch["text"], "completions: same seed, same text")
    e = post(d, "/v1/completions", dict(body, echo=True, logprobs=None))
    check(e["choices"][0]["text"] == "한국어 모델" + ch["text"], "completions echo %r" % e)
    t = post(d, "/v1/completions", dict(body, prompt=[[8702, 7801]], logprobs=None))
    check(t["usage"]["prompt_tokens"] == 2, "completions with a token-id prompt")
    ev = stream(d, "/v1/completions", dict(body, logprobs=None))
    check(ev and ev[-1] == "[DONE]", "completions stream ends with [DONE]")
    chunks = [json.loads(x) for x in ev[:-1]]
    check(all(c["object"] == "text_completion" for c in chunks) and
          "".join(c["choices"][0]["text"] for c in chunks) == ch["text"] and
          chunks[-1]["choices"][0]["finish_reason"] == ch["finish_reason"],
          "completions stream concatenates to the non-streamed text")
    st = post(d, "/v1/completions", dict(body, stop="\n", logprobs=None))
    check("\n" not in st["choices"][0]["text"], "completions stop as a string")
    # text_offset counts characters (as OpenAI and vLLM do), not UTF-8 bytes
    full = e["choices"][0]["text"]
    off = post(d, "/v1/completions", dict(body, echo=True))["choices"][0]["logprobs"]
    check(all(full[o:].startswith(tok) for o, tok in zip(off["text_offset"], off["tokens"])),
          "text_offset indexes the text by characters: %r" % off["text_offset"])
    # a batch of prompts and n samples: one choice each, in index order, as if asked alone
    batch = post(d, "/v1/completions", dict(body, prompt=["한국어 모델", [8702, 7801]],
                                             logprobs=None))
    check([c["index"] for c in batch["choices"]] == [0, 1] and
          batch["choices"][0]["text"] == ch["text"] and
          batch["usage"]["prompt_tokens"] == a["usage"]["prompt_tokens"] + 2,
          "prompt array: a choice per prompt, the same as alone %r" % batch)
    many = post(d, "/v1/completions", dict(body, n=3, logprobs=None))
    texts = [c["text"] for c in many["choices"]]
    check([c["index"] for c in many["choices"]] == [0, 1, 2] and texts[0] == ch["text"] and
          len(set(texts)) > 1, "n = 3: seeds seed, seed + 1, seed + 2: %r" % texts)
    ev = stream(d, "/v1/completions", dict(body, logprobs=None, n=2,
                                           stream_options={"include_usage": True}))
    usage = json.loads(ev[-2])
    per = ["".join(json.loads(x)["choices"][0]["text"] for x in ev[:-2]
                   if json.loads(x)["choices"][0]["index"] == i) for i in (0, 1)]
    check(ev[-1] == "[DONE]" and usage["choices"] == [] and
          usage["usage"]["completion_tokens"] == sum(c["usage"]["completion_tokens"]
                                                     for c in (a, a)) and
          per[0] == ch["text"], "stream with include_usage: interleaved choices, then usage")
    # penalties act: a greedy generation that repeats itself stops repeating
    g = dict(body, temperature=0, max_tokens=24, logprobs=None, prompt="이 책은")
    plain = post(d, "/v1/completions", g)["choices"][0]["text"]
    rep = post(d, "/v1/completions", dict(g, repetition_penalty=5.0))["choices"][0]["text"]
    pres = post(d, "/v1/completions", dict(g, presence_penalty=2.0,
                                            frequency_penalty=2.0))["choices"][0]["text"]
    check(rep != plain and pres != plain, "penalties change a greedy text: %r %r %r"
          % (plain, rep, pres))
    first = post(d, "/v1/generate", {"text": "이 책은", "max_tokens": 1, "temperature": 0})
    banned = first["tokens"][0]
    nb = post(d, "/v1/generate", {"text": "이 책은", "max_tokens": 8, "temperature": 0,
                                   "logit_bias": {str(banned): -100}})
    check(banned not in nb["tokens"], "logit_bias -100 bans token %d: %r" % (banned, nb["tokens"]))


def test_prompt_scoring(d):
    """echo + logprobs scores the prompt: a greedy generation's own logprobs come back as the
    scores of the same tokens when they are sent as a prompt (1e-4: batched vs one-row sums)."""
    ids = post(d, "/v1/tokenize", {"text": "한국어 모델은"})["tokens"]
    g = post(d, "/v1/generate", {"tokens": ids, "max_tokens": 3, "temperature": 0,
                                 "logprobs": 1, "ignore_eos": True})
    full = ids + g["tokens"]
    sc = post(d, "/v1/completions", {"prompt": full, "echo": True, "logprobs": 1,
                                     "max_tokens": 0})
    lp = sc["choices"][0]["logprobs"]
    want = [t["logprob"] for t in g["logprobs"]]
    got = lp["token_logprobs"][-3:]
    check(len(lp["tokens"]) == len(full) and lp["token_logprobs"][0] is None and
          lp["top_logprobs"][0] is None and all(x <= 0 for x in lp["token_logprobs"][1:]) and
          all(len(t) == 1 for t in lp["top_logprobs"][1:]) and
          sc["usage"]["completion_tokens"] == 0 and
          "".join(lp["tokens"]) == sc["choices"][0]["text"] and
          all(abs(a - b) <= 1e-4 for a, b in zip(got, want)),
          "prompt scoring: %r vs generated %r" % (got, want))
    # greedy: each generated token was the best candidate, so its score is the top logprob
    check(all(abs(list(t.values())[0] - x) <= 1e-4
              for t, x in zip(lp["top_logprobs"][-3:], got)), "scored top logprobs")
    both = post(d, "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 0,
                                       "max_tokens": 2, "temperature": 0})
    n = len(both["choices"][0]["logprobs"]["tokens"])
    check(n == len(ids) + 2, "echo + logprobs + 2 generated: %d entries" % n)
    expect_error(d, "POST", "/v1/completions", {"prompt": ids, "echo": True, "logprobs": 1,
                 "stream": True}, 422, "scoring is not streamed", param="stream")
    expect_error(d, "POST", "/v1/completions", {"prompt": ids, "max_tokens": 0}, 422,
                 "max_tokens 0 without scoring", param="max_tokens")


def main():
    tmp, model_dir, d = lib.start("kg_completions_", "--max-batch", "8")
    return lib.run_tests([("completions", lambda: test_completions(d)),
                          ("prompt scoring", lambda: test_prompt_scoring(d))],
                         daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
