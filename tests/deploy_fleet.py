#!/usr/bin/env python3
"""Helpers for tests/test_deploy_fleet.sh (issue 6); Python standard library only.

  load URL SECONDS THREADS PHASE_FILE   POST /v1/next-token through nginx for SECONDS (at most;
      it stops early when PHASE_FILE says "stop") with
      THREADS keep-alive clients; each result counts under the phase named in PHASE_FILE at
      the time the request was sent. Prints one line per phase: "phase sent failed".
  k8s DIR METRICS_URL   checks docker/k8s/*.yaml: parsed with PyYAML when present, else a
      light structural check; the GPU variant (nvidia.com/gpu limit, probes as the CPU one's,
      the CUDA image, its HPA); the HPA's Pods metric must come from a metric in /metrics
      (METRICS_URL "-": not checked against a live daemon).
  static DOCKER_DIR   no daemon, no nginx: k8s DOCKER_DIR/k8s - and the Dockerfiles' checks
      (dockerfiles(): stages, build.sh, non-root user, HEALTHCHECK, exec entrypoint,
      the CUDA image's bases and --device auto, package lists in step).
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


def dockerfile_tag(path):
    """The image tag the Dockerfile's header builds (`docker build ... -t TAG`)."""
    try:
        m = re.search(r"docker build [^\n]*-t (\S+)", open(path, encoding="utf-8").read())
    except OSError:
        return None
    return m.group(1) if m else None


def gpu_count(res):
    v = (res or {}).get("nvidia.com/gpu")
    try:
        return int(str(v))
    except ValueError:
        return None


def check_gpu_variant(kinds, docker_dir, fail):
    """The GPU Deployment: nvidia.com/gpu in limits (= requests), a node selector or
    toleration for GPU nodes, the CUDA image (the tag docker/Dockerfile.cuda builds), the CPU
    Deployment's probes/preStop/grace, a Service and a PDB that select it, and an HPA on the
    requests/s Pods metric and not on CPU. The CPU Deployment asks for no GPU and runs the CPU
    image."""
    deps = kinds.get("Deployment", [])
    def containers(dep):
        return dep["spec"]["template"]["spec"]["containers"]
    gpu = [(f, d) for f, d in deps
           if any("nvidia.com/gpu" in (c.get("resources", {}).get("limits") or {}) or
                  "nvidia.com/gpu" in (c.get("resources", {}).get("requests") or {})
                  for c in containers(d))]
    cpu = [(f, d) for f, d in deps if (f, d) not in gpu]
    if not gpu:
        fail.append("no GPU Deployment (nvidia.com/gpu in a container's limits)")
    if not cpu:
        fail.append("no CPU Deployment")
    cpu_tag = dockerfile_tag(os.path.join(docker_dir, "Dockerfile"))
    gpu_tag = dockerfile_tag(os.path.join(docker_dir, "Dockerfile.cuda"))
    for f, d in cpu:
        for c in containers(d):
            if cpu_tag and c.get("image") != cpu_tag:
                fail.append("%s: image %s, not the CPU image %s (docker/Dockerfile)"
                            % (f, c.get("image"), cpu_tag))
    same = ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle")
    for f, d in gpu:
        name, spec = d["metadata"]["name"], d["spec"]["template"]["spec"]
        for c in containers(d):
            res = c.get("resources", {})
            n = gpu_count(res.get("limits"))
            if n is None or n < 1:
                fail.append("%s: nvidia.com/gpu missing from limits or not a count >= 1" % f)
            if "nvidia.com/gpu" in (res.get("requests") or {}) and gpu_count(res.get("requests")) != n:
                fail.append("%s: nvidia.com/gpu requests != limits" % f)
            img = c.get("image", "")
            if not gpu_tag:
                fail.append("docker/Dockerfile.cuda missing or names no `docker build -t` tag")
            elif img != gpu_tag:
                fail.append("%s: image %s, not the CUDA image %s (docker/Dockerfile.cuda)"
                            % (f, img, gpu_tag))
            if cpu_tag and img == cpu_tag:
                fail.append("%s: the GPU Deployment runs the CPU image %s" % (f, img))
            args = c.get("args", [])
            if "--device" in args and args[args.index("--device") + 1] == "cpu":
                fail.append("%s: --device cpu on the GPU Deployment" % f)
            print("%s: %s, nvidia.com/gpu %s, args %s" % (os.path.basename(f), img, n, " ".join(args)))
        if not spec.get("nodeSelector") and not spec.get("affinity") and not spec.get("tolerations"):
            fail.append("%s: no nodeSelector/affinity/tolerations for GPU nodes" % f)
        # Same probes, preStop and grace period as the CPU Deployment.
        for cf, cd in cpu[:1]:
            cc, gc = containers(cd)[0], containers(d)[0]
            for k in same:
                if cc.get(k) != gc.get(k):
                    fail.append("%s: %s differs from %s's" % (f, k, os.path.basename(cf)))
            cg = cd["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30)
            if spec.get("terminationGracePeriodSeconds", 30) != cg:
                fail.append("%s: terminationGracePeriodSeconds differs from the CPU one's" % f)
        labels = d["spec"]["template"]["metadata"].get("labels", {})
        def selects(sel):
            return bool(sel) and all(labels.get(k) == v for k, v in sel.items())
        if not any(selects(s["spec"].get("selector")) for _, s in kinds.get("Service", [])):
            fail.append("%s: no Service selects its pods" % f)
        if not any(selects(p["spec"].get("selector", {}).get("matchLabels")) for _, p in
                   kinds.get("PodDisruptionBudget", [])):
            fail.append("%s: no PodDisruptionBudget selects its pods" % f)
        hpas = [h for _, h in kinds.get("HorizontalPodAutoscaler", [])
                if h["spec"]["scaleTargetRef"].get("name") == name]
        if not hpas:
            fail.append("%s: no HPA scales Deployment %s" % (f, name))
        for h in hpas:
            types = [m.get("type") for m in h["spec"].get("metrics", [])]
            cpu_m = [m for m in h["spec"].get("metrics", []) if m.get("type") == "Resource" and
                     m.get("resource", {}).get("name") == "cpu"]
            if "Pods" not in types:
                fail.append("HPA %s: no Pods (requests/s) metric" % h["metadata"]["name"])
            if cpu_m:
                fail.append("HPA %s: scales GPU pods on CPU" % h["metadata"]["name"])
            print("HPA %s -> %s: metrics %s, %d..%d replicas" % (
                h["metadata"]["name"], name, ",".join(types), h["spec"].get("minReplicas", 1),
                h["spec"]["maxReplicas"]))
    # Every HPA scales a Deployment that exists; the CPU Deployments' HPAs keep the CPU metric.
    names = {d["metadata"]["name"] for _, d in deps}
    for hf, h in kinds.get("HorizontalPodAutoscaler", []):
        t = h["spec"]["scaleTargetRef"].get("name")
        if t not in names:
            fail.append("%s: HPA scales %s, which no manifest defines" % (hf, t))
        if t in {d["metadata"]["name"] for _, d in cpu}:
            if not any(m.get("type") == "Resource" and m.get("resource", {}).get("name") == "cpu"
                       for m in h["spec"].get("metrics", [])):
                fail.append("%s: the CPU Deployment's HPA lacks the CPU metric" % hf)


def k8s(d, metrics_url):
    """metrics_url "-": no live /metrics (the static checks only)."""
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
    if yaml:
        check_gpu_variant(kinds, os.path.dirname(os.path.abspath(d)), fail)
    elif "nvidia.com/gpu" not in all_text:
        fail.append("no GPU Deployment (nvidia.com/gpu)")
    # The HPA's Pods metric and the adapter rule that makes it from a kogpt2d counter.
    hpa_metrics = sorted(set(re.findall(r"type:\s*Pods\s*\n\s*pods:\s*\n\s*metric:\s*\n\s*name:\s*(\S+)", all_text)))
    if "autoscaling/v2" not in all_text or not hpa_metrics:
        fail.append("no autoscaling/v2 HPA with a Pods metric")
    if "type: Resource" not in all_text or "name: cpu" not in all_text:
        fail.append("HPA lacks the CPU metric")
    live_names = None
    if metrics_url != "-":
        live = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
        live_names = set(re.findall(r"^# TYPE (\S+)", live, re.M))
    for m in hpa_metrics:
        # prometheus-adapter: seriesQuery names the kogpt2d series; name.as gives the HPA's name.
        rules = re.findall(r'seriesQuery:\s*[\'"]?([a-zA-Z_:][a-zA-Z0-9_:]*)[^\n]*\n(?:.*\n){0,12}?\s*as:\s*"?([^"\n]+)"?', all_text)
        src = [s for s, a in rules if a.strip() == m]
        if not src:
            fail.append("no prometheus-adapter rule maps %s" % m)
        for s in src:
            if live_names is None:
                print("HPA metric %s <- %s (no live /metrics checked)" % (m, s))
                continue
            ok = s in live_names
            print("HPA metric %s <- %s: %s in /metrics" % (m, s, "present" if ok else "MISSING"))
            if not ok:
                fail.append("%s not in /metrics" % s)
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


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
    """docker/Dockerfile and docker/Dockerfile.cuda: two stages; the build stage runs
    docker/build.sh (KG_CUDA=ON in the CUDA one, on an nvidia/cuda devel image; the runtime on
    the runtime image of the same CUDA version); the runtime stage runs as a non-root user with
    a HEALTHCHECK, EXPOSE 8080 and kogpt2d as an exec-form ENTRYPOINT (--device auto in the
    CUDA one); both install the same build packages and as many runtime packages (libnccl2
    aside), so a library added to one list is added to the other."""
    fail, pk = [], {}
    for name in ("Dockerfile", "Dockerfile.cuda"):
        path = os.path.join(d, name)
        if not os.path.exists(path):
            fail.append("missing docker/" + name)
            continue
        st = dockerfile_stages(path)
        if len(st) != 2:
            fail.append("%s: %d stages, want 2 (build, runtime)" % (name, len(st)))
            continue
        (bfrom, bins), (rfrom, rins) = st
        run_build = [i for i in bins if "docker/build.sh" in i and i.upper().startswith("RUN ")]
        if not run_build:
            fail.append("%s: the build stage does not RUN docker/build.sh" % name)
        cuda = name.endswith(".cuda")
        if cuda != any("KG_CUDA=ON" in i for i in run_build):
            fail.append("%s: KG_CUDA=ON %s" % (name, "missing" if cuda else "in the CPU image"))
        if cuda:
            if not re.search(r"FROM nvidia/cuda:\$\{CUDA_VERSION\}-devel-", bfrom):
                fail.append("%s: build stage not FROM nvidia/cuda:${CUDA_VERSION}-devel-*" % name)
            if not re.search(r"FROM nvidia/cuda:\$\{CUDA_VERSION\}-runtime-", rfrom):
                fail.append("%s: runtime stage not FROM nvidia/cuda:${CUDA_VERSION}-runtime-*" % name)
            if bfrom.split("-devel-")[-1].split()[0] != rfrom.split("-runtime-")[-1].split()[0]:
                fail.append("%s: build and runtime images on different OS versions" % name)
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
        elif cuda and "--device" not in ep:
            fail.append("%s: ENTRYPOINT lacks --device auto" % name)
        elif cuda and ep[ep.index("--device") + 1] != "auto":
            fail.append("%s: ENTRYPOINT's --device is not auto" % name)
        pk[name] = (apt_packages(bins), [p for p in apt_packages(rins) if p != "libnccl2"])
        print("%s: build %s; runtime %s; user %s; entrypoint %s" % (
            name, bfrom.split()[1], rfrom.split()[1], users[-1] if users else "?", " ".join(ep or [])))
    if len(pk) == 2:
        (cb, cr), (gb, gr) = pk["Dockerfile"], pk["Dockerfile.cuda"]
        if sorted(cb) != sorted(gb):
            fail.append("build packages differ: Dockerfile %s, Dockerfile.cuda %s" % (cb, gb))
        if len(cr) != len(gr):
            fail.append("runtime packages out of step: Dockerfile %s, Dockerfile.cuda %s" % (cr, gr))
    for f in fail:
        print("FAIL:", f)
    return 1 if fail else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    if a and a[0] == "load":
        sys.exit(load(a[1], float(a[2]), int(a[3]), a[4]))
    if a and a[0] == "k8s":
        sys.exit(k8s(a[1], a[2]))
    if a and a[0] == "static":
        d = os.path.abspath(a[1])
        rc = k8s(os.path.join(d, "k8s"), "-")
        sys.exit(dockerfiles(d) or rc)
    print(__doc__)
    sys.exit(2)
