#!/usr/bin/env python3
"""test_server_lifecycle: kogpt2d's start and stop (split from test_server_e2e.py, issue 33 item
6): a busy port and a missing model fail at start, SIGTERM under load drains every request and
exits 0, SIGHUP is ignored and a second SIGTERM ends the streams with a final event, a model
file truncated under the daemon is named in its last line. kogpt2d on 127.0.0.1 with a small
random model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default model's 12,000-id
SentencePiece tokenizer), one daemon for the file; the signal cases start their own.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import test_server_lib as lib
from test_server_lib import check


def test_port_in_use(d, model_dir):
    """A second daemon on a port already served fails at once ("address already in use",
    exit 1) instead of sharing the port's traffic (issue 13: SO_REUSEPORT let it)."""
    p = lib.kogpt2d_run(model_dir, "--port", str(d.port), "--threads", "1")
    check(p.returncode == 1 and "address already in use" in p.stderr,
          "second daemon on a busy port: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    # a model that is not there: one line saying so, and no "listening on" before it
    p = lib.kogpt2d_run(os.path.join(model_dir, "nonexistent"), "--port", "0")
    check(p.returncode == 1 and "nonexistent: No such file" in p.stderr and
          "listening" not in p.stderr,
          "a missing --model fails before listening: exit %d, %r" % (p.returncode, p.stderr[-300:]))
    check(d.request("GET", "/healthz")[0] == 200, "the first daemon still serves")


def test_sigterm(model_dir):
    """SIGTERM under load: every in-flight request completes, /readyz 503, exit 0. model_dir
    is lib.SLOW_MODEL's: the 8 jobs are seen in the engine before the signal (a 0.3 s sleep
    guessed it: too short to start them on a loaded machine, and long enough for a fast one
    to finish 40 tokens each, proving nothing about the drain) and still run after it."""
    d = lib.Daemon(model_dir, "--timeout", "60", log=os.path.join(model_dir, "term.log"))
    results = []
    keep = d.conn()
    keep.request("GET", "/healthz")
    keep.getresponse().read()
    n_tokens = 300

    def client(i):
        results.append(d.request("POST", "/v1/generate", {"text": "안녕", "max_tokens": n_tokens,
                                                          "ignore_eos": True, "seed": i,
                                                          "stream": i % 2 == 0}))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    lib.wait_for(lambda: sum(lib.engine_jobs(d, keep)), lambda n: n == 8,
                 "the 8 jobs in the engine")
    check(not results, "no job done before the SIGTERM (%d)" % len(results))
    d.proc.send_signal(15)
    lib.wait_log(d, lambda t: "Terminated: draining" in t, "the SIGTERM taken")
    try:
        keep.request("GET", "/readyz")
        st = keep.getresponse().status
    except OSError:
        st = None
    check(st in (503, None), "readyz while draining: %r" % st)
    for t in threads:
        t.join()
    ok = [r for r in results if r[0] == 200]
    full = 0
    for st_, hdrs, data in ok:
        if hdrs.get("content-type", "").startswith("text/event-stream"):
            ev = lib.sse_events(data)
            full += bool(ev) and json.loads(ev[-1]).get("generated_tokens") == n_tokens
        else:
            full += json.loads(data)["generated_tokens"] == n_tokens
    check(len(results) == 8 and full == 8, "no in-flight request lost: %d of 8 complete (%r)" % (
        full, [r[0] for r in results]))
    try:
        rc = d.proc.wait(65)
    except Exception:
        rc = None
    check(rc == 0, "exit 0 after SIGTERM (rc %r)" % rc)
    d.stop()


def test_signals(model_dir):
    """SIGHUP does not kill the daemon; a second SIGTERM during the drain ends the requests in
    flight at once, each stream with a final event, and the daemon still exits 0 (issue 13:
    a thread started before main took the signals' default action and cut every stream)."""
    d = lib.Daemon(model_dir, "--timeout", "60", log=os.path.join(model_dir, "signals.log"))
    d.proc.send_signal(signal.SIGHUP)
    time.sleep(0.3)
    check(d.proc.poll() is None and d.request("GET", "/healthz")[0] == 200,
          "alive and serving after SIGHUP")
    results = []

    def client(i):
        try:
            results.append(d.request("POST", "/v1/generate", {
                "text": "안녕", "max_tokens": 1000, "ignore_eos": True, "seed": i, "stream": True}))
        except OSError as e:
            results.append((None, {}, repr(e).encode()))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    # the 4 streams in the engine (model_dir is lib.SLOW_MODEL's: 1,000 tokens each still
    # run at the second SIGTERM), and the first SIGTERM taken before the second is sent (two
    # sent at once may be pending together: one signal, a plain drain)
    lib.wait_for(lambda: sum(lib.engine_jobs(d)), lambda n: n == 4,
                 "the 4 streams in the engine")
    d.proc.send_signal(signal.SIGTERM)
    lib.wait_log(d, lambda t: "Terminated: draining" in t, "the first SIGTERM taken")
    d.proc.send_signal(signal.SIGHUP)  # ignored during the drain too
    d.proc.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(60)
    check("Terminated again: ending the requests in flight now" in d.log_text(),
          "the second SIGTERM came during the drain")
    ended = 0  # streams whose last event is the final one: done, or an error saying why
    for st, _, data in results:
        ev = lib.sse_events(data) if st == 200 else []
        last = json.loads(ev[-1]) if ev else {}
        ended += "done" in last or "error" in last
    check(len(results) == 4 and ended == 4,
          "every stream ends with a final event after a second SIGTERM: %d of %d (%r)"
          % (ended, len(results), [r[0] for r in results]))
    try:
        rc = d.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    check(rc == 0, "exit 0 after a second SIGTERM (rc %r)" % rc)
    d.stop()


def test_truncated_model(model_dir):
    """The served model.safetensors truncated under the daemon: the mapping loses its pages and
    the next read is a SIGBUS. The daemon dies (nothing can be done with the mapping), but says
    why in one line first (issue 13: it died with no log line)."""
    tmp = tempfile.mkdtemp(prefix="kg_trunc_")
    copy = os.path.join(tmp, "model")
    shutil.copytree(model_dir, copy)
    d = lib.Daemon(copy, "--cache-mb", "0", log=os.path.join(tmp, "d.log"))
    with open(os.path.join(copy, "model.safetensors"), "r+b") as f:
        f.truncate(4096)
    try:
        d.request("POST", "/v1/next-token", {"text": "새로운 문장을 하나 보냅니다"}, timeout=10)
    except OSError:
        pass
    try:
        rc = d.proc.wait(30)
    except subprocess.TimeoutExpired:
        rc = None
    log = d.log_text()
    check(rc == -signal.SIGBUS and "SIGBUS: the model file changed or shrank" in log,
          "a truncated model: rc %r, log %r" % (rc, log[-300:]))
    d.stop()


def main():
    tmp, model_dir, d = lib.start("kg_lifecycle_")
    slow_dir = lib.make_model(os.path.join(tmp, "slow"), **lib.SLOW_MODEL)
    return lib.run_tests([("port in use", lambda: test_port_in_use(d, model_dir)),
                          ("SIGTERM under load", lambda: test_sigterm(slow_dir)),
                          ("SIGHUP, a second SIGTERM", lambda: test_signals(slow_dir)),
                          ("the model file truncated while served",
                           lambda: test_truncated_model(model_dir))],
                         daemons=[d], logs=[os.path.join(model_dir, "*.log"),
                                            os.path.join(slow_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
