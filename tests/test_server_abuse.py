#!/usr/bin/env python3
"""kogpt2d under abuse (issue 7): the limits that keep one client from hurting the rest.

- soak: 64 clients mixing next-token, streamed generation, tokenize and 10 % bad requests
  of eight kinds (each must get its 4xx): no 5xx, no connection errors; p50/p99 per kind;
  RSS after the measured round within 5 % of RSS after a warm-up round of the same mix
  (at least 5 s: the heap's high-water mark needs a few seconds of peak concurrency; RSS is
  the median of 5 samples once idle).
  KG_SERVER_SOAK_S sets the measured round (default 5 s; the issue's run is 60).
- slow drip: 200 connections each sending a request one byte a second (half drip the
  headers, half the body) while 8 normal clients keep asking; the normal clients' latency
  is measured before the drip (baseline) and while all drip connections are open, in the
  same run. Bound: 0 failures and p50 during <= 3 x baseline p50 + 200 ms (a shared 2-core
  machine: the 200 sockets cost the server little, but the test's own Python threads share
  the cores with the daemon, so only a gross slowdown, e.g. workers blocked on drippers,
  fails it). Every drip connection must be cut by --request-timeout: not before it (the
  idle --timeout never fires on a client that sends a byte a second), and within 4 s after.
- max connections: one connection over --max-connections gets 503 + Retry-After + JSON and
  Connection: close, and the count comes back down when connections close.
- memory per request: --max-tokenize bounds /v1/tokenize and /v1/detokenize (422), a
  generation stops at the context (the KV cache never exceeds n_ctx positions).
- heavy bodies (issue 24): a megabyte of digits (one 1 MiB word: the slowest text to encode
  found) to each endpoint that tokenizes is a 422 naming its limit (refused by length before
  encoding, or when the count passes it); four at once on each (digits, Hangul, combining
  marks), with 2 HTTP threads, never hold up /healthz (bound 0.5 s: the work runs on the work
  pool; before, 1.0-1.4 s); idle RSS after all of them within 8 MB of before (+18 MB before).
- usage (issue 24): prompt_tokens counts each prompt once, whatever n, streamed or not, for
  completions (one prompt, a prompt array, token ids) and chat; completion_tokens every choice.
- chat template work (issue 24): a template running `in` 16384 times over 4 KB messages is
  refused by its work budget (before, it was charged per 64 bytes and ran for ~0.6 s); four
  at once never hold up /healthz.
- slow clients (issue 24): 600 dripping connections from 127.0.0.1 (more than twice
  --max-connections 16): with --max-connections-per-ip 8 a client from 127.0.0.2 is answered
  at once and a new one from 127.0.0.1 gets a 503 at once (issue 32: never a bare close; the
  address's longest-waiting refused connections are closed instead, counted); without a
  per-address limit a client from 127.0.0.2 gets its answer (or a 503) within 2.5 s. Before,
  both waited for --request-timeout (30 s) behind the drippers in the listen backlog.

Exit 0 pass, 1 fail, 77 skip (no binary).
"""
import http.client
import json
import os
import random
import selectors
import socket
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_server_lib as lib  # noqa: E402

# the shared check(): records a failure and goes on
check = lib.check


def pct(xs, p):
    """The p-th percentile (nearest rank) of xs, or nan when empty."""
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))]


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def sanitized(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "libasan" in f.read()


def idle_rss(d):
    """RSS once the daemon is idle: the median of 5 samples over half a second."""
    time.sleep(0.5)
    xs = []
    for _ in range(5):
        xs.append(rss_kb(d.proc.pid))
        time.sleep(0.1)
    return sorted(xs)[2]


# --- soak ---

TEXTS = ["안녕하세요", "오늘 날씨는", "한국어 모델", "서울의 봄", "KoGPT2 는", "옛날 옛적에",
         "여러분 2019년 수고하셨습니다.", "커피 한 잔"]

JSON = {"Content-Type": "application/json"}
# (name, method, path, body, headers, expected status): the 10 % bad requests
BAD = [
    ("malformed JSON", "POST", "/v1/next-token", b"{\"text\": \"a\" \"top_k\": 3}", JSON, 400),
    ("wrong type", "POST", "/v1/next-token", b"{\"text\": \"a\", \"top_k\": \"10\"}", JSON, 400),
    ("invalid UTF-8", "POST", "/v1/tokenize", b"{\"text\": \"\xff\xfe\"}", JSON, 400),
    ("out of range", "POST", "/v1/generate", b"{\"text\": \"a\", \"top_p\": 2}", JSON, 422),
    ("over-long prompt", "POST", "/v1/next-token",
     json.dumps({"tokens": list(range(5, 300))}).encode(), JSON, 422),
    ("body too large", "POST", "/v1/next-token", b"{\"text\": \"" + b"a" * 70000 + b"\"}", JSON,
     413),
    ("not JSON", "POST", "/v1/next-token", b"text=a", {"Content-Type": "text/plain"}, 415),
    ("unknown route", "POST", "/v1/nope", b"{}", JSON, 404),
    ("wrong method", "GET", "/v1/generate", None, None, 405),
    ("traversal", "GET", "/%2e%2e/%2e%2e/etc/passwd", None, None, 404),
]


def soak_client(d, k, stop_at, stats, lock):
    rng = random.Random(k)
    while time.time() < stop_at:
        x = rng.random()
        t0 = time.time()
        try:
            if x < 0.10:
                name, method, path, body, hdrs, want = BAD[rng.randrange(len(BAD))]
                kind = "bad"
                st, _, data = d.request(method, path, body, hdrs)
                ok = st == want and json.loads(data)["error"]["code"] == want
                what = "%s: %d, want %d" % (name, st, want)
            elif x < 0.40:
                kind = "next-token"
                st, _, data = d.request("POST", "/v1/next-token",
                                        {"text": TEXTS[rng.randrange(len(TEXTS))], "top_k": 10})
                ok = st == 200 and len(json.loads(data)["candidates"]) == 10
                what = "next-token %d %r" % (st, data[:100])
            elif x < 0.70:
                kind = "stream"
                i = rng.randrange(len(TEXTS))
                st, hdrs, data = d.request("POST", "/v1/generate",
                                           {"text": TEXTS[i], "max_tokens": 8, "seed": i,
                                            "stream": True})
                ev = lib.sse_events(data) if st == 200 else []
                ok = st == 200 and bool(ev) and json.loads(ev[-1]).get("done") is True
                what = "stream %d %r" % (st, data[-100:])
            else:
                kind = "tokenize"
                st, _, data = d.request("POST", "/v1/tokenize",
                                        {"text": TEXTS[rng.randrange(len(TEXTS))] * 4})
                ok = st == 200 and len(json.loads(data)["tokens"]) > 0
                what = "tokenize %d %r" % (st, data[:100])
        except Exception as e:  # a reset or a timeout is a failure, counted like a wrong status
            st, ok, what = 0, False, "%s raised %r" % (kind, e)
        dt = time.time() - t0
        with lock:
            s = stats.setdefault(kind, {"n": 0, "lat": [], "bad": [], "5xx": 0})
            s["n"] += 1
            s["lat"].append(dt)
            s["5xx"] += 500 <= st < 600
            if not ok:
                s["bad"].append(what)


def soak_round(d, n_clients, seconds):
    stats, lock = {}, threading.Lock()
    stop_at = time.time() + seconds
    threads = [threading.Thread(target=soak_client, args=(d, k, stop_at, stats, lock))
               for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


def test_soak(model_dir):
    seconds = float(os.environ.get("KG_SERVER_SOAK_S", "5"))
    warm = max(5.0, seconds / 3)  # RSS plateaus after ~10 s of this mix (measured)
    d = lib.Daemon(model_dir, "--max-batch", "8", "--max-queue", "128", "--max-body", "65536",
                   "--cache-mb", "16", "--timeout", "10", "--quiet",
                   log=os.path.join(model_dir, "soak.log"))
    try:
        soak_round(d, 64, warm)  # warm-up: arenas, caches and thread stacks reach their size
        before = idle_rss(d)
        stats = soak_round(d, 64, seconds)
        after = idle_rss(d)
        total = sum(s["n"] for s in stats.values())
        print("  soak: 64 clients, %.0f s (after a %.0f s warm-up): %d requests, %.0f/s" % (
            seconds, warm, total, total / seconds))
        for kind in ("next-token", "stream", "tokenize", "bad"):
            s = stats.get(kind, {"n": 0, "lat": [], "bad": [], "5xx": 0})
            print("    %-10s %6d requests  p50 %7.1f ms  p99 %7.1f ms  5xx %d  wrong %d" % (
                kind, s["n"], 1e3 * pct(s["lat"], 50), 1e3 * pct(s["lat"], 99), s["5xx"],
                len(s["bad"])))
            check(s["n"] > 0, "soak: some %s requests ran" % kind)
            check(s["5xx"] == 0, "soak: %d 5xx on %s" % (s["5xx"], kind))
            check(not s["bad"], "soak: %d wrong answers on %s: %r" % (len(s["bad"]), kind,
                                                                     s["bad"][:3]))
        bad_share = stats.get("bad", {"n": 0})["n"] / max(1, total)
        check(0.03 < bad_share < 0.2, "soak: bad requests are about 10 %% (%.1f %%)" %
              (100 * bad_share))
        growth = (after - before) / before
        # (kogpt2_cache_bytes is labelled by model: the unlabelled line this read never came)
        cache = lib.metric_sum(lib.metrics(d), "kogpt2_cache_bytes")
        print("    RSS %d kB after the warm-up -> %d kB after the round (%+.2f %%); prefix cache"
              " %d bytes" % (before, after, 100 * growth, cache))
        if sanitized(d.proc.pid):  # ASan's quarantine keeps freed memory: RSS says nothing
            print("    (AddressSanitizer build: RSS not checked; leaks are LeakSanitizer's job)")
        else:
            check(growth < 0.05, "soak: RSS growth %.2f %% (< 5 %%)" % (100 * growth))
        check(d.proc.poll() is None and d.request("GET", "/healthz")[0] == 200,
              "soak: daemon alive")
    finally:
        check(d.stop() == 0, "soak daemon exits 0")


# --- slow drip ---

def normal_client(d, k, stop, log):
    """Asks next-token (3 of 4) and tokenize in a loop; log gets (t_end, seconds, ok)."""
    i = k
    while not stop.is_set():
        i += 1
        t0 = time.time()
        try:
            if i % 4:
                st, _, data = d.request("POST", "/v1/next-token",
                                        {"text": TEXTS[i % len(TEXTS)], "top_k": 5}, timeout=20)
                ok = st == 200 and len(json.loads(data)["candidates"]) == 5
            else:
                st, _, data = d.request("POST", "/v1/tokenize", {"text": TEXTS[i % len(TEXTS)]},
                                        timeout=20)
                ok = st == 200
        except Exception:
            ok = False
        t1 = time.time()
        log.append((t1, t1 - t0, ok))
        time.sleep(0.01)


def drip(port, n, cut_log, stop):
    """n connections, each sending a request one byte a second (even ones drip the headers
    forever, odd ones send headers then drip a 100 kB body). cut_log gets, per connection,
    the seconds from its opening to the server's close (None if never cut)."""
    sel = selectors.DefaultSelector()
    conns = []
    for k in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setblocking(False)
        if k % 2:
            head = (b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                    b"\r\nContent-Length: 100000\r\n\r\n")
            s.send(head)
            data = b"{\"text\": \"" + b"a" * 99990 + b"\"}"
        else:
            data = b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 100000
        c = {"sock": s, "data": data, "pos": 0, "t0": time.time(), "cut": None}
        conns.append(c)
        sel.register(s, selectors.EVENT_READ, c)
    open_ = len(conns)
    next_send = time.time()
    while open_ and not stop.is_set():
        now = time.time()
        if now >= next_send:
            for c in conns:
                if c["cut"] is None:
                    try:
                        c["sock"].send(c["data"][c["pos"]:c["pos"] + 1])
                        c["pos"] += 1
                    except OSError:  # reset: cut; the read side below confirms it
                        pass
            next_send += 1.0
        for key, _ in sel.select(timeout=max(0.0, min(0.2, next_send - time.time()))):
            c = key.data
            try:
                got = c["sock"].recv(4096)
            except BlockingIOError:
                continue
            except OSError:
                got = b""
            if not got:  # closed by the server
                c["cut"] = time.time() - c["t0"]
                sel.unregister(c["sock"])
                c["sock"].close()
                open_ -= 1
            else:
                c["answer"] = got
    for c in conns:
        if c["cut"] is None:
            c["sock"].close()
        cut_log.append(c["cut"])


def test_slow_drip(model_dir):
    n_drip = int(os.environ.get("KG_SERVER_DRIP_N", "200"))
    req_timeout = int(os.environ.get("KG_SERVER_DRIP_TIMEOUT_S", "6"))
    d = lib.Daemon(model_dir, "--max-batch", "8", "--timeout", "3", "--request-timeout",
                   str(req_timeout), "--max-connections", "256",
                   log=os.path.join(model_dir, "drip.log"))
    try:
        stop = threading.Event()
        log = []
        clients = [threading.Thread(target=normal_client, args=(d, k, stop, log))
                   for k in range(8)]
        for t in clients:
            t.start()
        time.sleep(3)
        t_base_end = time.time()
        cut_log, drip_stop = [], threading.Event()
        dripper = threading.Thread(target=drip, args=(d.port, n_drip, cut_log, drip_stop))
        t_drip0 = time.time()
        dripper.start()
        dripper.join(req_timeout + 15)
        drip_stop.set()
        dripper.join()
        time.sleep(1)
        stop.set()
        for t in clients:
            t.join()
        t_first_cut = t_drip0 + min([c for c in cut_log if c is not None] or [req_timeout])
        base = [dt for t1, dt, ok in log if t1 <= t_base_end]
        # while every drip connection is open: from 1 s after the drip began (all opened)
        # to the first cut
        during = [dt for t1, dt, ok in log if t_drip0 + 1 <= t1 - dt and t1 <= t_first_cut]
        failed = [x for x in log if not x[2]]
        p50b, p99b, p50d, p99d = (pct(base, 50), pct(base, 99), pct(during, 50),
                                  pct(during, 99))
        cuts = [c for c in cut_log if c is not None]
        print("  slow drip: %d connections, --request-timeout %d s, --timeout 3 s" % (
            n_drip, req_timeout))
        print("    8 normal clients: baseline %d requests p50 %.1f ms p99 %.1f ms; during the "
              "drip %d requests p50 %.1f ms p99 %.1f ms; %d failed" % (
                  len(base), 1e3 * p50b, 1e3 * p99b, len(during), 1e3 * p50d, 1e3 * p99d,
                  len(failed)))
        if cuts:
            print("    drip connections cut after %.2f .. %.2f s (p50 %.2f s); %d of %d cut" % (
                min(cuts), max(cuts), pct(cuts, 50), len(cuts), n_drip))
        check(not failed, "slow drip: %d normal requests failed" % len(failed))
        check(len(base) >= 8 and len(during) >= 8,
              "slow drip: enough normal requests measured (%d, %d)" % (len(base), len(during)))
        check(p50d <= 3 * p50b + 0.2, "slow drip: normal p50 %.1f ms during vs %.1f ms before "
              "(bound 3x + 200 ms)" % (1e3 * p50d, 1e3 * p50b))
        check(len(cuts) == n_drip, "slow drip: every drip connection cut (%d of %d)" % (
            len(cuts), n_drip))
        check(all(req_timeout - 1 <= c <= req_timeout + 4 for c in cuts),
              "slow drip: cut by --request-timeout %d s (%.2f .. %.2f s)" % (
                  req_timeout, min(cuts or [0]), max(cuts or [0])))
        lib.wait_log(d, lambda t: "request timeout: closed" in t, "slow drip: the cuts are logged")
        check(d.request("GET", "/healthz")[0] == 200, "slow drip: daemon serving afterwards")
    finally:
        check(d.stop() == 0, "drip daemon exits 0")


# --- connection limit ---

def admitted(d, conn=None):
    """kogpt2_connections{state="admitted"} asked on conn (a new connection if None); -1 when
    refused (503) or not there."""
    try:
        m = lib.metrics(d, conn=conn)
    except OSError:  # a refused keep-alive connection closed after its 503
        return -2
    return int(m.get('kogpt2_connections{state="admitted"}', -1))


def test_max_connections(model_dir):
    d = lib.Daemon(model_dir, "--max-connections", "8", "--timeout", "20",
                   log=os.path.join(model_dir, "conns.log"))
    held = []
    try:
        for _ in range(7):  # hold 7 of the 8 allowed connections, idle
            held.append(socket.create_connection(("127.0.0.1", d.port)))
        # the 8th asks /metrics until MHD has accepted (counted) all 8, however loaded this
        # machine is, before the next connection comes
        probe = d.conn()
        held.append(probe)
        lib.wait_for(lambda: admitted(d, probe), lambda n: n == 8,
                     "the 8 held connections admitted")
        for k in range(3):
            st, hdrs, data = d.request("GET", "/healthz" if k else "/v1/models")
            try:
                e = json.loads(data)["error"]
            except (ValueError, KeyError):
                e = {}
            check(st == 503 and hdrs.get("retry-after") == "1" and e.get("code") == 503 and
                  "connections" in e.get("message", "") and
                  hdrs.get("connection", "").lower() == "close",
                  "connection over the limit: 503 + Retry-After + JSON (%d %r %r)" % (
                      st, hdrs, data[:120]))
        for s in held:
            s.close()
        held = []
        # the count came back down: once the daemon has seen the 8 closes (a new connection
        # asking /metrics sees itself alone, and then the one that asked last closed too),
        # 8 kept-alive connections are all served ...
        lib.wait_for(lambda: admitted(d), lambda n: n == 1,
                     "the 8 closed connections no longer counted")
        conns = [d.conn()]
        lib.wait_for(lambda: admitted(d, conns[0]), lambda n: n == 1,
                     "the connection that asked /metrics no longer counted")
        conns += [d.conn() for _ in range(7)]
        codes = []
        for c in conns:
            c.request("GET", "/healthz")
            r = c.getresponse()
            r.read()
            codes.append(r.status)
        check(codes == [200] * 8, "8 connections under the limit served: %r" % codes)
        # ... and while they stay open a ninth is refused, then served once one closes
        st = d.request("GET", "/healthz")[0]
        check(st == 503, "ninth connection refused while 8 are open: %d" % st)
        conns[0].close()
        # each new connection is refused (503) until the daemon has seen the close, then
        # served, counted with the 7 still open (a slow poll: many refusals still open would
        # let the daemon shed an idle admitted one)
        n = lib.wait_for(lambda: admitted(d), lambda n: n >= 0, "served again once one closed",
                         interval=0.2)
        check(n == 8, "served as the 8th, beside the 7 still open: %r" % n)
        for c in conns[1:]:
            c.close()
    finally:
        for s in held:
            s.close()
        check(d.stop() == 0, "connection-limit daemon exits 0")


# --- memory per request ---

def test_request_memory(model_dir):
    d = lib.Daemon(model_dir, "--max-tokenize", "1000", "--max-body", "65536",
                   log=os.path.join(model_dir, "mem.log"))
    try:
        st, j = d.json("POST", "/v1/tokenize", {"text": "가 " * 2000})
        check(st == 422 and "max-tokenize" in j["error"]["message"] and
              j["error"]["param"] == "text", "tokenize over --max-tokenize: %d %r" % (st, j))
        st, j = d.json("POST", "/v1/tokenize", {"text": "가 " * 100})
        check(st == 200 and 100 <= len(j["tokens"]) <= 1000, "tokenize under the limit: %d" % st)
        st, j = d.json("POST", "/v1/detokenize", {"tokens": [8702] * 1001})
        check(st == 422 and "max-tokenize" in j["error"]["message"] and
              j["error"]["param"] == "tokens", "detokenize over --max-tokenize: %d %r" % (st, j))
        st, j = d.json("POST", "/v1/detokenize", {"tokens": [8702] * 1000})
        check(st == 200 and j["text"], "detokenize at the limit: %d" % st)
        # a generation stops when the context is full: the KV cache holds at most n_ctx (128)
        # positions, and the last token, sampled from position 127's logits, is not fed back
        st, j = d.json("POST", "/v1/generate", {"tokens": [5] * 100, "max_tokens": 128,
                                                "ignore_eos": True, "temperature": 0})
        check(st == 200 and j["finish_reason"] == "length" and
              j["prompt_tokens"] + j["generated_tokens"] == 129,
              "generation stops at n_ctx: %d %r" % (st, {k: j.get(k) for k in (
                  "finish_reason", "prompt_tokens", "generated_tokens")}))
        for what, body in (("max_tokens over n_ctx", {"text": "a", "max_tokens": 129}),
                           ("logprobs over 20", {"text": "a", "logprobs": 21}),
                           ("5 stop strings", {"text": "a", "stop": list("abcde")}),
                           ("a 257-byte stop string", {"text": "a", "stop": ["x" * 257]})):
            st, j = d.json("POST", "/v1/generate", body)
            check(st == 422, "%s: %d %r" % (what, st, j))
        st, j = d.json("POST", "/v1/next-token", {"text": "a", "top_k": 101})
        check(st == 422, "top_k over 100: %d" % st)
        st, _, _ = d.request("POST", "/v1/tokenize", b"{\"text\": \"" + b"a" * 65536 + b"\"}",
                             JSON)
        check(st == 413, "body over --max-body: %d" % st)
        # headers are bounded by MHD's per-connection memory (32 kB): refused, daemon lives
        out = d.raw(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 +
                    b"\r\n\r\n")
        check(not out or out.split(b" ")[1][:1] == b"4", "huge header refused: %r" % out[:40])
        check(d.request("GET", "/healthz")[0] == 200, "daemon alive after the limits")
    finally:
        check(d.stop() == 0, "memory-limit daemon exits 0")


# --- heavy bodies: the limits hold before the work, and the work is off the HTTP threads ---

def digits(n, seed=7):
    """n bytes of random digits: one word of n bytes, the slowest text to BPE found (each of
    the 4 parallel encodes of a megabyte took 2-5 s before the encode limit)."""
    rng = random.Random(seed)
    return "".join(str(rng.randrange(10)) for _ in range(n))


# (path, body of a text, what the 422 must name)
HEAVY = [
    ("/v1/tokenize", lambda t: {"text": t}, "max-tokenize"),
    ("/v1/completions", lambda t: {"prompt": t, "max_tokens": 1}, "n_ctx"),
    ("/v1/chat/completions",
     lambda t: {"messages": [{"role": "user", "content": t}], "max_tokens": 1}, "n_ctx"),
    ("/v1/generate", lambda t: {"text": t, "max_tokens": 1}, "n_ctx"),
    ("/v1/next-token", lambda t: {"text": t}, "n_ctx"),
    ("/v1/score", lambda t: {"text": t}, "n_ctx"),
]


def parallel_with_healthz(d, path, body, n=4):
    """n requests of body at once while /healthz is asked in a loop: their (status, seconds)
    and the slowest /healthz in seconds."""
    res, lock = [], threading.Lock()

    def one():
        t0 = time.time()
        try:
            st = d.request("POST", path, body, JSON, timeout=120)[0]
        except Exception:  # a reset counts as a wrong answer
            st = 0
        with lock:
            res.append((st, time.time() - t0))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    worst = 0.0
    while any(t.is_alive() for t in threads):
        t0 = time.time()
        st = d.request("GET", "/healthz", timeout=60)[0]
        worst = max(worst, time.time() - t0 if st == 200 else 60.0)
        time.sleep(0.01)
    for t in threads:
        t.join()
    return res, worst


# The heavy bodies' model: a BPE tokenizer.json (the daemon's own tokenizer code) of the
# characters they are made of. The idle-RSS bound below is that tokenizer's; the default
# model's SentencePiece (libsentencepiece) keeps ~240 MB in the work threads' heaps after
# these bodies (measured, issue 33: a finding of its own, not this test's bound).
HEAVY_PIECES = (["\u2581"] + list("0123456789e\u00e9") +
                [chr(0xAC00 + i) for i in range(11172)])


def test_heavy_bodies(model_dir):
    bpe = lib.make_model(os.path.join(os.path.dirname(model_dir), "bpe"), pieces=HEAVY_PIECES)
    d = lib.Daemon(bpe, "--http-threads", "2", "--max-body", str(2 << 20), "--quiet",
                   log=os.path.join(model_dir, "heavy.log"))
    try:
        n = (1 << 20) - 64
        rng = random.Random(3)
        texts = [("digits", digits(n)),
                 ("Hangul", "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(n // 3))),
                 ("e + U+0301", "e\u0301" * (n // 3))]  # NFKC composes each pair
        text = texts[0][1]
        bodies = [(path, json.dumps(make(text), ensure_ascii=False).encode(), name)
                  for path, make, name in HEAVY]
        before = idle_rss(d)
        print("  one %d-byte text of digits to each endpoint:" % len(text))
        for path, body, name in bodies:
            t0 = time.time()
            st, _, data = d.request("POST", path, body, JSON, timeout=120)
            dt = time.time() - t0
            try:
                msg = json.loads(data)["error"]["message"]
            except (ValueError, KeyError):
                msg = ""
            print("    %-22s %d in %6.1f ms: %s" % (path, st, 1e3 * dt, msg[:70]))
            check(st == 422 and name in msg, "%s: a megabyte is a 422 naming %s: %d %r" % (
                path, name, st, msg))
        for kind, text in texts:
            print("  four at once, a megabyte of %s:" % kind)
            for path, make, name in HEAVY:
                body = json.dumps(make(text), ensure_ascii=False).encode()
                res, worst = parallel_with_healthz(d, path, body)
                print("    %-22s %s; slowest /healthz meanwhile %.1f ms" % (
                    path, " ".join("%d/%.2fs" % r for r in sorted(res)), 1e3 * worst))
                check(all(st == 422 for st, _ in res), "%s x4: all 422 %r" % (path, res))
                check(worst < 0.5, "%s x4 (%s): /healthz answered within 0.5 s (%.2f s)" % (
                    path, kind, worst))
        after = idle_rss(d)
        print("    idle RSS %d kB before, %d kB after (%+d kB)" % (before, after, after - before))
        if sanitized(d.proc.pid):
            print("    (AddressSanitizer build: RSS not checked)")
        else:  # before the fixed mmap threshold: +18 MB
            check(after - before < 8 << 10, "idle RSS grew %d kB (bound 8 MB)" % (after - before))
    finally:
        check(d.stop() == 0, "heavy-body daemon exits 0")


# --- usage: a prompt counts once ---

def usage_of(d, path, body):
    """The usage object of a reply, or of a stream's usage chunk (include_usage)."""
    if not body.get("stream"):
        st, j = d.json("POST", path, body)
        return j.get("usage") if st == 200 else {"status": st, "error": j}
    st, _, data = d.request("POST", path, dict(body, stream_options={"include_usage": True}))
    events = lib.sse_events(data) if st == 200 else []
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    return next((c["usage"] for c in chunks if c.get("usage")), {"status": st})


def test_usage(model_dir):
    d = lib.Daemon(model_dir, "--quiet", log=os.path.join(model_dir, "usage.log"))
    try:
        def n_tokens(text):
            return len(d.json("POST", "/v1/tokenize", {"text": text})[1]["tokens"])

        p1, p2 = "안녕하세요 오늘은", "서울의 봄"
        gen = {"max_tokens": 4, "ignore_eos": True, "temperature": 0}
        cases = []
        for stream in (False, True):
            for n in (1, 4):
                cases.append(("completions n=%d%s" % (n, " stream" * stream),
                              dict(gen, prompt=p1, n=n, stream=stream), n_tokens(p1), 4 * n))
            cases.append(("completions [p1, p2] n=3%s" % (" stream" * stream),
                          dict(gen, prompt=[p1, p2], n=3, stream=stream),
                          n_tokens(p1) + n_tokens(p2), 4 * 6))
            cases.append(("completions [[ids], [ids]] n=2%s" % (" stream" * stream),
                          dict(gen, prompt=[[5, 6, 7], [8, 9]], n=2, stream=stream), 5, 4 * 4))
        for name, body, prompt, completion in cases:
            u = usage_of(d, "/v1/completions", body)
            want = {"prompt_tokens": prompt, "completion_tokens": completion,
                    "total_tokens": prompt + completion}
            check(u == want, "%s: usage %r, want %r" % (name, u, want))
        # chat: the rendered prompt ("<usr>안녕<sys>" by the default template) counts once
        msgs = {"messages": [{"role": "user", "content": "안녕"}], "max_tokens": 4,
                "temperature": 0}
        one = usage_of(d, "/v1/chat/completions", dict(msgs, n=1))
        rendered = n_tokens("<usr>안녕<sys>")
        check(one.get("prompt_tokens") == rendered, "chat n=1: prompt_tokens %r, want %d" % (
            one, rendered))
        for stream in (False, True):  # (a choice may end early at <usr> or the end of text)
            u = usage_of(d, "/v1/chat/completions", dict(msgs, n=4, stream=stream))
            check(u.get("prompt_tokens") == rendered and 4 <= u.get("completion_tokens", 0) <= 16
                  and u.get("total_tokens") == rendered + u.get("completion_tokens", 0),
                  "chat n=4%s: usage %r, prompt_tokens %d" % (" stream" * stream, u, rendered))
        print("  usage: %d completions cases and chat n=1/4, streamed or not" % len(cases))
    finally:
        check(d.stop() == 0, "usage daemon exits 0")


# --- the chat template's work budget bounds time ---

IN_TEMPLATE = ("{%- for m in messages -%}{%- for k in messages -%}"
               "{%- if messages[0].content in k.content -%}x{%- endif -%}"
               "{%- endfor -%}{%- endfor -%}")


def test_template_work(model_dir):
    tpl = os.path.join(model_dir, "in.jinja")
    with open(tpl, "w") as f:
        f.write(IN_TEMPLATE)
    d = lib.Daemon(model_dir, "--http-threads", "2", "--chat-template", tpl, "--quiet",
                   log=os.path.join(model_dir, "template.log"))
    try:
        # 128 x 128 searches for a 3-byte needle through 4000 bytes: 65 MB at memmem's worst
        msgs = [{"role": "user", "content": "aab"}] + [{"role": "user", "content": "a" * 4000}
                                                        for _ in range(127)]
        body = json.dumps({"messages": msgs, "max_tokens": 1}).encode()
        t0 = time.time()
        st, _, data = d.request("POST", "/v1/chat/completions", body, JSON)
        dt = time.time() - t0
        msg = json.loads(data).get("error", {}).get("message", "") if st != 200 else ""
        print("  chat template, 16384 `in`s over 4 KB: %d in %.1f ms: %s" % (st, 1e3 * dt,
                                                                           msg[:70]))
        check(st == 422 and "steps" in msg,
              "an `in` over long strings pays per byte searched: %d %r" % (st, msg))
        res, worst = parallel_with_healthz(d, "/v1/chat/completions", body)
        print("    4 at once: %s; slowest /healthz meanwhile %.1f ms" % (
            " ".join("%d/%.2fs" % r for r in sorted(res)), 1e3 * worst))
        check(worst < 0.5, "template x4: /healthz answered within 0.5 s (%.2f s)" % worst)
    finally:
        check(d.stop() == 0, "template daemon exits 0")
        os.remove(tpl)


# --- slow clients: a flood of drippers never makes other clients wait ---

class Drippers:
    """n connections from source address src, each sending a request head one byte a second,
    never finishing it (errors, e.g. the server closing them, are ignored)."""

    def __init__(self, port, n, src):
        self.socks, self.stop_ev = [], threading.Event()
        for _ in range(n):
            s = socket.socket()
            s.bind((src, 0))
            s.settimeout(5)
            try:
                s.connect(("127.0.0.1", port))
                s.send(b"POST /v1/next-token HTTP/1.1\r\nHost: x\r\n")
                s.setblocking(False)
            except OSError:
                pass
            self.socks.append(s)
        self.thread = threading.Thread(target=self.drip)
        self.thread.start()

    def drip(self):
        while not self.stop_ev.wait(1.0):
            for s in self.socks:
                try:
                    s.send(b"X")
                except OSError:
                    pass

    def close(self):
        self.stop_ev.set()
        self.thread.join()
        for s in self.socks:
            s.close()


def timed_get(port, src, path="/healthz", timeout=10):
    """(status or "closed", seconds, headers) for GET path from source address src."""
    t0 = time.time()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(src, 0))
    try:
        c.request("GET", path)
        r = c.getresponse()
        r.read()
        return r.status, time.time() - t0, {k.lower(): v for k, v in r.getheaders()}
    except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
        return "closed", time.time() - t0, {}
    except socket.timeout:
        return "timeout", time.time() - t0, {}
    finally:
        c.close()


def metrics_from(d, src):
    """lib.metrics asked on a connection from the address src."""
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=10, source_address=(src, 0))
    try:
        return lib.metrics(d, conn=c)
    finally:
        c.close()


def flood_seen(d, src):
    """How many connections from elsewhere than src the daemon has seen, asked from src:
    admitted (but src's own), refused, or closed as refusals."""
    m = metrics_from(d, src)
    return int(m.get('kogpt2_connections{state="admitted"}', 1) - 1 +
               m.get('kogpt2_connections{state="refused"}', 0) +
               m.get('kogpt2_rejected_total{reason="closed"}', 0))


def test_slow_clients(model_dir):
    n = 600
    # per address: the other address is served, the flooding one refused at once
    d = lib.Daemon(model_dir, "--max-connections", "16", "--max-connections-per-ip", "8",
                   "--request-timeout", "30", "--timeout", "30", "--quiet",
                   log=os.path.join(model_dir, "slow_ip.log"))
    drippers = None
    try:
        drippers = Drippers(d.port, n, "127.0.0.1")
        # the flood in place: every dripper seen (a 1.5 s sleep guessed it; a sanitized
        # daemon on a loaded machine may take longer to see 600 connections)
        lib.wait_for(lambda: flood_seen(d, "127.0.0.2"), lambda k: k >= n,
                     "the %d drippers seen by the daemon" % n)
        other = [timed_get(d.port, "127.0.0.2") for _ in range(3)]
        same = timed_get(d.port, "127.0.0.1")
        print("  %d drippers from 127.0.0.1, --max-connections 16 --max-connections-per-ip 8:"
              % n)
        print("    127.0.0.2: %s; a new 127.0.0.1: %s in %.0f ms" % (
            ", ".join("%s in %.0f ms" % (st, 1e3 * dt) for st, dt, _ in other), same[0],
            1e3 * same[1]))
        check(all(st == 200 and dt < 2 for st, dt, _ in other),
              "another address is answered at once: %r" % [(st, dt) for st, dt, _ in other])
        check(same[0] == 503 and same[2].get("retry-after") == "1" and same[1] < 2,
              "the flooding address: a 503 at once, never a bare close: %r" % (same[:2],))
        closed = metrics_from(d, "127.0.0.2").get('kogpt2_rejected_total{reason="closed"}')
        check(closed and closed >= n - 32, "its waiting refusals closed, counted: %r" % closed)
    finally:
        if drippers:
            drippers.close()
        check(d.stop() == 0, "per-address daemon exits 0")
    # no per-address limit: a new client is not stuck behind the flood either
    d = lib.Daemon(model_dir, "--max-connections", "16", "--request-timeout", "30",
                   "--timeout", "30", "--quiet", log=os.path.join(model_dir, "slow_all.log"))
    drippers = None
    try:
        drippers = Drippers(d.port, n, "127.0.0.1")
        time.sleep(1.5)
        other = [timed_get(d.port, "127.0.0.2") for _ in range(3)]
        print("  %d drippers, --max-connections 16, no per-address limit: 127.0.0.2: %s" % (
            n, ", ".join("%s in %.0f ms" % (st, 1e3 * dt) for st, dt, _ in other)))
        check(all((st == 200 or (st == 503 and h.get("retry-after") == "1")) and dt < 2.5
                  for st, dt, h in other),
              "a new client gets its answer or a 503 at once: %r" % [(st, dt)
                                                                     for st, dt, _ in other])
    finally:
        if drippers:
            drippers.close()
        check(d.stop() == 0, "connection-flood daemon exits 0")


def main():
    lib.kogpt2d_path()
    tmp = tempfile.mkdtemp(prefix="kg_abuse_")
    model_dir = lib.make_model(os.path.join(tmp, "model"))
    only = sys.argv[1:]  # test_server_abuse.py soak drip ...: those alone
    tests = [(name, lambda fn=fn: fn(model_dir)) for name, fn in (
        ("max connections", test_max_connections),
        ("memory per request", test_request_memory),
        ("heavy bodies", test_heavy_bodies),
        ("usage", test_usage),
        ("template work", test_template_work),
        ("slow clients", test_slow_clients),
        ("slow drip", test_slow_drip),
        ("soak", test_soak)) if not only or name.split()[0] in only]
    return lib.run_tests(tests, logs=[os.path.join(model_dir, "*.log")], tmp=tmp)


if __name__ == "__main__":
    sys.exit(main())
