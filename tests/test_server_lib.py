"""Helpers for kogpt2d's end-to-end tests and benchmark (stdlib only).

make_model() writes a small random GPT-2 in the Hugging Face layout (config.json,
model.safetensors) with the tokenizer the project ships (models/default's SentencePiece
model), so that the tests run in a fresh clone; small_tokenizer_json() writes a tokenizer.json
of a few pieces for the tests that need a second vocabulary. Daemon starts build/kogpt2d on
127.0.0.1 with a free port and stops it. run_tests() is every test script's run/report loop.
"""
import glob
import http.client
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODEL = os.path.join(ROOT, "models", "default")
DEFAULT_SPM = os.path.join(DEFAULT_MODEL, "kogpt2-default.model")


# Every check of a test script: counted, and a failure printed and kept (the script exits 1
# at the end if any failed), so one run reports every broken thing at once.
FAILURES = []
CHECKS = [0]
SKIPPED = []


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


class Skip(Exception):
    """Raised by a test that cannot run here (an input or a program is missing): run_tests
    reports it as "SKIP: test: reason", never as a pass."""


def skip(reason):
    raise Skip(reason)


def check_log_clean(path, what=None):
    """A daemon's log holds no sanitizer report (ASan, UBSan, TSan)."""
    with open(path, errors="replace") as f:
        text = f.read()
    check("Sanitizer" not in text and "runtime error" not in text,
          "no sanitizer reports in %s" % (what or os.path.basename(path)))


def run_tests(tests, daemons=(), logs=(), tmp=None):
    """The run/report loop of a test script. Runs each (name, fn) of tests in order, printed
    as "- name": a failed check or an exception is a failure and the rest still run; a Skip
    prints "SKIP: name: reason". Then each of daemons (the file's shared ones) must be alive,
    exit 0 on SIGTERM and leave a log without sanitizer reports, as must each file that logs
    names (glob patterns); on a failure the last 60 lines of each daemon's log are printed.
    tmp, a directory of the script's, is removed when nothing failed, else kept and named.
    Prints "N checks, M failed" and returns the exit status: 1 when any check failed, 77 when
    every test was skipped, else 0."""
    for name, fn in tests:
        print("-", name, flush=True)
        try:
            fn()
        except Skip as e:
            SKIPPED.append(name)
            print("SKIP: %s: %s" % (name, e), flush=True)
        except Exception as e:  # a crash of the test is a failure, keep going
            traceback.print_exc()
            check(False, "%s raised %r" % (name, e))
    for d in daemons:
        check(d.proc.poll() is None, "daemon alive after everything")
        rc = d.stop()
        check(rc == 0, "daemon exits 0 on SIGTERM (rc %r)" % rc)
        check_log_clean(d.log_path)
        if FAILURES:
            print("--- daemon log %s (last 60 lines) ---" % d.log_path)
            print("\n".join(d.log_text().splitlines()[-60:]))
    for pattern in logs:
        for path in sorted(glob.glob(pattern)):
            check_log_clean(path)
    print("%d checks, %d failed%s" % (CHECKS[0], len(FAILURES), ", %d tests skipped (%s)" % (
        len(SKIPPED), ", ".join(SKIPPED)) if SKIPPED else ""))
    if tmp and not FAILURES:
        shutil.rmtree(tmp, ignore_errors=True)
    elif tmp:
        print("logs kept in", tmp)
    if FAILURES:
        return 1
    return SKIP if tests and len(SKIPPED) == len(tests) else 0


def default_model():
    """models/default; Skip when the checkout lacks it."""
    if not os.path.isfile(os.path.join(DEFAULT_MODEL, "model.safetensors")):
        skip("no default model in %s" % DEFAULT_MODEL)
    return DEFAULT_MODEL


def spm_encode(text):
    """text's ids under the default model's tokenizer by the reference, libsentencepiece
    (Debian's python3-sentencepiece); Skip without it."""
    try:
        import sentencepiece
    except ImportError:
        skip("no python3-sentencepiece (the reference tokenizer): apt-get install it")
    return sentencepiece.SentencePieceProcessor(model_file=DEFAULT_SPM).encode(text)


def small_tokenizer_json(path, pieces, specials=("<s>", "</s>", "<usr>", "<pad>", "<sys>",
                                                  "<unk>")):
    """A tokenizer.json in the shape of KoGPT2 v2's (Metaspace, BPE with no merges): the
    specials at ids 0.., then pieces in order; a character outside them is <unk>."""
    vocab = {}
    for p in list(specials) + list(pieces):
        vocab.setdefault(p, len(vocab))
    meta = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}
    tok = {"version": "1.0", "normalizer": None, "pre_tokenizer": meta, "decoder": meta,
           "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False,
                             "rstrip": False, "normalized": False, "special": True}
                            for i, c in enumerate(specials)],
           "model": {"type": "BPE", "unk_token": "<unk>", "vocab": vocab, "merges": []}}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    return len(vocab)


def make_model(dirname, n_layer=2, n_embd=64, n_head=2, n_ctx=128, seed=1, pieces=None):
    """A random GPT-2 (f32, tied embeddings) in dirname with the default model's SentencePiece
    tokenizer (12,000 ids; bos 1, eos 2, as models/default), or, given pieces, a
    small_tokenizer_json of them (bos 0, eos 1). Returns dirname."""
    os.makedirs(dirname, exist_ok=True)
    if pieces is None:
        shutil.copyfile(DEFAULT_SPM, os.path.join(dirname, os.path.basename(DEFAULT_SPM)))
        with open(os.path.join(DEFAULT_MODEL, "config.json")) as f:
            shipped = json.load(f)
        vocab, bos, eos = shipped["vocab_size"], shipped["bos_token_id"], shipped["eos_token_id"]
    else:
        vocab = small_tokenizer_json(os.path.join(dirname, "tokenizer.json"), pieces)
        bos, eos = 0, 1
    rng = random.Random(seed)
    C, L, V, T = n_embd, n_layer, vocab, n_ctx

    def rand(n, scale):
        return struct.pack("<%df" % n, *(rng.gauss(0.0, scale) for _ in range(n)))

    def ones(n):
        return struct.pack("<%df" % n, *([1.0] * n))

    tensors = [("transformer.wte.weight", (V, C), rand(V * C, 0.5)),
               ("transformer.wpe.weight", (T, C), rand(T * C, 0.1))]
    for l in range(L):
        p = "transformer.h.%d." % l
        tensors += [
            (p + "ln_1.weight", (C,), ones(C)), (p + "ln_1.bias", (C,), rand(C, 0.02)),
            (p + "attn.c_attn.weight", (C, 3 * C), rand(C * 3 * C, 0.1)),
            (p + "attn.c_attn.bias", (3 * C,), rand(3 * C, 0.02)),
            (p + "attn.c_proj.weight", (C, C), rand(C * C, 0.1)),
            (p + "attn.c_proj.bias", (C,), rand(C, 0.02)),
            (p + "ln_2.weight", (C,), ones(C)), (p + "ln_2.bias", (C,), rand(C, 0.02)),
            (p + "mlp.c_fc.weight", (C, 4 * C), rand(C * 4 * C, 0.1)),
            (p + "mlp.c_fc.bias", (4 * C,), rand(4 * C, 0.02)),
            (p + "mlp.c_proj.weight", (4 * C, C), rand(4 * C * C, 0.1)),
            (p + "mlp.c_proj.bias", (C,), rand(C, 0.02)),
        ]
    tensors += [("transformer.ln_f.weight", (C,), ones(C)),
                ("transformer.ln_f.bias", (C,), rand(C, 0.02))]
    header, off = {}, 0
    for name, shape, data in tensors:
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(dirname, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, data in tensors:
            f.write(data)
    config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": L,
              "n_head": n_head, "n_embd": C, "n_positions": T, "n_ctx": T, "vocab_size": V,
              "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
              "bos_token_id": bos, "eos_token_id": eos}
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(config, f)
    return dirname


def kogpt2d_path():
    build = os.environ.get("KG_BUILD_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build")
    path = os.path.join(build, "kogpt2d")
    if not os.path.isfile(path):
        print("SKIP: %s was not built" % path)
        sys.exit(SKIP)
    return path


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def clean_env(**extra):
    """The environment without any KOGPT2_* variable of the caller's, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KOGPT2_")}
    env.update(extra)
    return env


def kogpt2d_cmd(model_dir, *args):
    """kogpt2d on model_dir, on the device KG_TEST_DEVICE names (cpu, cuda, ...; kogpt2d's own
    default is auto: a GPU when there is one); the last --device in args wins."""
    return [kogpt2d_path(), "--model", model_dir, "--host", "127.0.0.1",
            "--device", os.environ.get("KG_TEST_DEVICE", "auto")] + list(args)


def kogpt2d_run(model_dir, *args):
    """kogpt2d run to its end (a start-up that must fail): the CompletedProcess, text output."""
    return subprocess.run(kogpt2d_cmd(model_dir, *args), capture_output=True, text=True,
                          timeout=60)


class Daemon:
    """build/kogpt2d on 127.0.0.1; waits for /readyz; its stderr goes to a log file (log, or
    one in a new temporary directory: never into the model's, which may be the source tree's
    models/default)."""

    def __init__(self, model_dir, *args, log=None):
        self.log_path = log or os.path.join(tempfile.mkdtemp(prefix="kg_daemon_"), "kogpt2d.log")
        # free_port() closes its socket before kogpt2d binds the port, so a test running
        # beside this one (ctest -j) may take it first: then a new port, a few times over
        for attempt in range(5):
            self.port = free_port()
            self.log = open(self.log_path, "w")
            cmd = kogpt2d_cmd(model_dir, "--port", str(self.port), "--threads", "2", *args)
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
            if self._wait_ready(cmd):
                return
            self.log.close()
        raise RuntimeError("kogpt2d found no free port in 5 tries:\n" + self.log_text())

    def _wait_ready(self, cmd):
        """True once /readyz answers 200; False when the port was taken meanwhile."""
        device = cmd[len(cmd) - cmd[::-1].index("--device")]  # the last --device given
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if "address already in use" in self.log_text():
                    return False
                if device.startswith("cuda") and "cuda backend" in self.log_text():
                    print("SKIP: --device %s: %s" % (device, self.log_text().strip()))
                    sys.exit(SKIP)
                raise RuntimeError("kogpt2d exited with %d:\n%s" % (self.proc.returncode,
                                                                    self.log_text()))
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("kogpt2d did not become ready:\n" + self.log_text())

    def log_text(self):
        with open(self.log_path, errors="replace") as f:  # URLs in it may be any bytes
            return f.read()

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        """(status, headers dict (lower-case names), body bytes)."""
        c = self.conn(timeout)
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=False).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            c.request(method, path, body=body, headers=hdrs)
            r = c.getresponse()
            data = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, data
        finally:
            c.close()

    def json(self, method, path, body=None, headers=None):
        status, hdrs, data = self.request(method, path, body, headers)
        try:
            return status, json.loads(data) if data else None
        except ValueError:
            raise AssertionError("%s %s: not JSON (%d): %r" % (method, path, status, data[:200]))

    def raw(self, data, timeout=10, shutdown=True):
        """Sends raw bytes on a new socket and returns everything read back."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            try:
                s.sendall(data)
                if shutdown:
                    s.shutdown(socket.SHUT_WR)
            except OSError:  # the server may answer and close before reading it all
                pass
            out = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except (socket.timeout, ConnectionResetError):
                    break
                if not chunk:
                    break
                out += chunk
            return out
        finally:
            s.close()

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def start(prefix, *args, **model):
    """A new temporary directory (prefix), a make_model(**model) in it and a Daemon on that
    model with args, logging into it: (tmp, model_dir, daemon). Exits 77 without kogpt2d."""
    kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix=prefix)
    model_dir = make_model(os.path.join(tmp, "model"), **model)
    return tmp, model_dir, Daemon(model_dir, *args, log=os.path.join(tmp, "kogpt2d.log"))


def model_vocab(model_dir):
    """config.json's vocab_size."""
    with open(os.path.join(model_dir, "config.json")) as f:
        return json.load(f)["vocab_size"]


def post(d, path, body):
    """POST body to path: the reply's JSON, checked to be a 200."""
    st, j = d.json("POST", path, body)
    check(st == 200, "POST %s %r: status %d %r" % (path, body, st, j))
    return j


def generate(d, body):
    return post(d, "/v1/generate", body)


def stream(d, path, body):
    """body with stream true to path: the data of each SSE event, checked to be a 200 stream."""
    st, hdrs, data = d.request("POST", path, dict(body, stream=True))
    check(st == 200 and hdrs.get("content-type", "").startswith("text/event-stream"),
          "%s stream: %d %r" % (path, st, hdrs))
    return sse_events(data)


def expect_error(d, method, path, body, status, what, headers=None, param=None):
    """The request gets `status` with the documented error JSON, and the daemon lives:
    (headers, body) of the reply."""
    st, hdrs, data = d.request(method, path, body, headers)
    ok = check(st == status, "%s: status %d, want %d (%r)" % (what, st, status, data[:200]))
    try:
        j = json.loads(data)
        e = j["error"]
        ok &= check(e["code"] == status and isinstance(e["type"], str) and e["type"]
                    and isinstance(e["message"], str) and e["message"] and "param" in e,
                    "%s: error JSON shape %r" % (what, j))
        if param:
            ok &= check(e["param"] == param, "%s: param %r, want %r" % (what, e["param"], param))
    except (ValueError, KeyError, TypeError):
        ok = check(False, "%s: not an error JSON: %r" % (what, data[:200]))
    check(hdrs.get("content-type", "").startswith("application/json"),
          "%s: content type %r" % (what, hdrs.get("content-type")))
    check(d.proc.poll() is None and d.request("GET", "/healthz")[0] == 200,
          "%s: daemon still serving" % what)
    return hdrs, data


def sse_events(data):
    """The data: payloads of an SSE body, in order."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


# --- waiting for a state, not guessing it from a sleep (CI runs these under ASan and TSan on
# a loaded 2-core machine, and on machines much faster than ours) ---

WAIT_S = 60  # generous: a sanitized daemon on a loaded machine is 5-20x slower
# make_model(**SLOW_MODEL): a model whose jobs are seen running: ~2 ms a token here (the
# default small one's 120 tokens take ~10 ms, over before a client can look), n_ctx 1024
SLOW_MODEL = {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_ctx": 1024}


def wait_for(probe, ok, what, timeout=WAIT_S, interval=0.02):
    """Calls probe() until ok(its value) or timeout seconds pass; check()s that it got there,
    the failure saying what was seen last. Returns the last value."""
    deadline = time.time() + timeout
    while True:
        seen = probe()
        if ok(seen):
            return seen
        if time.time() >= deadline:
            check(False, "%s: not seen in %d s (last seen: %r)" % (what, timeout, seen))
            return seen
        time.sleep(interval)


def metrics(d, headers=None, conn=None):
    """/metrics as {"name{labels}": value}, asked on conn (kept open) or a new connection;
    {} with "status" set when it is not a 200."""
    if conn is None:
        st, _, data = d.request("GET", "/metrics", None, headers)
    else:
        conn.request("GET", "/metrics", headers=headers or {})
        r = conn.getresponse()
        st, data = r.status, r.read()
    if st != 200:
        return {"status": st}
    out = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            try:
                out[key] = float(value)
            except ValueError:
                pass
    return out


def metric_sum(m, name):
    """The sum of a metric's lines over their labels (a model's gauges: one line per model)."""
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def engine_jobs(d, conn=None, headers=None):
    """(running, queued) jobs in the engines, summed over the models served (/metrics)."""
    m = metrics(d, headers, conn)
    return (int(metric_sum(m, "kogpt2_running_jobs")), int(metric_sum(m, "kogpt2_queue_depth")))


def wait_log(d, ok, what, start=0, timeout=WAIT_S):
    """Waits until ok(the log past offset start) holds (a line the daemon writes as a request
    completes, not before); check()s it did. Returns that text."""
    return wait_for(lambda: d.log_text()[start:], ok, what, timeout, 0.01)


if __name__ == "__main__":
    # python3 tests/test_server_lib.py make-model DIR: the model the browser test serves
    if len(sys.argv) != 3 or sys.argv[1] != "make-model":
        sys.exit("usage: test_server_lib.py make-model DIR")
    make_model(sys.argv[2])
