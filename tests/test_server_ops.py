"""kogpt2d as an operator runs it (issue 29, items 5 and 10): request ids (echoed, made,
bad ones replaced, in the request log), several API keys (--api-key repeated, --api-key-file,
Bearer and x-api-key), --version, every flag from KOGPT2_<FLAG> (flags win, a bad value names
the variable), --log-format json (every line parses, access lines carry the request id,
libmicrohttpd's messages included), and the kogpt2_build_info metric (promtool check metrics
when promtool is installed). Exits 77 without the binary.
"""
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import test_server_lib as lib
from test_server_lib import check, clean_env

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def test_version():
    r = subprocess.run([lib.kogpt2d_path(), "--version"], capture_output=True, text=True,
                       timeout=30)
    check(r.returncode == 0, "--version exits 0 (%d)" % r.returncode)
    check(re.match(r"^kogpt2d \d+\.\d+\.\d+\S* \(commit [0-9a-z]+\)\n$", r.stdout),
          "--version prints 'kogpt2d X.Y.Z (commit C)': %r" % r.stdout)
    h = subprocess.run([lib.kogpt2d_path(), "--help"], capture_output=True, text=True, timeout=30)
    for flag in ("--version", "--log-format", "--api-key-file", "KOGPT2_"):
        check(flag in h.stdout, "--help mentions %s" % flag)


def test_request_ids_and_keys(d):
    gen = {"text": "안녕", "max_tokens": 2}
    k1, k3 = {"Authorization": "Bearer key-one"}, {"x-api-key": "key-three"}
    for name, hdrs in (("--api-key 1", k1), ("--api-key 2", {"Authorization": "Bearer key-two"}),
                       ("file key via Bearer", {"Authorization": "bearer key-three"}),
                       ("file key via x-api-key", k3), ("x-api-key", {"x-api-key": "key-one"})):
        st, _, body = d.request("POST", "/v1/generate", gen, hdrs)
        check(st == 200, "%s accepted (%d %r)" % (name, st, body[:120]))
    for name, hdrs in (("no key", {}), ("wrong key", {"Authorization": "Bearer key-on"}),
                       ("the overridden KOGPT2_API_KEY", {"Authorization": "Bearer from-env"}),
                       ("a comment line", {"x-api-key": "#"}),
                       ("wrong x-api-key", {"x-api-key": "key-threee"})):
        st, h, body = d.request("POST", "/v1/generate", gen, hdrs)
        check(st == 401 and h.get("www-authenticate") == "Bearer",
              "%s: 401 (%d)" % (name, st))
        check(HEX32.match(h.get("x-request-id", "")), "%s: the 401 has a request id" % name)
    # request ids: echoed, made when absent, replaced when bad
    st, h, _ = d.request("GET", "/healthz", headers={"X-Request-Id": "abc-123_XYZ"})
    check(st == 200 and h.get("x-request-id") == "abc-123_XYZ", "an X-Request-Id is echoed")
    ids = set()
    for _ in range(3):
        ids.add(d.request("GET", "/healthz")[1].get("x-request-id", ""))
    check(len(ids) == 3 and all(HEX32.match(i) for i in ids), "made ids: 32 hex, distinct %r" % ids)
    for bad in ("has space", "x" * 129, "caf\u00e9"):
        hdr = bad.encode("utf-8").decode("latin-1")  # sent as its bytes
        st, h, _ = d.request("GET", "/healthz", headers={"X-Request-Id": hdr})
        check(HEX32.match(h.get("x-request-id", "")), "a bad id (%r) is replaced" % bad[:20])
    st, h, _ = d.request("GET", "/healthz", headers={"X-Request-Id": "y" * 128})
    check(h.get("x-request-id") == "y" * 128, "128 bytes are kept")
    # errors, streams and refusals carry it too
    st, h, _ = d.request("POST", "/v1/generate", {"text": "x", "max_tokens": -1},
                         dict(k1, **{"X-Request-Id": "err-1"}))
    check(st == 422 and h.get("x-request-id") == "err-1", "a 422 echoes the id (%d)" % st)
    st, h, data = d.request("POST", "/v1/generate", dict(gen, stream=True),
                            dict(k1, **{"X-Request-Id": "stream-1"}))
    check(st == 200 and h.get("x-request-id") == "stream-1" and lib.sse_events(data),
          "a stream echoes the id")
    st, h, _ = d.request("POST", "/v1/tokenize", b"x" * 5000,
                         dict(k1, **{"X-Request-Id": "big-1", "Content-Type": "application/json"}))
    check(st == 413 and h.get("x-request-id") == "big-1", "a 413 echoes the id (%d)" % st)
    st, h, _ = d.request("GET", "/nope", headers={"X-Request-Id": "404-1"})
    check(st == 404 and h.get("x-request-id") == "404-1", "a 404 echoes the id")


def test_build_info(d):
    st, _, data = d.request("GET", "/metrics")
    text = data.decode()
    m = re.search(r'^kogpt2_build_info\{version="([^"]+)",commit="([^"]+)",device="([^"]+)"\} 1$',
                  text, re.M)
    check(st == 200 and m, "kogpt2_build_info{version,commit,device} 1 in /metrics")
    if m:
        v = subprocess.run([lib.kogpt2d_path(), "--version"], capture_output=True, text=True)
        check(m.group(1) in v.stdout and m.group(2) in v.stdout, "build_info agrees with --version")
        check(m.group(3) != "none", "build_info names the device (%s)" % m.group(3))
    promtool = shutil.which("promtool")
    if promtool:
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
        check(r.returncode == 0, "promtool check metrics: %s" % (r.stdout + r.stderr)[-300:])


def json_lines(text):
    """The log's lines that parse as JSON objects."""
    out = []
    for line in text.splitlines():
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if isinstance(o, dict):
            out.append(o)
    return out


def access_ids(text):
    return {o.get("request_id") for o in json_lines(text) if o.get("type") == "access"}


def test_json_log(d):
    # a request's line is written as it completes, maybe after its answer arrived
    lib.wait_log(d, lambda t: {"stream-1", "err-1", "big-1"} <= access_ids(t),
                 "the access lines of stream-1, err-1 and big-1")
    lines = [l for l in d.log_text().splitlines() if l.strip()]
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            check(False, "a log line that is not JSON: %r" % line[:200])
    check(parsed and all({"ts", "level", "msg"} <= set(o) for o in parsed),
          "every line has ts, level, msg")
    check(all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", o.get("ts", ""))
              for o in parsed), "ts is ISO 8601 UTC with milliseconds")
    check(any(o["msg"].startswith("ready: ") for o in parsed), "the ready line is JSON")
    check(any(o["msg"].startswith("device: ") for o in parsed), "the device line is JSON")
    access = [o for o in parsed if o.get("type") == "access"]
    check(all({"method", "path", "status", "bytes", "ms", "request_id"} <= set(o)
              for o in access), "access lines carry method, path, status, bytes, ms, request_id")
    by_id = {o["request_id"]: o for o in access}
    o = by_id.get("stream-1", {})
    check(o.get("method") == "POST" and o.get("path") == "/v1/generate" and o.get("status") == 200
          and o.get("bytes", 0) > 0, "the stream's access line: %r" % o)
    check(by_id.get("err-1", {}).get("status") == 422, "the 422's access line carries its id")
    check(by_id.get("big-1", {}).get("status") == 413, "the 413's access line carries its id")
    # a path with control bytes and bytes that are not UTF-8 still makes one JSON line
    d.raw(b"GET /a%0a%22%ff%fe HTTP/1.1\r\nHost: x\r\nX-Request-Id: odd-1\r\n\r\n")
    # libmicrohttpd's own message for a request it refuses itself (no handler runs)
    d.raw(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")
    lib.wait_log(d, lambda t: "odd-1" in access_ids(t) and any(
        o.get("msg", "").startswith("libmicrohttpd: ") for o in json_lines(t)),
        "the odd path's access line and a libmicrohttpd line")
    parsed = []
    for line in d.log_text().splitlines():
        try:
            parsed.append(json.loads(line))
        except ValueError:
            check(False, "a log line that is not JSON after odd requests: %r" % line[:200])
    odd = [o for o in parsed if o.get("request_id") == "odd-1"]
    check(odd and odd[0]["path"].startswith("/a\n\""), "the odd path logged as JSON: %r" % odd)
    check(any(o["msg"].startswith("libmicrohttpd: ") and o["level"] == "warn" for o in parsed),
          "libmicrohttpd's messages go through the same logger")


def wait_ready(port, proc, log_path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path) as f:
                raise RuntimeError("kogpt2d exited %d:\n%s" % (proc.returncode, f.read()))
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/readyz")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("kogpt2d did not become ready")


def test_env(model_dir, tmp):
    """Every flag from its variable: the model, port, alias (a flag wins), a switch."""
    port = lib.free_port()
    env = clean_env(KOGPT2_MODEL=model_dir, KOGPT2_PORT=str(port), KOGPT2_ALIAS="from-env",
                    KOGPT2_MAX_BATCH="2", KOGPT2_QUIET="1", KOGPT2_API_KEY="env-key",
                    KOGPT2_LOG_FORMAT="json", KOGPT2_DEVICE=os.environ.get("KG_TEST_DEVICE", "auto"))
    log_path = os.path.join(tmp, "env.log")
    with open(log_path, "w") as log:
        proc = subprocess.Popen([lib.kogpt2d_path(), "--alias", "from-flag", "--threads", "2",
                                 "--host", "127.0.0.1"], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        wait_ready(port, proc, log_path)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/v1/models", headers={"Authorization": "Bearer env-key"})
        r = c.getresponse()
        body = json.loads(r.read())
        check(r.status == 200 and body["data"][0]["id"] == "from-flag",
              "KOGPT2_MODEL and KOGPT2_PORT used, --alias wins over KOGPT2_ALIAS: %r" % body)
        c.request("GET", "/v1/models")
        r = c.getresponse()
        r.read()
        check(r.status == 401, "KOGPT2_API_KEY honoured (%d)" % r.status)
    finally:
        proc.terminate()
        proc.wait(30)
    with open(log_path) as f:
        lines = [l for l in f.read().splitlines() if l.strip()]
    check(lines and all(l.startswith("{") for l in lines), "KOGPT2_LOG_FORMAT=json honoured")
    check(not any('"type":"access"' in l for l in lines), "KOGPT2_QUIET=1 honoured")
    # bad values: an error naming the variable, exit 2
    for var, val in (("KOGPT2_PORT", "eighty"), ("KOGPT2_MAX_BATCH", "0"),
                     ("KOGPT2_QUIET", "maybe"), ("KOGPT2_LOG_FORMAT", "xml"),
                     ("KOGPT2_DTYPE", "f8"), ("KOGPT2_API_KEY", "has space")):
        r = subprocess.run([lib.kogpt2d_path(), "--model", model_dir],
                           env=clean_env(**{var: val}), capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and var in r.stderr,
              "%s=%s: exit 2 naming it (%d: %s)" % (var, val, r.returncode, r.stderr.strip()))
    # a bad flag value names the flag, also where its variable holds a good one
    r = subprocess.run([lib.kogpt2d_path(), "--model", model_dir, "--port", "x"],
                       env=clean_env(KOGPT2_PORT="1"), capture_output=True, text=True, timeout=60)
    check(r.returncode == 2 and "--port" in r.stderr, "a bad flag names the flag: %s" % r.stderr)


def test_key_files(model_dir, tmp):
    empty = os.path.join(tmp, "empty.keys")
    with open(empty, "w") as f:
        f.write("# only a comment\n\n   \n")
    for args, what in ((["--api-key-file", empty], "no API key in it"),
                       (["--api-key-file", os.path.join(tmp, "absent.keys")], "absent.keys"),
                       (["--api-key-file", tmp], "not a regular file")):
        r = subprocess.run([lib.kogpt2d_path(), "--model", model_dir] + args, env=clean_env(),
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 2 and "--api-key-file" in r.stderr and what in r.stderr,
              "%s: a clear error (%d: %s)" % (args[-1], r.returncode, r.stderr.strip()))


def test_text_log(model_dir, tmp):
    """The text log: access lines carry the id as id=..."""
    d = lib.Daemon(model_dir, log=os.path.join(tmp, "text.log"))
    try:
        d.request("GET", "/healthz", headers={"X-Request-Id": "text-1"})
        # written as the request completes, maybe after its answer arrived
        log = lib.wait_log(d, lambda t: "id=text-1" in t, "the text-1 request's line")
        check(re.search(r'"GET /healthz" 200 \d+B [\d.]+ms id=text-1$', log, re.M),
              "the text request line ends with id=<request id>: %r" % log[-300:])
    finally:
        d.stop()


def main():
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_ops_")
    model_dir = lib.make_model(os.path.join(tmp, "model"))
    keys = os.path.join(tmp, "keys.txt")
    with open(keys, "w") as f:
        f.write("# the team's keys\n\n  key-three  \r\n#key-four\n")
    os.environ["KOGPT2_API_KEY"] = "from-env"  # replaced by the --api-key flags below
    try:
        d = lib.Daemon(model_dir, "--api-key", "key-one", "--api-key", "key-two",
                       "--api-key-file", keys, "--log-format", "json", "--max-body", "4096",
                       log=os.path.join(tmp, "json.log"))
    finally:
        del os.environ["KOGPT2_API_KEY"]
    return lib.run_tests([("--version, --help", test_version),
                          ("request ids, API keys", lambda: test_request_ids_and_keys(d)),
                          ("build_info", lambda: test_build_info(d)),
                          ("JSON log", lambda: test_json_log(d)),
                          ("environment variables", lambda: test_env(model_dir, tmp)),
                          ("key files", lambda: test_key_files(model_dir, tmp)),
                          ("text log", lambda: test_text_log(model_dir, tmp))],
                         daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
