#!/usr/bin/env python3
"""bench_chat_replies.py - how often /v1/chat/completions answers "" on the default model,
and how long and how it ends when it does not (issue 29).

Usage: bench/bench_chat_replies.py [--daemon build/kogpt2d] [--model models/default]
           [--n 100] [--temperature T] [--max-tokens N] [-- extra kogpt2d flags]

It starts kogpt2d on a free port and sends N single-turn chats, the way a chat client's first
call does (one user message; no max_tokens unless --max-tokens; the default temperature 1
unless --temperature), seed i for question i so that a run repeats. The questions are every
100th row of ../shared/data/corpora/chatbot_data/ChatbotData.csv (rows 100, 200, ...: about
the documents models/train_default.sh holds out, every 100th; close enough, "held-out-ish").
Prints the empty-reply rate, the finish reasons, the reply lengths and a few replies.
Figures only, never pass/fail.
"""

import argparse
import csv
import http.client
import json
import os
import socket
import subprocess
import sys
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
CSV = os.path.join(ROOT, "..", "shared", "data", "corpora", "chatbot_data", "ChatbotData.csv")


def questions(n):
    with open(CSV, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return [r[0] for i, r in enumerate(rows, 1) if i % 100 == 0][:n]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, json.dumps(body, ensure_ascii=False).encode(),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, json.loads(r.read())
    finally:
        c.close()


def wait_ready(port, proc):
    for _ in range(600):
        if proc.poll() is not None:
            sys.exit("kogpt2d exited (%d) before it was ready" % proc.returncode)
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit("kogpt2d was not ready within 60 s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--daemon", default=os.path.join(ROOT, "build", "kogpt2d"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "default"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--temperature", type=float)
    ap.add_argument("--max-tokens", type=int)
    ap.add_argument("extra", nargs="*", help="more kogpt2d flags (after --)")
    a = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([a.daemon, "--model", a.model, "--port", str(port), "--threads", "2"]
                            + a.extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(port, proc)
        replies = []
        for i, q in enumerate(questions(a.n)):
            body = {"messages": [{"role": "user", "content": q}], "seed": i}
            if a.temperature is not None:
                body["temperature"] = a.temperature
            if a.max_tokens is not None:
                body["max_tokens"] = a.max_tokens
            st, j = post(port, "/v1/chat/completions", body)
            if st != 200:
                sys.exit("question %d: status %d %r" % (i, st, j))
            c = j["choices"][0]
            replies.append((q, c["message"]["content"], c["finish_reason"],
                            j["usage"]["completion_tokens"]))
    finally:
        proc.terminate()
        proc.wait()
    n = len(replies)
    empty = sum(1 for r in replies if not r[1].strip())
    finish = {}
    for r in replies:
        finish[r[2]] = finish.get(r[2], 0) + 1
    tokens = sorted(r[3] for r in replies)
    print("%s, %d questions, temperature %s, max_tokens %s" % (
        os.path.basename(a.model.rstrip("/")), n,
        "1 (default)" if a.temperature is None else a.temperature,
        "absent" if a.max_tokens is None else a.max_tokens))
    print("empty replies (\"\" or only whitespace): %d of %d = %.0f %%" % (empty, n, 100.0 * empty / n))
    print("finish_reason: %s" % ", ".join("%s %d" % kv for kv in sorted(finish.items())))
    print("completion tokens: median %d, max %d, mean %.1f" % (
        tokens[n // 2], tokens[-1], sum(tokens) / n))
    for q, text, fin, k in replies[:8]:
        print("  %s -> %s (%s, %d tokens)" % (q, json.dumps(text, ensure_ascii=False), fin, k))


if __name__ == "__main__":
    main()
