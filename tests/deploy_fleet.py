#!/usr/bin/env python3
"""Helpers for tests/test_deploy_fleet.sh (issue 6); Python standard library only.

  load URL SECONDS THREADS PHASE_FILE   POST /v1/next-token through nginx for SECONDS (at most;
      it stops early when PHASE_FILE says "stop") with
      THREADS keep-alive clients; each result counts under the phase named in PHASE_FILE at
      the time the request was sent. Prints one line per phase: "phase sent failed".
  k8s DIR METRICS_URL   checks docker/k8s/*.yaml: parsed with PyYAML when present, else a
      light structural check; the HPA's Pods metric must come from a metric in /metrics.
"""
import glob, http.client, json, os, re, sys, threading, time, urllib.parse, urllib.request


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


def simple_yaml_docs(text):
    """Without PyYAML: split documents and collect 'key: value' pairs (with indentation)."""
    docs = []
    for chunk in re.split(r"^---\s*$", text, flags=re.M):
        lines = [l for l in chunk.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        if not lines:
            continue
        for l in lines:
            if "\t" in l[: len(l) - len(l.lstrip())]:
                raise ValueError("tab indentation: %r" % l)
        docs.append("\n".join(lines))
    return docs


def k8s(d, metrics_url):
    files = sorted(glob.glob(os.path.join(d, "*.yaml")))
    if not files:
        print("no manifests in", d)
        return 1
    try:
        import yaml
    except ImportError:
        yaml = None
    text = {f: open(f, encoding="utf-8").read() for f in files}
    kinds = {}
    fail = []
    for f, t in text.items():
        if yaml:
            for doc in yaml.safe_load_all(t):
                if doc:
                    kinds.setdefault(doc.get("kind", "?"), []).append((f, doc))
        else:
            for doc in simple_yaml_docs(t):
                m = re.search(r"^kind:\s*(\S+)", doc, re.M)
                kinds.setdefault(m.group(1) if m else "?", []).append((f, doc))
    print("parser:", "PyYAML" if yaml else "structural (no PyYAML)")
    print("kinds:", ", ".join("%s x%d" % (k, len(v)) for k, v in sorted(kinds.items())))
    for need in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget"):
        if need not in kinds:
            fail.append("missing kind " + need)
    all_text = "\n".join(text.values())
    for dep_f, dep in kinds.get("Deployment", []):
        s = json.dumps(dep) if yaml else dep
        for field in ("startupProbe", "readinessProbe", "livenessProbe", "/readyz", "/healthz",
                      "preStop", "terminationGracePeriodSeconds", "requests", "limits"):
            if field not in s:
                fail.append("%s: Deployment lacks %s" % (dep_f, field))
        if yaml:
            spec = dep["spec"]["template"]["spec"]
            grace = spec.get("terminationGracePeriodSeconds", 30)
            for c in spec["containers"]:
                res = c.get("resources", {})
                if res.get("requests") != res.get("limits"):
                    fail.append("%s: requests != limits" % dep_f)
                args = c.get("args", [])
                drain = int(args[args.index("--timeout") + 1]) if "--timeout" in args else 30
                pre = c["lifecycle"]["preStop"]
                sleep = int(re.findall(r"\d+", json.dumps(pre))[0]) if re.findall(r"\d+", json.dumps(pre)) else 0
                if grace <= drain + sleep:
                    fail.append("%s: terminationGracePeriodSeconds %d <= preStop %d + drain %d"
                                % (dep_f, grace, sleep, drain))
                print("%s: grace %ds > preStop %ds + drain %ds" % (os.path.basename(dep_f), grace, sleep, drain))
    # The HPA's Pods metric and the adapter rule that makes it from a kogpt2d counter.
    hpa_metrics = re.findall(r"type:\s*Pods\s*\n\s*pods:\s*\n\s*metric:\s*\n\s*name:\s*(\S+)", all_text)
    if "autoscaling/v2" not in all_text or not hpa_metrics:
        fail.append("no autoscaling/v2 HPA with a Pods metric")
    if "type: Resource" not in all_text or "name: cpu" not in all_text:
        fail.append("HPA lacks the CPU metric")
    live = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    live_names = set(re.findall(r"^# TYPE (\S+)", live, re.M))
    for m in hpa_metrics:
        # prometheus-adapter: seriesQuery names the kogpt2d series; name.as gives the HPA's name.
        rules = re.findall(r'seriesQuery:\s*[\'"]?([a-zA-Z_:][a-zA-Z0-9_:]*)[^\n]*\n(?:.*\n){0,12}?\s*as:\s*"?([^"\n]+)"?', all_text)
        src = [s for s, a in rules if a.strip() == m]
        if not src:
            fail.append("no prometheus-adapter rule maps %s" % m)
        for s in src:
            ok = s in live_names
            print("HPA metric %s <- %s: %s in /metrics" % (m, s, "present" if ok else "MISSING"))
            if not ok:
                fail.append("%s not in /metrics" % s)
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "load":
        sys.exit(load(a[1], float(a[2]), int(a[3]), a[4]))
    if a and a[0] == "k8s":
        sys.exit(k8s(a[1], a[2]))
    print(__doc__)
    sys.exit(2)
