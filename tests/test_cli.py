#!/usr/bin/env python3
"""test_cli: the kogpt2 command line on the project's default model (issues 26, 29).

    test_cli.py generate      streamed text = --json text, --seed determinism, stop strings,
                              --max-tokens and n_ctx, the penalties, flag ranges
    test_cli.py server        kogpt2 generate = kogpt2d's /v1/generate for the same prompt and
                              flags: greedy, and seeded sampling with penalties and stops
    test_cli.py progress      kogpt2 convert's progress: a line per 10 % off a terminal, one
                              redrawn line with an ETA on one (a pty)
    test_cli.py version       --version on kogpt2 and every subcommand
    test_cli.py tokenize      tokenize/detokenize default to the default model's tokenizer;
                              JSON says "tokens" (as /v1/tokenize); plain pieces as JSON strings;
                              ids, pieces and text equal libsentencepiece's
    test_cli.py errors        every usage error says what was wrong on its first line
    test_cli.py next          next's plain output: each candidate's text as a JSON string

Each mode exits 0 (pass), 1 (a check failed: each is printed) or 77 (skip: not built)."""
import json
import os
import pty
import re
import subprocess
import sys
import tempfile

import test_server_lib as lib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "models", "default")
PROMPT = "오늘 날씨는"
check = lib.check


def kogpt2():
    build = os.environ.get("KG_BUILD_DIR") or os.path.join(ROOT, "build")
    path = os.path.join(build, "kogpt2")
    if not os.path.isfile(path):
        print("SKIP: %s was not built" % path)
        sys.exit(lib.SKIP)
    return path


def run(*args, stdin=None):
    """kogpt2 ARGS on the CPU: (rc, stdout, stderr) as text (stdout decoded strictly: the
    stream must be UTF-8 whole characters)."""
    r = subprocess.run([kogpt2()] + list(args), capture_output=True, input=stdin, timeout=120)
    return r.returncode, r.stdout.decode("utf-8"), r.stderr.decode("utf-8", "replace")


def generate(*args):
    """kogpt2 generate on the default model, plain and --json: (stdout, the JSON object)."""
    base = ["generate", "--device", "cpu", "--threads", "2"] + list(args)
    rc, out, err = run(*base)
    check(rc == 0, "generate %s: exit %d: %s" % (" ".join(args), rc, err[-300:]))
    rc, js, err = run(*(base + ["--json"]))
    check(rc == 0, "generate --json %s: exit %d: %s" % (" ".join(args), rc, err[-300:]))
    return out, json.loads(js) if rc == 0 else {}


def last_line(err):
    lines = err.strip().split("\n")
    return lines[-1] if lines else ""


# --- generate ----------------------------------------------------------------------------


def test_generate():
    # the stream is the text: plain stdout = the --json text plus one newline
    for seed in ("1", "7", "42"):
        out, j = generate("--text", PROMPT, "--seed", seed, "--max-tokens", "40")
        check(out == j.get("text", "") + "\n",
              "seed %s: streamed %r != --json text %r" % (seed, out, j.get("text")))
        check(j.get("finish_reason") in ("length", "eos"), "finish_reason %r" % j)
        check(j.get("generated_tokens") == len(j.get("tokens", [])) and
              j.get("usage") == {"prompt_tokens": j.get("prompt_tokens"),
                                 "completion_tokens": j.get("generated_tokens"),
                                 "total_tokens": j.get("prompt_tokens", 0) +
                                 j.get("generated_tokens", 0)},
              "token counts and usage agree: %r" % j)
        check(j.get("seed") == int(seed), "the seed is reported: %r" % j.get("seed"))
    # streamed: the first piece is on stdout while the run goes on (300 tokens take seconds)
    p = subprocess.Popen([kogpt2(), "generate", "--device", "cpu", "--text", PROMPT, "--seed",
                          "1", "--max-tokens", "300", "--ignore-eos"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(1)
    running = p.poll() is None
    rest, err = p.communicate(timeout=300)
    check(first and running, "the text streams: a byte came while generating (%r, running %s)" %
          (first, running))
    check(p.returncode == 0 and "300 tokens generated" in err.decode(),
          "300 tokens: %r" % err.decode()[-200:])
    # the same seed, the same text; another seed, (almost surely) another text
    a = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos")[1]
    b = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos")[1]
    c = generate("--text", PROMPT, "--seed", "6", "--max-tokens", "48", "--ignore-eos")[1]
    check(a.get("tokens") and a.get("tokens") == b.get("tokens") and a["text"] == b["text"],
          "--seed 5 twice: the same tokens")
    check(a.get("tokens") != c.get("tokens"), "--seed 5 and 6: different tokens")
    check(a.get("generated_tokens") == 48 and a.get("finish_reason") == "length",
          "--ignore-eos --max-tokens 48: 48 tokens, length: %r" % a.get("finish_reason"))
    # without a seed each run draws its own, and says which on stderr; that seed replays it
    rc, out, err = run("generate", "--device", "cpu", "--text", PROMPT, "--max-tokens", "24",
                       "--ignore-eos")
    m = re.search(r"seed (\d+)$", last_line(err))
    check(rc == 0 and m, "a random seed is shown on stderr: %r" % last_line(err))
    if m:
        again = generate("--text", PROMPT, "--max-tokens", "24", "--ignore-eos", "--seed",
                         m.group(1))[0]
        check(again == out, "the shown seed replays the run: %r vs %r" % (again, out))
    # the last stderr line: counts and tokens/s
    check(re.fullmatch(r"kogpt2 generate: \d+ prompt tokens in \d+ ms; 24 tokens generated in "
                       r"[\d.]+ s \([\d.]+ tokens/s\); finish_reason length; seed \d+",
                       last_line(err)), "the summary line: %r" % last_line(err))

    # greedy is greedy: temperature 0 twice, any seed
    g1 = generate("--text", PROMPT, "--temperature", "0", "--seed", "1", "--max-tokens", "30")[1]
    g2 = generate("--text", PROMPT, "--temperature", "0", "--seed", "2", "--max-tokens", "30")[1]
    check(g1.get("tokens") == g2.get("tokens"), "temperature 0 ignores the seed")

    # stop strings: the text before the first match, nothing after; finish_reason stop
    full = a["text"]
    picks = []
    for i in range(len(full) // 3, len(full) - 2):
        s = full[i:i + 2]
        if s.strip() and full.index(s) == i:  # a 2-character stop first found at i
            picks.append(s)
        if len(picks) == 3:
            break
    check(len(picks) == 3, "stop candidates in %r" % full)
    for s in picks:
        out, j = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos",
                          "--stop", s)
        want = full[:full.index(s)]
        check(j.get("text") == want and j.get("finish_reason") == "stop",
              "--stop %r: %r (%s), want %r" % (s, j.get("text"), j.get("finish_reason"), want))
        check(out == want + "\n", "--stop %r streamed %r, want %r" % (s, out, want))
    # the earliest of several stops wins; a stop that never completes holds nothing back
    out, j = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos",
                      "--stop", picks[2], "--stop", picks[0], "--stop", full[-1] + "\x01")
    check(j.get("text") == full[:full.index(picks[0])], "several stops: the earliest wins")
    out, j = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos",
                      "--stop", full[-1] + "\x01")
    check(j.get("text") == full and out == full + "\n" and j.get("finish_reason") == "length",
          "a stop whose start ends the text: all of it, at the end")

    # penalties change the draw; the same flags draw the same again
    p1 = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos",
                  "--repetition-penalty", "1.3", "--frequency-penalty", "0.5",
                  "--presence-penalty", "0.5", "--top-k", "40", "--top-p", "0.9")
    p2 = generate("--text", PROMPT, "--seed", "5", "--max-tokens", "48", "--ignore-eos",
                  "--repetition-penalty", "1.3", "--frequency-penalty", "0.5",
                  "--presence-penalty", "0.5", "--top-k", "40", "--top-p", "0.9")
    check(p1[1].get("tokens") == p2[1].get("tokens") and p1[0] == p1[1].get("text", "") + "\n",
          "penalties: deterministic, streamed = --json")
    check(p1[1].get("tokens") != a.get("tokens"), "penalties change the draw")

    # n_ctx (512): a prompt of 510 ids leaves room to feed 2 more, so 3 tokens come out
    ids = ",".join(["1000"] * 510)
    out, j = generate("--tokens", ids, "--max-tokens", "512", "--ignore-eos", "--seed", "3")
    check(j.get("generated_tokens") == 3 and j.get("finish_reason") == "length",
          "at n_ctx: 3 tokens after 510, length: %r" % {k: j.get(k) for k in
                                                        ("generated_tokens", "finish_reason")})
    # end-of-text ends it (greedy on this prompt reaches it within 64 tokens) unless ignored
    e = generate("--text", "안녕하세요", "--temperature", "0", "--max-tokens", "64")[1]
    check(e.get("finish_reason") == "eos" and 2 not in e.get("tokens", [2]),
          "greedy '안녕하세요' ends at </s>, which is not a token of the answer: %r" % e)
    f = generate("--text", "안녕하세요", "--temperature", "0", "--max-tokens", "64",
                 "--ignore-eos")[1]
    check(f.get("finish_reason") == "length" and f.get("generated_tokens") == 64,
          "--ignore-eos goes on to --max-tokens")


# --- greedy and seeded equality with kogpt2d ----------------------------------------------


def test_server():
    lib.kogpt2d_path()
    kogpt2()
    tmp = tempfile.mkdtemp(prefix="kg_cli_")
    device = os.environ.get("KG_TEST_DEVICE", "auto")
    d = lib.Daemon(MODEL, log=os.path.join(tmp, "kogpt2d.log"))
    cases = [
        ({"temperature": 0, "max_tokens": 40}, ["--temperature", "0", "--max-tokens", "40"]),
        ({"temperature": 0, "max_tokens": 64, "ignore_eos": True},
         ["--temperature", "0", "--max-tokens", "64", "--ignore-eos"]),
        ({"seed": 11, "max_tokens": 48, "top_k": 50, "top_p": 0.95, "temperature": 0.8,
          "repetition_penalty": 1.2, "frequency_penalty": 0.3, "presence_penalty": 0.2,
          "ignore_eos": True},
         ["--seed", "11", "--max-tokens", "48", "--top-k", "50", "--top-p", "0.95",
          "--temperature", "0.8", "--repetition-penalty", "1.2", "--frequency-penalty", "0.3",
          "--presence-penalty", "0.2", "--ignore-eos"]),
        ({"seed": 3, "max_tokens": 60, "stop": ["다.", "요"]},
         ["--seed", "3", "--max-tokens", "60", "--stop", "다.", "--stop", "요"]),
    ]
    try:
        for prompt in (PROMPT, "여러분 2019년 수고하셨습니다. 올해에는"):
            for body, flags in cases:
                status, srv = d.json("POST", "/v1/generate", dict(body, text=prompt))
                rc, out, err = run("generate", "--device", device, "--text", prompt, "--json",
                                   *flags)
                cli = json.loads(out) if rc == 0 else {}
                what = "%r %s" % (prompt, " ".join(flags))
                check(status == 200 and rc == 0, "%s: HTTP %d, exit %d %s" % (what, status, rc,
                                                                                err[-200:]))
                for k in ("text", "tokens", "finish_reason", "prompt", "prompt_tokens",
                          "generated_tokens"):
                    check(cli.get(k) == srv.get(k),
                          "%s: %s: CLI %r, kogpt2d %r" % (what, k, cli.get(k), srv.get(k)))
                print("%s -> %s %d tokens: %r" % (what, cli.get("finish_reason"),
                                                   len(cli.get("tokens", [])),
                                                   cli.get("text", "")[:40]))
        # a prompt ending inside a character (issue 36): "오늘" and the first one or two of the
        # three bytes of "진"; both start their text stream and UTF-8 mask from those bytes
        # (tok_stream_prime), so the text goes on with the character, alike
        ids = d.json("POST", "/v1/tokenize", {"text": "오늘"})[1]["tokens"]
        jin = [0xEC, 0xA7]
        pieces = [s["piece"] for s in d.json("POST", "/v1/score", {"tokens": [2] + [b + 3 for b in jin]})[1]["scores"][1:]]
        check(pieces == ["<0xEC>", "<0xA7>"], "the byte tokens of 진 are <0xEC> <0xA7>: %r" % pieces)
        for k in (1, 2):
            tokens = ids + [b + 3 for b in jin[:k]]
            for body, flags in cases[:1] + cases[2:3]:
                status, srv = d.json("POST", "/v1/generate", dict(body, tokens=tokens))
                rc, out, err = run("generate", "--device", device, "--json", "--tokens",
                                   ",".join(map(str, tokens)), *flags)
                cli = json.loads(out) if rc == 0 else {}
                what = "%r + %d byte(s) of 진 %s" % ("오늘", k, " ".join(flags))
                check(status == 200 and rc == 0 and cli.get("text") == srv.get("text") and
                      cli.get("tokens") == srv.get("tokens") and
                      not cli.get("text", "\ufffd").startswith("\ufffd"),
                      "%s: CLI %r, kogpt2d %r (%s)" % (what, cli.get("text", "")[:30],
                                                       srv.get("text", "")[:30], err[-200:]))
                print("%s -> %r" % (what, cli.get("text", "")[:30]))
    finally:
        rc = d.stop()
        check(rc == 0, "kogpt2d exits 0 (rc %r)" % rc)


# --- convert's progress -------------------------------------------------------------------

LINE = re.compile(r"convert: +(\d+)% ([\d.]+)/([\d.]+) MB, [\d.]+ MB/s, ETA \d+ s")


def test_progress():
    kogpt2()
    tmp = tempfile.mkdtemp(prefix="kg_cli_")
    # off a terminal: plain lines, one per 10 % at most, rising, the last one 100 %
    for dtype in ("f32", "q8_0", "auto"):
        out = os.path.join(tmp, "off_" + dtype)
        rc, _, err = run("convert", "--model", MODEL, "--out", out, "--dtype", dtype)
        check(rc == 0, "convert --dtype %s: exit %d %s" % (dtype, rc, err[-300:]))
        lines = [l for l in err.split("\n") if l]
        pcts = []
        for l in lines:
            m = LINE.fullmatch(l)
            check(m, "--dtype %s: a progress line: %r" % (dtype, l))
            if m:
                pcts.append(int(m.group(1)))
        check("\r" not in err and "\033" not in err, "no redrawing off a terminal: %r" % err)
        check(pcts and pcts[-1] == 100 and pcts == sorted(pcts) and len(pcts) <= 11,
              "--dtype %s: rising to 100 %%, at most 11 lines: %r" % (dtype, pcts))
        print("--dtype %s off a terminal: %d lines, %s" % (dtype, len(lines), pcts))
    # a line per 10 %: every step of 10 is passed by a line (the converted tensors count)
    m = LINE.fullmatch([l for l in run("convert", "--model", MODEL, "--out",
                                       os.path.join(tmp, "f32b"), "--dtype", "f32")[2]
                        .split("\n") if l][-1])
    total = float(m.group(3)) if m else 0
    size = os.path.getsize(os.path.join(tmp, "off_f32", "model.safetensors")) / 1e6
    check(m and abs(total - 2 * size) < 0.01 * size,
          "--dtype f32 from f16: converted + written bytes (%.1f MB) = 2 x the file (%.1f MB)" %
          (total, size))
    # on a terminal: one line redrawn (\r ... ESC[K), ending in a newline after 100 %
    master, slave = pty.openpty()
    p = subprocess.Popen([kogpt2(), "convert", "--model", MODEL, "--out",
                          os.path.join(tmp, "tty"), "--dtype", "f32"],
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    data = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    os.close(master)
    check(p.wait(60) == 0, "convert on a terminal exits 0")
    text = data.decode("utf-8", "replace")
    draws = [s for s in text.split("\r") if s.strip()]
    check(text.startswith("\r") and text.endswith("\n") and text.count("\n") == 1,
          "one redrawn line on a terminal: %r" % text)
    check(draws and "100%" in draws[-1] and all("ETA" in s for s in draws),
          "each draw has an ETA, the last says 100 %%: %r" % draws)
    print("on a terminal: %d draws, last %r" % (len(draws), draws[-1] if draws else None))


# --- --version ----------------------------------------------------------------------------


def test_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(kogpt2 VERSION ([\d.]+)", f.read()).group(1)
    want = re.compile(r"kogpt2 %s \(commit ([0-9a-f]{7,40}|unknown)\)\n" % re.escape(version))
    outs = set()
    for args in (["--version"], ["next", "--version"], ["generate", "--version"],
                 ["tokenize", "--version"], ["detokenize", "--version"],
                 ["convert", "--version"], ["next", "--text", "x", "--version"]):
        rc, out, err = run(*args)
        check(rc == 0 and want.fullmatch(out) and not err,
              "kogpt2 %s: exit %d, %r %r" % (" ".join(args), rc, out, err))
        outs.add(out)
    check(len(outs) == 1, "one version everywhere: %r" % outs)
    print("kogpt2 --version: %r" % outs.pop())


# --- tokenize / detokenize ----------------------------------------------------------------


def test_tokenize():
    text = "안녕하세요.\n\"따옴표\"\t탭 \\ 끝"
    rc, default, err = run("tokenize", "--json", text)
    check(rc == 0, "tokenize with no --tokenizer: exit %d %s" % (rc, err))
    rc, given, err = run("tokenize", "--tokenizer", MODEL, "--json", text)
    check(rc == 0 and default == given, "the default is models/default's tokenizer")
    j = json.loads(default) if default else {}
    check(sorted(j) == ["pieces", "tokens"], "--json says tokens and pieces: %r" % sorted(j))
    # plain: id TAB piece-as-JSON-string; each line reads back to the --json pieces
    rc, plain, err = run("tokenize", text)
    rows = [l.split("\t", 1) for l in plain.rstrip("\n").split("\n")]
    check(rc == 0 and len(rows) == len(j.get("tokens", [])), "a line per token: %r" % plain)
    check([int(r[0]) for r in rows] == j.get("tokens") and
          [json.loads(r[1]) for r in rows] == j.get("pieces"),
          "plain lines read back (ids, JSON pieces): %r" % plain)
    # --jsonl and detokenize
    rc, out, err = run("tokenize", "--jsonl", stdin=b'"\\uc548\\ub155"\n"a"\n')
    check(rc == 0 and [sorted(json.loads(l)) for l in out.split("\n") if l] ==
          [["pieces", "tokens"]] * 2, "--jsonl: tokens and pieces per line: %r" % out)
    ids = ",".join(map(str, j.get("tokens", [])))
    rc, out, err = run("detokenize", "--json", ids)
    check(rc == 0 and json.loads(out).get("text") == text,
          "detokenize with no --tokenizer reads back the text: %r" % out)
    # detokenize's ids: commas and/or blanks, as words, on stdin (issue 32 item 8)
    toks = j.get("tokens", [])
    for args, stdin in ((toks, None), ([", ".join(map(str, toks))], None),
                        ([], (" ".join(map(str, toks)) + "\n").encode())):
        rc, out, err = run("detokenize", "--json", *map(str, args), stdin=stdin)
        check(rc == 0 and json.loads(out).get("text") == text,
              "detokenize %r (stdin %r): the same text: %r %s" % (args, stdin, out, err))
    # the ids and pieces are libsentencepiece's (python3-sentencepiece, the reference) for the
    # strings tokenizer.cmake's test_tok_cli_* check on KoGPT2 v2's tokenizer
    try:
        import sentencepiece
    except ImportError:
        lib.skip("no python3-sentencepiece (the reference tokenizer): ids unchecked")
    sp = sentencepiece.SentencePieceProcessor(model_file=lib.DEFAULT_SPM)
    for t in ("안녕하세요. 한국어 GPT-2 입니다.😤:)l^o", text):
        rc, out, err = run("tokenize", "--json", t)
        got = json.loads(out) if rc == 0 else {}
        check(got == {"tokens": sp.encode(t), "pieces": sp.encode(t, out_type=str)},
              "tokenize %r: %r, libsentencepiece: %r" % (t, got, sp.encode(t)))
    lines = ["안녕", "", "  두 칸"]
    rc, out, err = run("tokenize", "--jsonl",
                       stdin="".join(json.dumps(x) + "\n" for x in lines).encode())
    want = [{"tokens": sp.encode(x), "pieces": sp.encode(x, out_type=str)} for x in lines]
    check(rc == 0 and [json.loads(x) for x in out.split("\n") if x] == want,
          "--jsonl: libsentencepiece's ids per line: %r vs %r" % (out, want))
    ids = sp.encode("안녕하세요.😤:)")
    rc, out, err = run("detokenize", "--json", ",".join(map(str, ids)))
    check(rc == 0 and json.loads(out).get("text") == sp.decode(ids),
          "detokenize %r: %r, libsentencepiece: %r" % (ids, out, sp.decode(ids)))


# --- usage errors -------------------------------------------------------------------------

ERRORS = [  # args, exit status, what the first stderr line says
    ([], 2, "kogpt2: no command given"),
    (["frobnicate"], 2, "kogpt2: unknown command 'frobnicate'"),
    (["next"], 2, "kogpt2 next: no prompt: give --text TEXT or --tokens IDS"),
    (["next", "--tokens", "1", "--top-k", "0"], 2,
     "kogpt2 next: --top-k must be an integer in 1..12000, got '0'"),
    (["next", "--tokens", "1", "--top-k", "ten"], 2, "kogpt2 next: --top-k must be an integer"),
    (["next", "--tokens", "1,x"], 2, "kogpt2 next: --tokens: not a list of token ids: '1,x'"),
    # a list of ids has commas between them, one id each (issue 32 item 8)
    (["next", "--tokens", "1 2"], 2, "kogpt2 next: --tokens: not a list of token ids: '1 2'"),
    (["next", "--tokens", "1,,2"], 2, "kogpt2 next: --tokens: not a list of token ids: '1,,2'"),
    (["next", "--tokens", ",1"], 2, "kogpt2 next: --tokens: not a list of token ids: ',1'"),
    (["generate", "--tokens", "1,2,"], 2,
     "kogpt2 generate: --tokens: not a list of token ids: '1,2,'"),
    (["generate", "--tokens", "1\t2"], 2, "kogpt2 generate: --tokens: not a list of token ids"),
    (["next", "--text", "a", "--tokens", "1"], 2, "kogpt2 next: give --text or --tokens, not both"),
    (["next", "--tokens", "5,-1"], 2, "kogpt2 next: --tokens: -1 is not a token id of the model"),
    (["next", "--tokens", "1", "--threads", "-1"], 2, "kogpt2 next: --threads must be"),
    (["next", "--tokens", "1", "--device", "gpu"], 2, "kogpt2 next: --device must be"),
    (["next", "--tokens", "1", "--dtype", "q9"], 2, "kogpt2 next: --dtype: unknown dtype 'q9'"),
    (["next", "--tokens", "1", "--precision", "f16"], 2, "kogpt2 next: --precision:"),
    (["next", "--tokens", "1", "--bogus"], 2, "kogpt2 next: unknown option '--bogus'"),
    (["next", "--tokens"], 2, "kogpt2 next: --tokens needs a value"),
    (["next", "--tokens", "1", "stray"], 2, "kogpt2 next: unexpected argument 'stray'"),
    (["next", "--text", ""], 2, "kogpt2 next: the prompt is empty"),
    (["next", "--model", "/nonexistent", "--tokens", "1"], 1, "kogpt2 next: open /nonexistent"),
    (["generate"], 2, "kogpt2 generate: no prompt: give --text TEXT or --tokens IDS"),
    (["generate", "--text", "a", "--max-tokens", "0"], 2,
     "kogpt2 generate: --max-tokens must be an integer in 1..512, got '0'"),
    (["generate", "--text", "a", "--max-tokens", "513"], 2, "--max-tokens must be an integer"),
    (["generate", "--text", "a", "--temperature", "-1"], 2,
     "kogpt2 generate: --temperature must be a number in 0..100, got '-1'"),
    (["generate", "--text", "a", "--temperature", "nan"], 2, "--temperature must be a number"),
    (["generate", "--text", "a", "--top-k", "12001"], 2,
     "kogpt2 generate: --top-k must be an integer in 0..12000, got '12001'"),
    (["generate", "--text", "a", "--top-p", "0"], 2,
     "kogpt2 generate: --top-p must be a number in (0, 1], got '0'"),
    (["generate", "--text", "a", "--top-p", "1.5"], 2, "--top-p must be a number in"),
    (["generate", "--text", "a", "--seed", "-1"], 2, "kogpt2 generate: --seed must be an integer"),
    (["generate", "--text", "a", "--repetition-penalty", "0"], 2,
     "--repetition-penalty must be a number in (0, 100]"),
    (["generate", "--text", "a", "--frequency-penalty", "3"], 2,
     "--frequency-penalty must be a number in -2..2, got '3'"),
    (["generate", "--text", "a", "--presence-penalty", "x"], 2, "--presence-penalty must be"),
    (["generate", "--text", "a", "--stop", ""], 2, "--stop: a stop string must not be empty"),
    (["generate", "--text", "a", "--stop", "x" * 257], 2, "--stop: at most 256 bytes"),
    (["generate", "--text", "a"] + ["--stop", "s"] * 5, 2, "--stop: at most 4 stop strings"),
    (["generate", "--tokens", "1,12000"], 2,
     "kogpt2 generate: --tokens: 12000 is not a token id of the model (0..11999)"),
    (["generate", "--text", ""], 2, "kogpt2 generate: the prompt is empty"),
    (["generate", "--tokens", ",".join(["5"] * 513)], 2,
     "kogpt2 generate: n_prompt_tokens (513) exceeds n_ctx (512)"),
    (["generate", "--text", "a", "--ignore-eos=1"], 2,
     "kogpt2 generate: --ignore-eos takes no value"),
    (["generate", "--text", "a", "--frobnicate=1"], 2,
     "kogpt2 generate: unknown option '--frobnicate=1'"),
    (["generate", "--text", "a", "-Q"], 2, "kogpt2 generate: unknown option '-Q'"),
    (["generate", "--text", "a", "-n"], 2, "kogpt2 generate: -n needs a value"),
    (["tokenize", "--bogus"], 2, "kogpt2 tokenize: unknown option '--bogus'"),
    (["tokenize", "--tokenizer"], 2, "kogpt2 tokenize: --tokenizer needs a value"),
    (["tokenize", "--jsonl", "text"], 2, "kogpt2 tokenize: --jsonl reads stdin"),
    (["detokenize", "--ids", "1"], 2, "kogpt2 detokenize: --ids is an output of tokenize only"),
    (["detokenize", "1,x"], 1, "kogpt2 detokenize: ids must be integers"),
    (["detokenize", "1,,2"], 1, "kogpt2 detokenize: ids must be integers"),
    (["detokenize", "1", ",", "2", ","], 1, "kogpt2 detokenize: ids must be integers"),
    (["tokenize", "--json", "--ids", "x"], 2,
     "kogpt2 tokenize: give one of --json, --ids and --jsonl"),
    (["convert"], 2, "kogpt2 convert: no --model SRC given"),
    (["convert", "--model", MODEL], 2, "kogpt2 convert: no --out DIR given"),
    (["convert", "--model", MODEL, "--out", "/tmp/x", "extra"], 2,
     "kogpt2 convert: unexpected argument 'extra'"),
    (["convert", "--model", MODEL, "--out", "/tmp/x", "--dtype", "q9"], 2,
     "kogpt2 convert: --dtype: unknown dtype 'q9'"),
    (["convert", "-x"], 2, "kogpt2 convert: unknown option '-x'"),
]


def test_errors():
    for args, status, says in ERRORS:
        rc, out, err = run(*args)
        first = err.split("\n", 1)[0]
        check(rc == status and says in first and not out,
              "kogpt2 %s: exit %d (want %d), first line %r (want %r), stdout %r" %
              (" ".join(a if len(a) < 40 else a[:20] + "..." for a in args), rc, status, first,
               says, out[:80]))
    print("%d usage errors, each named on its first line" % len(ERRORS))


# --- next's plain output ------------------------------------------------------------------


def test_next():
    for text in ('"', "\\", "안녕하세요"):
        rc, plain, err = run("next", "--device", "cpu", "--text", text, "--top-k", "30")
        rc2, js, err2 = run("next", "--device", "cpu", "--text", text, "--top-k", "30", "--json")
        check(rc == 0 and rc2 == 0, "next --text %r: exit %d, %d %s" % (text, rc, rc2, err))
        cands = json.loads(js)["candidates"] if rc2 == 0 else []
        rows = plain.rstrip("\n").split("\n")
        check(len(rows) == len(cands) == 30, "30 rows: %d, %d" % (len(rows), len(cands)))
        for row, c in zip(rows, cands):
            m = re.fullmatch(r" *(\d+) +(\d+) +[\d.]+% +logprob +-?[\d.]+  (\".*\")", row)
            check(m and int(m.group(2)) == c["id"] and json.loads(m.group(3)) == c["text"],
                  "row %r reads back as id %d text %r" % (row, c["id"], c["text"]))
    # the candidate '"' after '"' (KoGPT2 default: id 10414) shows as "\"", unlike ' "'
    rc, plain, _ = run("next", "--device", "cpu", "--text", '"', "--top-k", "5")
    check('"\\""' in plain and '" \\""' in plain, 'the candidates \'"\' and \' "\' differ: %r' %
          plain)


MODES = {"generate": test_generate, "server": test_server, "progress": test_progress,
         "version": test_version, "tokenize": test_tokenize, "errors": test_errors,
         "next": test_next}


def main():
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit("usage: test_cli.py %s" % "|".join(MODES))
    kogpt2()
    return lib.run_tests([(sys.argv[1], MODES[sys.argv[1]])])


if __name__ == "__main__":
    sys.exit(main())
