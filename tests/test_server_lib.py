"""Helpers for kogpt2d's end-to-end tests and benchmark (stdlib only).

make_model() writes a small random GPT-2 in the Hugging Face layout (config.json,
model.safetensors) with KoGPT2 v2's real tokenizer.json copied from the shared data.
Daemon starts build/kogpt2d on 127.0.0.1 with a free port and stops it.
"""
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

SKIP = 77


# Every check of a test script: counted, and a failure printed and kept (the script exits 1
# at the end if any failed), so one run reports every broken thing at once.
FAILURES = []
CHECKS = [0]


def check(cond, what):
    CHECKS[0] += 1
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what, flush=True)
    return cond


def shared_tokenizer():
    """The v2 tokenizer.json, or exit 77 (skip) when the shared data is absent."""
    shared = os.environ.get("KG_SHARED_DIR") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared")
    path = os.path.join(shared, "data", "kogpt2", "v2", "tokenizer.no_endoftext.json")
    if not os.path.isfile(path):
        print("SKIP: %s is missing (set KG_SHARED_DIR to the project's shared/)" % path)
        sys.exit(SKIP)
    return path


def make_model(dirname, n_layer=2, n_embd=64, n_head=2, n_ctx=128, vocab=51200, seed=1):
    """A random GPT-2 (f32, tied embeddings) plus the v2 tokenizer, in dirname."""
    os.makedirs(dirname, exist_ok=True)
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
              "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 3}
    with open(os.path.join(dirname, "config.json"), "w") as f:
        json.dump(config, f)
    shutil.copyfile(shared_tokenizer(), os.path.join(dirname, "tokenizer.json"))
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
        self.port = free_port()
        self.log_path = log or os.path.join(tempfile.mkdtemp(prefix="kg_daemon_"), "kogpt2d.log")
        self.log = open(self.log_path, "w")
        cmd = kogpt2d_cmd(model_dir, "--port", str(self.port), "--threads", "2", *args)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        device = cmd[len(cmd) - cmd[::-1].index("--device")]  # the last --device given
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                if device.startswith("cuda") and "cuda backend" in self.log_text():
                    print("SKIP: --device %s: %s" % (device, self.log_text().strip()))
                    sys.exit(SKIP)
                raise RuntimeError("kogpt2d exited with %d:\n%s" % (self.proc.returncode,
                                                                    self.log_text()))
            try:
                if self.request("GET", "/readyz")[0] == 200:
                    return
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


def sse_events(data):
    """The data: payloads of an SSE body, in order."""
    out = []
    for block in data.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: "):
                out.append(line[6:])
    return out


if __name__ == "__main__":
    # python3 tests/test_server_lib.py make-model DIR: the model the browser test serves
    if len(sys.argv) != 3 or sys.argv[1] != "make-model":
        sys.exit("usage: test_server_lib.py make-model DIR")
    make_model(sys.argv[2])
