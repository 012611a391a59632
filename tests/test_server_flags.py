#!/usr/bin/env python3
"""test_server_flags: kogpt2d's command line as an operator gets it wrong (issue 32 items 8-9,
issue 33 item 3), on the project's models/default.

Checked: an empty --api-key, an empty KOGPT2_API_KEY or KOGPT2_API_KEY_FILE, KOGPT2_MODEL='=x',
and a KOGPT2_MODEL or KOGPT2_CHAT_TEMPLATE that is not there each stop the daemon before it
listens, with one line naming the flag or variable; bad KOGPT2_* values are ignored when their
flag is given (the daemon serves with the flags' values, the key included); the short flags
(-m, -H, -p, -t) work; --help lists every flag with its variable, KOGPT2_ + the name in
capitals; and a daemon serving two named models (--model a=DIR --model b=DIR) answers on both
and exits 0 after SIGTERM, which under AddressSanitizer means LeakSanitizer found nothing (the
NAME of NAME=DIR was never freed: every ASan run of such a daemon exited 1), one of them with
per-model options (ctx-size=64 served); a bad per-model option (ctx-size=0, dtype=f99, a
chat-template that is not there) exits 2 naming --model or KOGPT2_MODEL and the option."""
import http.client
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import test_server_lib as lib
from test_server_lib import check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "default")


def refused(what, args, env, status, names):
    """kogpt2d ARGS under env must exit with status before 'listening on', naming names (a
    daemon that serves instead is stopped after 20 s: the default model loads in ~1 s)."""
    try:
        r = subprocess.run([lib.kogpt2d_path(), "--port", "0", "--device", "cpu"] + args,
                           env=lib.clean_env(**env), capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired as e:
        check(False, "%s: kogpt2d started instead of refusing: %r" % (what, e.stderr))
        return
    first = r.stderr.split("\n", 1)[0]
    check(r.returncode == status and names in first and "listening on" not in r.stderr,
          "%s: exit %d (want %d), first line %r (want %r)" %
          (what, r.returncode, status, first, names))


def test_refusals(tmp):
    missing = os.path.join(tmp, "absent")
    refused("--api-key ''", ["--model", MODEL, "--api-key", ""], {}, 2,
            "kogpt2d: --api-key must not be empty")
    refused("KOGPT2_API_KEY=''", ["--model", MODEL], {"KOGPT2_API_KEY": ""}, 2,
            "kogpt2d: KOGPT2_API_KEY is set but empty")
    refused("KOGPT2_API_KEY_FILE=''", ["--model", MODEL], {"KOGPT2_API_KEY_FILE": ""}, 2,
            "kogpt2d: KOGPT2_API_KEY_FILE is set but empty")
    refused("KOGPT2_MODEL='=x'", [], {"KOGPT2_MODEL": "=x"}, 2,
            "kogpt2d: KOGPT2_MODEL: expected NAME=DIR, got '=x'")
    refused("KOGPT2_MODEL missing", [], {"KOGPT2_MODEL": missing}, 1,
            "kogpt2d: KOGPT2_MODEL: open %s: No such file" % missing)
    refused("--model missing", ["-m", missing], {}, 1,
            "kogpt2d: --model: open %s: No such file" % missing)
    refused("KOGPT2_CHAT_TEMPLATE missing", ["--model", MODEL],
            {"KOGPT2_CHAT_TEMPLATE": missing}, 2,
            "kogpt2d: KOGPT2_CHAT_TEMPLATE: %s: No such file" % missing)
    refused("--chat-template missing", ["--model", MODEL, "--chat-template", missing], {}, 2,
            "kogpt2d: --chat-template: %s: No such file" % missing)
    # a bad variable still stops the daemon when no flag replaces it
    refused("KOGPT2_MAX_BATCH=0", ["--model", MODEL], {"KOGPT2_MAX_BATCH": "0"}, 2,
            "kogpt2d: KOGPT2_MAX_BATCH must be an integer in 1..1024, got '0'")
    refused("-p x", ["--model", MODEL, "-p", "x"], {}, 2,
            "kogpt2d: --port must be an integer in 0..65535, got 'x'")


def wait_ready(port, proc, log_path):
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path) as f:
                raise RuntimeError("kogpt2d exited %d: %s" % (proc.returncode, f.read()))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("kogpt2d did not become ready")


def test_flags_win(tmp):
    """Every variable bad, every flag given (short forms where there are): the flags serve."""
    port = lib.free_port()
    env = lib.clean_env(KOGPT2_MODEL="=x", KOGPT2_PORT="eighty", KOGPT2_MAX_BATCH="0",
                        KOGPT2_QUIET="maybe", KOGPT2_API_KEY="has space", KOGPT2_HOST="",
                        KOGPT2_THREADS="-1", KOGPT2_DEVICE="tpu", KOGPT2_LOG_FORMAT="xml",
                        KOGPT2_CHAT_TEMPLATE=os.path.join(tmp, "absent"))
    log_path = os.path.join(tmp, "flags_win.log")
    template = os.path.join(tmp, "chat.jinja")
    with open(template, "w") as f:
        f.write("{% for m in messages %}{{ m.content }}{% endfor %}")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([lib.kogpt2d_path(), "-m", MODEL, "-p", str(port), "-H",
                                 "127.0.0.1", "-t", "2", "--max-batch", "2", "--quiet",
                                 "--api-key", "good-key", "--device", "cpu", "--log-format",
                                 "text", "--chat-template", template],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(port, proc, log_path)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer good-key"})
        r = c.getresponse()
        body = json.loads(r.read())
        check(r.status == 200 and body["data"][0]["id"] == "default",
              "bad variables ignored where flags are given: %d %r" % (r.status, body))
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer has space"})
        r = c.getresponse()
        r.read()
        check(r.status == 401, "KOGPT2_API_KEY not read beside --api-key (%d)" % r.status)
    finally:
        proc.terminate()
        proc.wait(30)


def test_help():
    h = subprocess.run([lib.kogpt2d_path(), "--help"], capture_output=True, text=True, timeout=30)
    check(h.returncode == 0, "--help exits 0")
    # an entry starts "  -p, --port" or "      --host" (a wrapped help line that begins with
    # a flag's name is indented further)
    entries = re.split(r"\n(?=  (?:-\w, |    )--)", h.stdout.split("\nserve:")[0])[1:]
    flags = [re.match(r"\s*(?:-\w, )?\s*--([\w-]+)", e).group(1) for e in entries]
    check(len(flags) >= 30, "--help lists the flags: %r" % flags)
    for e, flag in zip(entries, flags):
        if flag in ("help", "version"):
            continue
        var = "KOGPT2_" + flag.upper().replace("-", "_")
        check(("env " + var) in " ".join(e.split()), "--help: --%s names %s" % (flag, var))


def test_model_options():
    """--model's per-model options (NAME=DIR,KEY=VALUE) refused by the flag's or the variable's
    name, exit 2."""
    refused("ctx-size=0", ["--model", "x=%s,ctx-size=0" % MODEL], {}, 2,
            "kogpt2d: --model's ctx-size must be an integer in 1..1048576, got '0'")
    refused("dtype=f99", ["--model", "x=%s,dtype=f99" % MODEL], {}, 2, "kogpt2d: --model's dtype: ")
    refused("a chat-template that is not there", [],
            {"KOGPT2_MODEL": "x=%s,chat-template=/nonexistent/t.jinja" % MODEL}, 2,
            "kogpt2d: KOGPT2_MODEL's chat-template: /nonexistent/t.jinja: No such file")


def test_named_models():
    # b carries per-model options: the copy of the flag's value they point into is freed too
    d = lib.Daemon("a=" + MODEL, "--model", "b=%s,ctx-size=64,dtype=f32" % MODEL,
                   "--device", "cpu")
    try:
        status, j = d.json("GET", "/v1/models")
        names = [m["id"] for m in (j or {}).get("data", [])]
        check(status == 200 and names == ["a", "b"], "/v1/models lists a and b: %r" % names)
        n_ctx = {m["id"]: m.get("n_ctx") for m in (j or {}).get("data", [])}
        check(n_ctx.get("b") == 64 and n_ctx.get("a") != 64, "b's ctx-size=64 only: %r" % n_ctx)
        for name in ("a", "b"):
            status, j = d.json("POST", "/v1/next-token", {"text": "안녕", "top_k": 2,
                                                          "model": name})
            check(status == 200 and j.get("model") == name,
                  "next-token on %s: %d %r" % (name, status, j))
    finally:
        rc = d.stop()
    check(rc == 0, "the named-model daemon exits 0 after SIGTERM (LeakSanitizer quiet under "
                   "ASan): %d\n%s" % (rc, d.log_text()[-2000:]))


def main():
    lib.kogpt2d_path()
    if not os.path.isfile(os.path.join(MODEL, "model.safetensors")):
        print("SKIP: no default model in %s" % MODEL)
        return lib.SKIP
    tmp = tempfile.mkdtemp(prefix="kg_flags_")
    for name, fn in (("refusals", lambda: test_refusals(tmp)),
                     ("flags win over bad variables", lambda: test_flags_win(tmp)),
                     ("--help", test_help), ("per-model options", test_model_options),
                     ("named models", test_named_models)):
        print("-", name, flush=True)
        try:
            fn()
        except Exception as e:  # a crash of one part is a failure; the others still run
            check(False, "%s raised %r" % (name, e))
    print("%d checks, %d failed" % (lib.CHECKS[0], len(lib.FAILURES)))
    return 1 if lib.FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
