#!/usr/bin/env python3
"""test_server_transport: kogpt2d's HTTP layer end to end (split from test_server_e2e.py, issue
33 item 6): static files and path traversal, charset on every text type, bad HTTP (body limits,
routes, methods, content types, garbage, control bytes in the log), slowloris cut at --timeout,
ambiguous framing, a 413 that http.client can read. kogpt2d on 127.0.0.1 with a small random
model (lib.make_model: 2 layers, 64 wide, n_ctx 128, the default model's 12,000-id SentencePiece
tokenizer), one daemon for the file, served with --web-dir, --max-body 4096 and --timeout 3.
Exit 0 pass, 1 fail, 77 skip."""
import json
import os
import re
import socket
import sys
import tempfile
import time

import test_server_lib as lib
from test_server_lib import check, expect_error, post


def test_static(d, web):
    st, hdrs, data = d.request("GET", "/")
    check(st == 200 and data == b"<h1>hi</h1>" and hdrs["content-type"].startswith("text/html")
          and "content-security-policy" in hdrs and hdrs["x-content-type-options"] == "nosniff",
          "GET / serves index.html %d %r" % (st, hdrs))
    st, hdrs, _ = d.request("GET", "/app.js")
    check(st == 200 and hdrs["content-type"].startswith("text/javascript"), "app.js type")
    # path traversal (issue 7): dot-dot segments plain, percent-encoded (either case, mixed,
    # double-encoded, overlong UTF-8), with backslashes, and absolute paths: always 404
    traversal = ("/../secret.txt", "/%2e%2e/secret.txt", "/%2E%2E/secret.txt", "/.%2e/secret.txt",
                 "/%2e./secret.txt", "/%252e%252e/secret.txt", "/%c0%ae%c0%ae/secret.txt",
                 "/sub/../../secret.txt", "/sub/%2e%2e/%2e%2e/secret.txt", "/./../secret.txt",
                 "/index.html/../../secret.txt", "/..%2fsecret.txt", "/%2e%2e%2fsecret.txt",
                 "/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/sub/../../../../../../etc/passwd",
                 "/..\\secret.txt", "/..%5csecret.txt", "/%2e%2e%5csecret.txt",
                 "/sub\\..\\..\\secret.txt", "/....//secret.txt", "/..;/secret.txt",
                 "/..%00/secret.txt", "//etc/passwd", "///etc/passwd", "/%2Fetc%2Fpasswd",
                 "/%2fetc/passwd", "/etc/passwd", "/\\etc\\passwd", "/%5cetc%5cpasswd",
                 "/c:/windows/win.ini", "/C:\\Windows\\win.ini", "/file:///etc/passwd",
                 "http://x/../secret.txt")
    # a NUL cannot cut a path short: "/index.html%00.js" is not index.html
    traversal += ("/index.html%00.js", "/index.html%00", "/%00", "/v1/models%00")
    for path in traversal + ("/out/passwd", "/outfile", "/sub/", "/sub", "/.hidden", "/nope.html"):
        raw = d.raw(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
        line = raw.split(b"\r\n", 1)[0]
        want = ([b"404"],) if path in traversal else ([b"404"], [b"403"], [b"400"])
        check(line.split(b" ")[1:2] in want and b"root:" not in raw and b"SECRET" not in raw,
              "static %s refused: %r" % (path, line))
    # a decoded %0a in a URL cannot forge a request-log line
    d.raw(b"GET /x%0a2020-01-01T00:00:00Z%20FORGED HTTP/1.1\r\nHost: x\r\nX-Request-Id: forged-1"
          b"\r\nConnection: close\r\n\r\n")
    # its line is written as it completes, maybe after the answer arrived
    log = lib.wait_log(d, lambda t: "id=forged-1" in t, "the %0a request's access line")
    check(not any(l.startswith("2020-01-01T00:00:00Z") for l in log.splitlines()),
          "no forged log line from %0a in a URL")


def test_charset(d):
    """Every text type says charset=utf-8, as a client library reads it (email.message, what
    http.client's headers are), so clients that guess never read Korean as ISO-8859-1."""
    import email.message

    def charset(hdrs):
        m = email.message.Message()
        m["Content-Type"] = hdrs.get("content-type", "")
        return m.get_content_type(), m.get_content_charset()

    body = {"messages": [{"role": "user", "content": "안녕"}], "max_tokens": 2}
    for what, (st, hdrs, data) in (
            ("JSON", d.request("POST", "/v1/chat/completions", body)),
            ("an error", d.request("POST", "/v1/chat/completions", {"messages": 1})),
            ("SSE", d.request("POST", "/v1/chat/completions", dict(body, stream=True))),
            ("/metrics", d.request("GET", "/metrics")),
            ("/healthz", d.request("GET", "/healthz")),
            ("index.html", d.request("GET", "/")),
            ("app.js", d.request("GET", "/app.js"))):
        ctype, cs = charset(hdrs)
        check(cs == "utf-8", "%s: %s says charset %r" % (what, ctype, cs))
        if ctype in ("application/json", "text/event-stream"):
            check(data.decode(cs) == data.decode("utf-8"), "%s decodes as UTF-8" % what)
    _, hdrs, _ = d.request("GET", "/metrics")
    check("version=0.0.4" in hdrs.get("content-type", ""), "/metrics keeps Prometheus' version")


def test_bad_http(d):
    expect_error(d, "POST", "/v1/next-token", b"x" * 10000, 413, "body over --max-body",
                 {"Content-Type": "application/json"})
    # chunked: no Content-Length, so the limit is found while reading (and the rest drained)
    chunk = b"x" * 3000
    req = (b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           (b"%x\r\n" % len(chunk) + chunk + b"\r\n") * 4 + b"0\r\n\r\n")
    out = d.raw(req)
    check(out.startswith(b"HTTP/1.1 413") and b"\"code\":413" in out, "chunked body over the limit: %r" % out[:80])
    expect_error(d, "GET", "/v1/nope", None, 404, "unknown route")
    expect_error(d, "POST", "/v1/nope", {"text": "a"}, 404, "unknown POST route")
    h, _ = expect_error(d, "GET", "/v1/next-token", None, 405, "GET on a POST route")
    check(h.get("allow") == "POST", "405 says Allow: POST (%r)" % h.get("allow"))
    expect_error(d, "DELETE", "/healthz", None, 405, "DELETE /healthz")
    expect_error(d, "PUT", "/index.html", b"x", 405, "PUT a static file")
    expect_error(d, "POST", "/v1/next-token", {"text": "a"}, 415, "text/plain body",
                 {"Content-Type": "text/plain"})
    expect_error(d, "POST", "/v1/next-token", b"text=a", 415, "form body",
                 {"Content-Type": "application/x-www-form-urlencoded"})
    check(d.json("POST", "/v1/tokenize", b"{\"text\":\"a\"}",
                 {"Content-Type": "application/json; charset=utf-8"})[0] == 200,
          "charset parameter accepted")
    expect_error(d, "OPTIONS", "/v1/next-token", None, 405, "OPTIONS without --cors-origin")
    st, hdrs, _ = d.request("GET", "/healthz")
    check("access-control-allow-origin" not in hdrs, "no CORS header without --cors-origin")
    check(hdrs.get("x-content-type-options") == "nosniff", "nosniff on API replies")
    # garbage instead of HTTP: MHD answers 400 or closes; either way the daemon lives
    d.raw(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(64))
    d.raw(b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    check(d.request("GET", "/healthz")[0] == 200, "daemon lives after garbage and huge URLs")
    # control bytes in the method and the path reach the access log escaped, never raw (a
    # raw ESC or CR could rewrite the terminal or forge a log line)
    d.raw(b"G\x1b[2JE\x08T /healthz HTTP/1.1\r\nHost: x\r\nX-Request-Id: ctl-1\r\n"
          b"Connection: close\r\n\r\n")
    d.raw(b"GET /\x1b[31mred\x7f HTTP/1.1\r\nHost: x\r\nX-Request-Id: ctl-2\r\n"
          b"Connection: close\r\n\r\n")
    # their lines are written as they complete, maybe after the answers arrived
    lib.wait_log(d, lambda t: "id=ctl-1" in t and "id=ctl-2" in t,
                 "the control-byte requests' access lines")
    with open(d.log_path, "rb") as f:
        log = f.read()
    check(not any(c in log for c in (b"\x1b", b"\x08", b"\x7f")),
          "no raw control byte in the access log")
    check(b"G\\x1b[2JE\\x08" in log and b"/\\x1b[31mred\\x7f" in log,
          "the method and the path logged escaped: %r" % log[-400:])


def test_slow_clients(d, timeout_s):
    """Slowloris: half a request stalls; others are served; the stall is cut at --timeout."""
    stalled = []
    for part in (b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\n",  # headers never end
                 b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"text\":"):  # body never ends
        s = socket.create_connection(("127.0.0.1", d.port))
        s.sendall(part)
        stalled.append(s)
    t0 = time.time()
    j = post(d, "/v1/next-token", {"text": "안녕", "top_k": 3})
    check(len(j["candidates"]) == 3 and time.time() - t0 < 2, "served while others stall")
    for s in stalled:
        s.settimeout(timeout_s + 10)
        try:
            data = s.recv(4096)
        except OSError:
            data = b""
        check(data in (b"",) or data.startswith(b"HTTP/1.1 408"), "stalled client cut: %r" % data[:60])
        check(time.time() - t0 < timeout_s + 8, "stalled client cut within the timeout")
        s.close()


def test_framing(d):
    """Ambiguous or malformed request framing gets exactly one well-formed 4xx, at once."""
    body = b'{"text":"abc","top_k":2}'
    head = b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    cases = [(b"Content-Length: 24\r\nContent-Length: 5\r\n", 400, "two Content-Lengths"),
             (b"Content-Length: 24\r\nContent-Length: 24\r\n", 400, "a repeated Content-Length"),
             (b"Transfer-Encoding: gzip, chunked\r\n", 400, "an unknown Transfer-Encoding"),
             (b"Transfer-Encoding: identity\r\nContent-Length: 24\r\n", 400, "TE identity"),
             (b"Transfer-Encoding: chunked\r\nContent-Length: 24\r\n", 400, "TE and CL"),
             (b"Content-Length: 18446744073709551616\r\n", 413, "Content-Length 2^64")]
    for v in (b"-1", b"+24", b"0x18", b"24, 24", b" ", b"2 4"):
        cases.append((b"Content-Length: " + v + b"\r\n", 400, "Content-Length %r" % v))
    for extra, status, what in cases:
        t0 = time.time()
        out = d.raw(head + extra + b"\r\n" + body, shutdown=False, timeout=5)
        dt = time.time() - t0
        check(out.startswith(b"HTTP/1.1 %d" % status), "%s: %d, got %r" % (what, status, out[:40]))
        check(out.count(b"HTTP/1.1 ") == 1, "%s: one response head: %r" % (what, out[:300]))
        h, _, b = out.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)\r\ncontent-length: *(\d+)", h)
        check(m is not None and int(m.group(1)) == len(b), "%s: the body its head announces" % what)
        check(dt < 2, "%s: answered at once (%.2fs)" % (what, dt))
    check(d.request("GET", "/healthz")[0] == 200, "daemon serves after bad framing")


def test_linger(d):
    """A body over --max-body (4096 here) sent whole before the answer is read (as Python's
    http.client, requests and httpx do) still gets its 413, not a broken pipe; a body far over
    the limit is refused before it is read."""
    for size in (5000, 300000, 4 << 20):
        c = d.conn(timeout=30)
        try:
            c.request("POST", "/v1/next-token", body=b"x" * size,
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            j = json.loads(r.read())
            check(r.status == 413 and j["error"]["code"] == 413,
                  "%d-byte body: 413 read by http.client (%d)" % (size, r.status))
        except OSError as e:
            check(False, "%d-byte body: %r instead of the 413" % (size, e))
        finally:
            c.close()
    t0 = time.time()
    out = d.raw(b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\nxxxx" % (1 << 30), shutdown=False)
    check(out.startswith(b"HTTP/1.1 413") and time.time() - t0 < 2,
          "a 1 GiB body is refused at once: %r" % out[:40])


def web_dir(tmp):
    """index.html, app.js, a hidden file, and links out of the directory; a secret beside it."""
    web = os.path.join(tmp, "web")
    os.makedirs(os.path.join(web, "sub"))
    with open(os.path.join(web, "index.html"), "w") as f:
        f.write("<h1>hi</h1>")
    with open(os.path.join(web, "app.js"), "w") as f:
        f.write("1;")
    with open(os.path.join(web, ".hidden"), "w") as f:
        f.write("SECRET")
    with open(os.path.join(tmp, "secret.txt"), "w") as f:
        f.write("SECRET")
    os.symlink("/etc", os.path.join(web, "out"))
    os.symlink(os.path.join(tmp, "secret.txt"), os.path.join(web, "outfile"))
    return web


def main():
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_transport_")
    model_dir = lib.make_model(os.path.join(tmp, "model"))
    web = web_dir(tmp)
    timeout_s = 3
    d = lib.Daemon(model_dir, "--web-dir", web, "--max-body", "4096", "--timeout",
                   str(timeout_s), log=os.path.join(tmp, "kogpt2d.log"))
    return lib.run_tests([("static", lambda: test_static(d, web)),
                          ("charset", lambda: test_charset(d)),
                          ("bad HTTP", lambda: test_bad_http(d)),
                          ("slow clients", lambda: test_slow_clients(d, timeout_s)),
                          ("framing", lambda: test_framing(d)),
                          ("lingering 413", lambda: test_linger(d))], daemons=[d], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
