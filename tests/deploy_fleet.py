#!/usr/bin/env python3
"""Helpers for tests/test_deploy_fleet.sh (issue 6) and the manifest tests of tests/deploy.cmake
(issue 29). Python 3; the k8s checks also PyYAML (tests/deploy_k8s.py).

  load URL SECONDS THREADS PHASE_FILE   POST /v1/next-token through nginx for SECONDS (at most;
      it stops early when PHASE_FILE says "stop") with
      THREADS keep-alive clients; each result counts under the phase named in PHASE_FILE at
      the time the request was sent. Prints one line per phase: "phase sent failed".
  ratelimit URL   sends GET /v1/models through nginx from 16 clients at once, past its
      per-client rate: some must be 429s, each JSON in OpenAI's error shape with Retry-After.
  nginx-error URL CODE   one request nginx must answer itself with CODE (no replica up): JSON
      in OpenAI's error shape, with Retry-After.
  static DOCKER_DIR   no daemon: docker/k8s rendered (kustomize) and checked (deploy_k8s.py:
      workloads, GPU variant, restricted Pod Security Standard, HPA metrics, monitoring), the
      metric names against server/http/metrics.c, and the Dockerfiles (dockerfiles()).
  k8s DOCKER_DIR METRICS_URL   the same k8s checks, the metric names against a live /metrics.
  schemas DOCKER_DIR   the rendered objects and the dashboard through tests/deploy/validate.mjs
      (Kubernetes and Prometheus Operator schemas, Grafana's types; node and tests/deploy's
      npm packages).
  rules DOCKER_DIR   promtool: check rules on the PrometheusRule's groups, the adapter rules'
      and the dashboard's queries, and the alerts' unit tests (tests/deploy_alerts_test.yaml).
  static, schemas and rules exit 77 (skip) when PyYAML, node or promtool is missing.
"""
import http.client, json, os, re, shutil, subprocess, sys, threading, time, urllib.parse, urllib.request


def load(url, seconds, threads, phase_file):
    u = urllib.parse.urlsplit(url)
    body = json.dumps({"text": "여러분 2019년 수고하셨습니다. 올해에는", "top_k": 5}).encode()
    stats, errors, lock = {}, [], threading.Lock()
    stop = time.monotonic() + seconds

    def phase():
        try:
            with open(phase_file) as f:
                return f.read().strip() or "steady"
        except OSError:
            return "steady"

    def worker():
        conn = None
        while time.monotonic() < stop:
            ph, ok, why = phase(), False, ""
            if ph == "stop":
                break
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
                conn.request("POST", "/v1/next-token", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                ok = r.status == 200 and b"candidates" in data
                why = "HTTP %d %s" % (r.status, data[:80])
            except Exception as e:  # a failed request: connection reset, timeout, ...
                why = repr(e)
                conn = None
            with lock:
                s = stats.setdefault(ph, [0, 0])
                s[0] += 1
                if not ok:
                    s[1] += 1
                    if len(errors) < 10:
                        errors.append("%s: %s" % (ph, why))

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for e in errors:
        print("error", e)
    for ph, (sent, failed) in stats.items():
        print(ph, sent, failed)
    return 0


def dockerfile_tag(path):
    """The image tag the Dockerfile's header builds (`docker build ... -t TAG`)."""
    try:
        m = re.search(r"docker build [^\n]*-t (\S+)", open(path, encoding="utf-8").read())
    except OSError:
        return None
    return m.group(1) if m else None


def ratelimit(url):
    """Past nginx's per-client rate (limit_req): 429s in OpenAI's error shape with Retry-After,
    and the requests under the limit still served. Returns 0 or 1."""
    u = urllib.parse.urlsplit(url)
    codes, bad, lock = {}, [], threading.Lock()

    def worker():
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        for _ in range(40):
            conn.request("GET", "/v1/models")
            r = conn.getresponse()
            body = r.read()
            with lock:
                codes[r.status] = codes.get(r.status, 0) + 1
                if r.status == 429 and len(bad) < 5:
                    why = error_reply_problem(r, body, 429, "rate_limit_error")
                    if why:
                        bad.append(why)
        conn.close()

    ts = [threading.Thread(target=worker) for _ in range(16)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print("ratelimit: 640 requests from 16 clients: %s" % ", ".join(
        "%d x %d" % (n, c) for c, n in sorted(codes.items())))
    fail = ["429: " + b for b in bad]
    if not codes.get(429):
        fail.append("no 429 past the rate limit")
    if not codes.get(200):
        fail.append("no request under the limit was served")
    if set(codes) - {200, 429}:
        fail.append("answers other than 200 and 429: %s" % codes)
    for f in fail:
        print("FAIL: ratelimit:", f)
    if not fail:
        print("ok: nginx's 429s are JSON in OpenAI's error shape with Retry-After")
    return 1 if fail else 0


def error_reply_problem(r, body, code, etype):
    """What is wrong with an error reply (None: nothing): JSON {"error": {code, type, message}}
    as kogpt2d sends, Content-Type application/json, Retry-After."""
    ctype = r.getheader("Content-Type", "")
    if not ctype.startswith("application/json"):
        return "Content-Type %r, body %r" % (ctype, body[:80])
    try:
        e = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        return "not JSON in OpenAI's error shape: %r" % body[:120]
    if e.get("code") != code or e.get("type") != etype or not e.get("message"):
        return "error %r, want code %d, type %s and a message" % (e, code, etype)
    if not (r.getheader("Retry-After") or "").isdigit():
        return "no Retry-After (%r)" % r.getheader("Retry-After")
    return None


def nginx_error(url, code):
    """One POST /v1/next-token that nginx answers itself with code (its replicas are down)."""
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/v1/next-token", b'{"text":"a"}', {"Content-Type": "application/json"})
    r = conn.getresponse()
    body = r.read()
    why = ("status %d, want %d (%r)" % (r.status, code, body[:80]) if r.status != code else
           error_reply_problem(r, body, code, "server_error"))
    if why:
        print("FAIL: nginx's own %d: %s" % (code, why))
        return 1
    print("ok: with no replica up nginx answers %d in JSON (%s) with Retry-After %s"
          % (code, json.loads(body)["error"]["message"], r.getheader("Retry-After")))
    return 0


def need(module_or_tool):
    """Exit 77 (skip) when a Python module or a program is missing."""
    if module_or_tool == "yaml":
        try:
            import yaml  # noqa: F401
        except ImportError:
            print("SKIP: no PyYAML (apt-get install python3-yaml)")
            sys.exit(77)
        return None
    path = shutil.which(module_or_tool)
    if not path:
        print("SKIP: no %s" % module_or_tool)
        sys.exit(77)
    return path


def k8s(docker_dir, metrics_url):
    """docker/k8s rendered and checked; the metric names against metrics_url's live /metrics,
    or against server/http/metrics.c when metrics_url is None."""
    need("yaml")
    import deploy_k8s
    if metrics_url:
        text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
        known, how = deploy_k8s.names_from_live(text), "a live /metrics"
    else:
        src = os.path.join(os.path.dirname(docker_dir), "server", "http", "metrics.c")
        known, how = deploy_k8s.names_from_metrics_c(src), "server/http/metrics.c"
    tags = (dockerfile_tag(os.path.join(docker_dir, "Dockerfile")),
            dockerfile_tag(os.path.join(docker_dir, "Dockerfile.cuda")))
    _, fail = deploy_k8s.render_and_check(os.path.join(docker_dir, "k8s"), tags, known, how)
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


def rendered_or_exit(docker_dir):
    import deploy_k8s
    fail = []
    rendered = deploy_k8s.Rendered(os.path.join(docker_dir, "k8s"), fail)
    for f in fail:
        print("FAIL:", f)
    if fail:
        sys.exit(1)
    return rendered


def schemas(docker_dir):
    need("yaml")
    node = need("node")
    validator = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deploy", "validate.mjs")
    mods = os.path.join(os.path.dirname(validator), "node_modules")
    if not os.path.isdir(mods):
        print("SKIP: no %s (scripts/deps.sh installs it: npm ci in tests/deploy)" % mods)
        sys.exit(77)
    # kubernetes-models 5 asks for Node.js 22; it runs on 20 (tested), not on Debian 12's 18
    major = subprocess.run([node, "-p", "process.versions.node.split('.')[0]"],
                           capture_output=True, text=True).stdout.strip()
    if not major.isdigit() or int(major) < 20:
        print("SKIP: Node.js %s: tests/deploy's models need 20 or newer" % major)
        sys.exit(77)
    import deploy_k8s
    return deploy_k8s.schemas(rendered_or_exit(docker_dir), node, validator)


def rules(docker_dir):
    need("yaml")
    promtool = need("promtool")
    import deploy_k8s
    test_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "deploy_alerts_test.yaml")
    return deploy_k8s.rules(rendered_or_exit(docker_dir), promtool, test_file)


def dockerfile_stages(path):
    """[(FROM line, [instructions with continuations joined])] for each stage."""
    stages, buf = [], ""
    for line in open(path, encoding="utf-8").read().splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        ins, buf = (buf + line).strip(), ""
        if ins.upper().startswith("FROM "):
            stages.append((ins, []))
        elif stages:
            stages[-1][1].append(ins)
    return stages


def apt_packages(instructions):
    out = []
    for ins in instructions:
        for m in re.finditer(r"apt-get install ([^&|;}]*)", ins):
            out += [w for w in m.group(1).split() if not w.startswith("-")]
    return out


def dockerfiles(d):
    """docker/Dockerfile: two stages, the build stage runs docker/build.sh (a CPU build).
    docker/Dockerfile.cuda: one stage on the CPU image's runtime base, built from
    docker/stage_cuda.sh's folder (opt/kogpt2, cuda/, local/; no build in it), the CPU image's
    runtime packages, ARG CUDA_VERSION and NVIDIA_REQUIRE_CUDA from it. Both: a non-root user,
    a HEALTHCHECK on /healthz, EXPOSE 8080 and kogpt2d as an exec-form ENTRYPOINT (--device
    auto in the CUDA one)."""
    fail, runtime = [], {}
    for name, want_stages in (("Dockerfile", 2), ("Dockerfile.cuda", 1)):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            fail.append("missing docker/" + name)
            continue
        st = dockerfile_stages(path)
        if len(st) != want_stages:
            fail.append("%s: %d stages, want %d" % (name, len(st), want_stages))
            continue
        rfrom, rins = st[-1]
        cuda = name.endswith(".cuda")
        if not cuda:
            bins = st[0][1]
            run_build = [i for i in bins if "docker/build.sh" in i and i.upper().startswith("RUN ")]
            if not run_build:
                fail.append("%s: the build stage does not RUN docker/build.sh" % name)
            if any("KG_CUDA=ON" in i for i in run_build):
                fail.append("%s: KG_CUDA=ON in the CPU image" % name)
        else:
            copies = " ".join(i for i in rins if i.upper().startswith("COPY "))
            for src in ("opt/kogpt2", "cuda/", "local/"):
                if "COPY " + src not in copies:
                    fail.append("%s: no COPY %s (docker/stage_cuda.sh's folder)" % (name, src))
            if any("docker/build.sh" in i or "nvcc" in i for i in rins if i.startswith("RUN ")):
                fail.append("%s: builds in the image; docker/stage_cuda.sh builds" % name)
            if not any(re.match(r"ARG CUDA_VERSION=\d+\.\d+$", i) for i in rins):
                fail.append("%s: no ARG CUDA_VERSION=MAJOR.MINOR" % name)
            if not any(i.startswith("ENV ") and "NVIDIA_REQUIRE_CUDA" in i for i in rins):
                fail.append("%s: no ENV NVIDIA_REQUIRE_CUDA" % name)
        users = [i.split()[1] for i in rins if i.upper().startswith("USER ")]
        if not users or users[-1].split(":")[0] in ("0", "root"):
            fail.append("%s: the runtime stage runs as root" % name)
        if not any(i.upper().startswith("HEALTHCHECK ") and "/healthz" in i for i in rins):
            fail.append("%s: no HEALTHCHECK on /healthz" % name)
        if not any(i.upper().startswith("EXPOSE ") and "8080" in i for i in rins):
            fail.append("%s: no EXPOSE 8080" % name)
        ep = [i for i in rins if i.upper().startswith("ENTRYPOINT ")]
        try:
            ep = json.loads(ep[-1][len("ENTRYPOINT "):]) if ep else None
        except ValueError:
            ep = None
        if not ep or not ep[0].endswith("/kogpt2d"):
            fail.append("%s: ENTRYPOINT is not kogpt2d in exec (JSON) form" % name)
        elif len(ep) > 1:  # SageMaker starts IMAGE serve: `serve` must be the first argument
            fail.append("%s: ENTRYPOINT has arguments (%s): `IMAGE serve` would not work"
                        % (name, " ".join(ep[1:])))
        if not any(i.startswith("ENV ") and "KOGPT2_HOST=0.0.0.0" in i for i in rins):
            fail.append("%s: no ENV KOGPT2_HOST=0.0.0.0 (kogpt2d listens on 127.0.0.1)" % name)
        if cuda and not any(i.startswith("ENV ") and "KOGPT2_DEVICE=auto" in i for i in rins):
            fail.append("%s: no ENV KOGPT2_DEVICE=auto" % name)
        runtime[name] = (rfrom.split()[1], sorted(apt_packages(rins)))
        print("%s: %d stage%s, runtime on %s; user %s; entrypoint %s" % (
            name, len(st), "s" if len(st) > 1 else "", rfrom.split()[1],
            users[-1] if users else "?", " ".join(ep or [])))
    if len(runtime) == 2 and runtime["Dockerfile"] != runtime["Dockerfile.cuda"]:
        fail.append("the runtime base or packages differ: Dockerfile %s, Dockerfile.cuda %s"
                    % (runtime["Dockerfile"], runtime["Dockerfile.cuda"]))
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    cmd = a[0] if a else ""
    if cmd == "load":
        sys.exit(load(a[1], float(a[2]), int(a[3]), a[4]))
    if cmd == "ratelimit":
        sys.exit(ratelimit(a[1]))
    if cmd == "nginx-error":
        sys.exit(nginx_error(a[1], int(a[2])))
    if cmd in ("static", "k8s", "schemas", "rules"):
        d = os.path.abspath(a[1])
        if cmd == "k8s":
            sys.exit(k8s(d, a[2]))
        if cmd == "schemas":
            sys.exit(schemas(d))
        if cmd == "rules":
            sys.exit(rules(d))
        rc = k8s(d, None)
        sys.exit(dockerfiles(d) or rc)
    print(__doc__)
    sys.exit(2)
