"""docker/k8s's manifests, rendered and checked (tests/deploy_fleet.py's static, k8s, schemas and
rules commands use it). Python 3 with PyYAML.

Rendering: each folder with a kustomization.yaml (base/, overlays/gpu/, monitoring/) is rendered
by `kubectl kustomize` where kubectl carries kustomize 4.1 or newer, and always by kustomize_py()
below (the subset of kustomize these folders use); where both ran they must agree object for
object, so the checks never depend on which one a machine has. A YAML file that no
kustomization takes in (monitoring/prometheus-adapter-rules.yaml) is read as it is.

Checks (check_all): the CPU workload (base) and the GPU one (overlays/gpu): probes, preStop and
grace period against the drain, requests = limits, the image (a registry, a tag, the tags the
Dockerfiles build, IfNotPresent), topology spread over nodes, Service/PDB/HPA selecting and
targeting it, the GPU one's nvidia.com/gpu, node selection and settings equal to the CPU one's;
every pod template (the training MPIJob's launcher and workers too) against the "restricted" Pod
Security Standard (check_restricted); the HPAs'
Pods metrics made by the prometheus-adapter rules; the ServiceMonitor, the PrometheusRule's
alerts and the Grafana dashboard; and every metric name that the alerts, the adapter rules and
the dashboard use against kogpt2d's metrics (server/http/metrics.c, or a live /metrics).
"""
import copy
import json
import os
import re
import shutil
import subprocess
import tempfile

import yaml

# --- rendering --------------------------------------------------------------------------------

KUSTOMIZATION = "kustomization.yaml"
KUSTOMIZE_MIN = (4, 1)  # the kustomization's `labels` field
# Lists a strategic-merge patch merges item by item by their name (Kubernetes' patchMergeKey);
# every other list in a patch replaces the list it patches, as kustomize does for them.
SMP_MERGE_BY_NAME = {"containers", "initContainers", "env", "volumes"}


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def smp(base, patch):
    """base with the strategic-merge patch applied (maps merge, lists in SMP_MERGE_BY_NAME merge
    by name, other lists and scalars replace); base is left alone."""
    if not isinstance(base, dict) or not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(base)
    for k, v in patch.items():
        if isinstance(k, str) and k.startswith("$"):
            raise ValueError("patch directive %s: not supported by kustomize_py" % k)
        if v is None:
            out.pop(k, None)
        elif k in SMP_MERGE_BY_NAME and isinstance(v, list) and isinstance(out.get(k), list):
            items = {i.get("name"): i for i in out[k]}
            for i in v:
                items[i.get("name")] = smp(items[i["name"]], i) if i.get("name") in items else i
            out[k] = list(items.values())
        else:
            out[k] = smp(out.get(k), v)
    return out


def set_labels(obj, pairs, selectors, templates):
    """kustomize's labels transformer: metadata.labels always; with selectors (includeSelectors)
    also the selectors and pod templates; with templates (includeTemplates) the templates."""
    obj.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
    spec = obj.get("spec") or {}
    if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        if selectors:
            spec.setdefault("selector", {}).setdefault("matchLabels", {}).update(pairs)
            for t in spec.get("template", {}).get("spec", {}).get("topologySpreadConstraints", []):
                if "labelSelector" in t:
                    t["labelSelector"].setdefault("matchLabels", {}).update(pairs)
        if selectors or templates:
            spec.setdefault("template", {}).setdefault("metadata", {}).setdefault(
                "labels", {}).update(pairs)
    elif obj["kind"] == "Service" and selectors:
        spec.setdefault("selector", {}).update(pairs)
    elif obj["kind"] == "PodDisruptionBudget" and selectors:
        spec.setdefault("selector", {}).setdefault("matchLabels", {}).update(pairs)


def set_images(obj, images):
    """kustomize's images transformer on the pod template's containers."""
    pod = (obj.get("spec") or {}).get("template", {}).get("spec", {})
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        m = re.match(r"^([^@]+?)(?::([^:/@]+))?(@.+)?$", c.get("image", ""))
        name, tag, digest = m.group(1), m.group(2), m.group(3)
        for im in images:
            if im["name"] != name:
                continue
            name = im.get("newName", name)
            tag = im.get("newTag", tag)
            if "digest" in im:
                tag, digest = None, "@" + im["digest"]
        c["image"] = name + (":" + tag if tag else "") + (digest or "")


def kustomize_py(d):
    """Renders the kustomization in folder d: resources (files and folders), configMapGenerator
    (fixed names only), patches (strategic-merge, by kind and name), labels, images,
    namePrefix/nameSuffix (HPA targets follow). Raises ValueError on anything else."""
    k = load_docs(os.path.join(d, KUSTOMIZATION))[0]
    known = {"apiVersion", "kind", "resources", "configMapGenerator", "patches", "labels",
             "images", "namePrefix", "nameSuffix"}
    if set(k) - known:
        raise ValueError("%s: kustomize_py does not know %s" % (d, sorted(set(k) - known)))
    objs = []
    for r in k.get("resources", []):
        p = os.path.normpath(os.path.join(d, r))
        objs += kustomize_py(p) if os.path.isdir(p) else load_docs(p)
    for g in k.get("configMapGenerator", []):
        opts = g.get("options", {})
        if not opts.get("disableNameSuffixHash") or set(g) - {"name", "files", "options"}:
            raise ValueError("%s: configMapGenerator %s: only files with disableNameSuffixHash"
                             % (d, g.get("name")))
        data = {}
        for f in g["files"]:
            with open(os.path.join(d, f), encoding="utf-8") as fh:
                data[os.path.basename(f)] = fh.read()
        meta = {"name": g["name"]}
        if opts.get("labels"):
            meta["labels"] = dict(opts["labels"])
        objs.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data})
    for p in k.get("patches", []):
        if set(p) != {"path"}:
            raise ValueError("%s: patches: only {path: FILE} (a strategic-merge patch)" % d)
        for patch in load_docs(os.path.join(d, p["path"])):
            hit = [i for i, o in enumerate(objs) if o["kind"] == patch["kind"] and
                   o["metadata"]["name"] == patch["metadata"]["name"]]
            if len(hit) != 1:
                raise ValueError("%s: patch %s matches %d objects" % (d, p["path"], len(hit)))
            objs[hit[0]] = smp(objs[hit[0]], patch)
    renamed = {}
    for o in objs:
        old = o["metadata"]["name"]
        o["metadata"]["name"] = k.get("namePrefix", "") + old + k.get("nameSuffix", "")
        renamed[(o["kind"], old)] = o["metadata"]["name"]
    for o in objs:
        if o["kind"] == "HorizontalPodAutoscaler":
            ref = o["spec"]["scaleTargetRef"]
            ref["name"] = renamed.get((ref["kind"], ref["name"]), ref["name"])
    for lab in k.get("labels", []):
        for o in objs:
            set_labels(o, lab["pairs"], lab.get("includeSelectors", False),
                       lab.get("includeTemplates", False))
    for o in objs:
        set_images(o, k.get("images", []))
    return objs


def kubectl_kustomize_version():
    """kubectl's built-in kustomize version as ((major, minor), text), or None without kubectl."""
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    try:
        out = subprocess.run([kubectl, "version", "--client", "-o", "json"], capture_output=True,
                             text=True, timeout=30).stdout
        v = json.loads(out).get("kustomizeVersion", "")
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    m = re.match(r"v?(\d+)\.(\d+)", v)
    return ((int(m.group(1)), int(m.group(2))), v) if m else None


def first_difference(a, b, path):
    """The path of the first place a and b differ, or None when they are equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            d = first_difference(a.get(k), b.get(k), "%s.%s" % (path, k))
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for n, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, "%s[%d]" % (path, n))
            if d is not None:
                return d
        return None
    return None if a == b else path


def by_id(objs):
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


class Rendered:
    """The manifests of a docker/k8s folder: sets[name] = [objects], name being a kustomization
    folder relative to it ("base", "overlays/gpu", "monitoring") or a file read as it is."""

    def __init__(self, k8s_dir, fail):
        self.dir, self.sets, used = k8s_dir, {}, set()
        kv = kubectl_kustomize_version()
        kv = kv if kv and kv[0] >= KUSTOMIZE_MIN else None
        self.tool = ("kubectl kustomize (kustomize %s) and kustomize_py, compared" % kv[1] if kv
                     else "kustomize_py only (no kubectl with kustomize >= 4.1 here)")
        kdirs = sorted(os.path.dirname(p) for p in
                       glob_all(k8s_dir, lambda f: f == KUSTOMIZATION))
        for d in kdirs:
            name = os.path.relpath(d, k8s_dir)
            k = load_docs(os.path.join(d, KUSTOMIZATION))[0]
            for r in k.get("resources", []) + [p["path"] for p in k.get("patches", [])
                                               if "path" in p]:
                used.add(os.path.normpath(os.path.join(d, r)))
            for g in k.get("configMapGenerator", []):
                used.update(os.path.normpath(os.path.join(d, f)) for f in g.get("files", []))
            try:
                objs = kustomize_py(d)
            except (ValueError, KeyError, OSError) as e:
                fail.append("kustomize_py %s: %s" % (name, e))
                continue
            if kv:
                r = subprocess.run(["kubectl", "kustomize", d], capture_output=True, text=True,
                                   timeout=60)
                if r.returncode != 0:
                    fail.append("kubectl kustomize %s: %s" % (name, r.stderr.strip()[-400:]))
                    continue
                real = [o for o in yaml.safe_load_all(r.stdout) if o]
                a, b = by_id(real), by_id(objs)
                for i in sorted(set(a) | set(b)):
                    where = first_difference(a.get(i), b.get(i), "")
                    if where is not None:
                        fail.append("%s: kubectl kustomize and kustomize_py differ on %s/%s at %s"
                                    % (name, i[0], i[1], where or "(the whole object)"))
                objs = real
            self.sets[name] = objs
        for f in glob_all(k8s_dir, lambda f: f.endswith((".yaml", ".yml", ".json"))):
            if os.path.basename(f) == KUSTOMIZATION or os.path.normpath(f) in used:
                continue
            if f.endswith(".json"):
                fail.append("%s: taken in by no kustomization" % os.path.relpath(f, k8s_dir))
                continue
            self.sets[os.path.relpath(f, k8s_dir)] = load_docs(f)

    def all(self):
        return [(name, o) for name, objs in self.sets.items() for o in objs]

    def find(self, kind, where=None):
        return [(n, o) for n, o in self.all() if o.get("kind") == kind and
                (where is None or n == where)]


def glob_all(d, want):
    out = []
    for root, _, files in os.walk(d):
        out += [os.path.join(root, f) for f in files if want(f)]
    return sorted(out)


# --- the restricted Pod Security Standard ------------------------------------------------------
# https://kubernetes.io/docs/concepts/security/pod-security-standards/ (baseline + restricted,
# latest): what a pod template must and must not set to be admitted in a namespace labelled
# pod-security.kubernetes.io/enforce=restricted.

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def pod_templates(obj):
    """(path, pod spec, pod metadata) of each pod an object makes."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return [("spec", spec, obj.get("metadata", {}))]
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        t = spec.get("template", {})
        return [("spec.template.spec", t.get("spec", {}), t.get("metadata", {}))]
    if kind == "CronJob":
        t = spec.get("jobTemplate", {}).get("spec", {}).get("template", {})
        return [("spec.jobTemplate.spec.template.spec", t.get("spec", {}), t.get("metadata", {}))]
    if kind == "MPIJob":  # Kubeflow MPI Operator: a launcher and workers
        return [("spec.mpiReplicaSpecs.%s.template.spec" % role, r.get("template", {}).get(
            "spec", {}), r.get("template", {}).get("metadata", {}))
            for role, r in sorted((spec.get("mpiReplicaSpecs") or {}).items())]
    return []


def check_restricted(where, pod, meta, fail):
    """Appends to fail each way the pod spec breaks the restricted profile."""
    def bad(msg):
        fail.append("%s: restricted Pod Security Standard: %s" % (where, msg))
    psc = pod.get("securityContext") or {}
    for f in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(f):
            bad("%s: true" % f)
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad("volume %s of type %s" % (v.get("name"), ", ".join(sorted(kinds))))
    for s in psc.get("sysctls", []):
        if s.get("name") not in SAFE_SYSCTLS:
            bad("sysctl %s" % s.get("name"))
    for k, v in (meta.get("annotations") or {}).items():
        if k.startswith("container.apparmor.security.beta.kubernetes.io/") and \
                v != "runtime/default" and not v.startswith("localhost/"):
            bad("AppArmor annotation %s: %s" % (k, v))

    def selinux_ok(sc, what):
        o = sc.get("seLinuxOptions") or {}
        if o.get("type", "") not in SELINUX_TYPES or o.get("user") or o.get("role"):
            bad("%s seLinuxOptions %s" % (what, o))

    def apparmor_ok(sc, what):
        t = (sc.get("appArmorProfile") or {}).get("type")
        if t not in (None, "RuntimeDefault", "Localhost"):
            bad("%s appArmorProfile %s" % (what, t))
    selinux_ok(psc, "pod")
    apparmor_ok(psc, "pod")
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        bad("pod seccompProfile %s" % pod_seccomp)
    if psc.get("runAsUser") == 0:
        bad("pod runAsUser 0")
    if (psc.get("windowsOptions") or {}).get("hostProcess"):
        bad("pod windowsOptions.hostProcess")
    conts = [(n, c) for n in ("containers", "initContainers", "ephemeralContainers")
             for c in pod.get(n, [])]
    if not pod.get("containers"):
        bad("no containers")
    for n, c in conts:
        sc = c.get("securityContext") or {}
        what = "%s %s" % (n[:-1], c.get("name"))
        if sc.get("privileged"):
            bad("%s privileged" % what)
        if sc.get("allowPrivilegeEscalation") is not False:
            bad("%s: allowPrivilegeEscalation must be false" % what)
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad("%s: capabilities must drop ALL" % what)
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad("%s: capabilities add %s" % (what, caps.get("add")))
        nonroot = sc.get("runAsNonRoot", psc.get("runAsNonRoot"))
        if nonroot is not True:
            bad("%s: runAsNonRoot must be true (pod or container)" % what)
        if sc.get("runAsUser", psc.get("runAsUser")) == 0:
            bad("%s: runAsUser 0" % what)
        seccomp = (sc.get("seccompProfile") or {}).get("type", pod_seccomp)
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad("%s: seccompProfile must be RuntimeDefault or Localhost (pod or container), is %s"
                % (what, seccomp))
        for p in c.get("ports", []):
            if p.get("hostPort"):
                bad("%s: hostPort %s" % (what, p["hostPort"]))
        if sc.get("procMount", "Default") != "Default":
            bad("%s: procMount %s" % (what, sc["procMount"]))
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad("%s: windowsOptions.hostProcess" % what)
        selinux_ok(sc, what)
        apparmor_ok(sc, what)


# --- metric names ------------------------------------------------------------------------------

PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or",
                "unless", "offset", "bool", "inf", "nan"}
PROMETHEUS_OWN = {"up"}  # series Prometheus makes itself for each target


def promql_metrics(expr):
    """The metric names a PromQL expression reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.$])[a-zA-Z_:][a-zA-Z0-9_:]*", e):
        if e[m.end():].lstrip().startswith("(") or m.group(0).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def adapter_rules(rendered):
    """(source, rule) of each prometheus-adapter rule in a ConfigMap's config.yaml."""
    out = []
    for n, o in rendered.find("ConfigMap"):
        cfg = (o.get("data") or {}).get("config.yaml")
        if cfg:
            for r in (yaml.safe_load(cfg) or {}).get("rules", []):
                out.append(("%s ConfigMap/%s" % (n, o["metadata"]["name"]), r))
    return out


def adapter_query(rule):
    """The rule's metricsQuery as Prometheus gets it for one pod."""
    series = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["seriesQuery"].strip("'\" ")).group(0)
    return (rule["metricsQuery"].replace("<<.Series>>", series)
            .replace("<<.LabelMatchers>>", 'namespace="default",pod="kogpt2d-0"')
            .replace("<<.GroupBy>>", "pod"))


def dashboards(rendered):
    """(source, dashboard) of each Grafana dashboard in a ConfigMap."""
    out = []
    for n, o in rendered.find("ConfigMap"):
        for k, v in (o.get("data") or {}).items():
            if k.endswith(".json"):
                out.append(("%s ConfigMap/%s %s" % (n, o["metadata"]["name"], k), json.loads(v)))
    return out


def grafana_promql(expr):
    """A dashboard query as Prometheus gets it: Grafana's variables replaced."""
    return (expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
            .replace("$__range", "1h"))


def promql_queries(rendered):
    """(what, where, PromQL) of every query the alerts ("alert"), the prometheus-adapter rules
    ("adapter") and the dashboards ("dashboard") run."""
    q = []
    for n, o in rendered.find("PrometheusRule"):
        for g in o["spec"]["groups"]:
            for r in g["rules"]:
                q.append(("alert", "%s %s" % (n, r.get("alert") or r.get("record")), r["expr"]))
    for src, r in adapter_rules(rendered):
        where = "%s rule %s" % (src, r["name"]["as"])
        q.append(("adapter", where, r["seriesQuery"].strip("'\"")))
        q.append(("adapter", where, adapter_query(r)))
    for src, d in dashboards(rendered):
        for p in d.get("panels", []):
            for t in p.get("targets", []):
                q.append(("dashboard", "%s panel %r" % (src, p.get("title")),
                          grafana_promql(t["expr"])))
        for v in d.get("templating", {}).get("list", []):
            vq = v.get("query")
            vq = vq.get("query", "") if isinstance(vq, dict) else str(vq or "")
            m = re.match(r"label_values\((.*),\s*\w+\)$", vq)
            if m:
                q.append(("dashboard", "%s variable %s" % (src, v["name"]), m.group(1)))
    return q


def names_from_metrics_c(path):
    """Regular expressions of the metric names server/http/metrics.c renders (its gauges and
    histograms by their helper calls or their rows in a {name, help, value} table, the others
    by their # TYPE lines; %s is a wildcard)."""
    with open(path, encoding="utf-8") as f:
        src = f.read()
    names = set()
    for m in re.finditer(r'mb_gauge\(\s*[^,]+,\s*"([^"]+)"', src):
        names.add(m.group(1))
    for m in re.finditer(r'\{\s*"(kogpt2_[a-z0-9_]+)",\s*"', src):
        names.add(m.group(1))
    for m in re.finditer(r'mb_hist\(\s*[^,]+,\s*"([^"]+)"', src):
        names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    for m in re.finditer(r"# TYPE ([a-z0-9_%]+) (counter|gauge|histogram)", src):
        n, t = m.group(1), m.group(2)
        names.update([n] if t != "histogram" else [n + s for s in ("_bucket", "_sum", "_count")])
    return {re.compile("^" + re.escape(n).replace("%s", "[a-z_]+") + "$") for n in names}


def names_from_live(text):
    """The metric names of a Prometheus text exposition (/metrics)."""
    names = set()
    for line in text.splitlines():
        if line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    return {re.compile("^" + re.escape(n) + "$") for n in names}


def check_metric_names(rendered, known, how, fail):
    """Every metric a query reads is one kogpt2d exports (known: regular expressions) or one
    Prometheus makes itself. Prints what was checked."""
    used = {}
    for _, where, q in promql_queries(rendered):
        for name in promql_metrics(q):
            used.setdefault(name, []).append(where)
    for name in sorted(used):
        if name in PROMETHEUS_OWN or any(r.match(name) for r in known):
            continue
        fail.append("metric %s (used by %s) is not in %s" % (name, used[name][0], how))
    print("metric names: %d used by the alerts, adapter rules and dashboard; checked against %s"
          % (len(used), how))
    return used


# --- the workloads -----------------------------------------------------------------------------

def image_parts(image):
    """(registry, repository path, tag) of an image reference."""
    first, _, rest = image.partition("/")
    registry = first if rest and ("." in first or ":" in first or first == "localhost") else ""
    path = rest if registry else image
    m = re.match(r"^([^:@]+)(?::([^@]+))?", path)
    return registry, m.group(1), m.group(2)


def selects(sel, labels):
    return bool(sel) and all(labels.get(k) == v for k, v in sel.items())


def check_workload(rendered, where, fail):
    """The Deployment of one rendered workload and the objects around it. Returns it."""
    deps = rendered.find("Deployment", where)
    if len(deps) != 1:
        fail.append("%s: %d Deployments, want 1" % (where, len(deps)))
        return None
    dep = deps[0][1]
    name, spec = dep["metadata"]["name"], dep["spec"]["template"]["spec"]
    labels = dep["spec"]["template"]["metadata"].get("labels", {})
    w = "%s Deployment/%s" % (where, name)
    if not selects(dep["spec"]["selector"].get("matchLabels"), labels):
        fail.append("%s: its selector does not select its pods" % w)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if len(spec["containers"]) != 1:
        fail.append("%s: %d containers, want 1" % (w, len(spec["containers"])))
    c = spec["containers"][0]
    probes = {"startupProbe": "/healthz", "readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for p, path in probes.items():
        got = (c.get(p) or {}).get("httpGet", {}).get("path")
        if got != path:
            fail.append("%s: %s on %s, want %s" % (w, p, got, path))
    res = c.get("resources", {})
    if res.get("requests") != res.get("limits"):
        fail.append("%s: requests != limits" % w)
    args = c.get("args", [])
    drain = int(args[args.index("--timeout") + 1]) if "--timeout" in args else 30
    pre = json.dumps((c.get("lifecycle") or {}).get("preStop") or {})
    sleep = int(re.findall(r"\d+", pre)[0]) if re.findall(r"\d+", pre) else 0
    if not sleep:
        fail.append("%s: no preStop sleep" % w)
    if grace <= drain + sleep:
        fail.append("%s: terminationGracePeriodSeconds %d <= preStop %d + drain %d"
                    % (w, grace, sleep, drain))
    registry, repo, tag = image_parts(c.get("image", ""))
    if not registry or not tag:
        fail.append("%s: image %s: want REGISTRY/NAME:TAG" % (w, c.get("image")))
    if c.get("imagePullPolicy") != "IfNotPresent":
        fail.append("%s: imagePullPolicy %s, want IfNotPresent" % (w, c.get("imagePullPolicy")))
    spread = [t for t in spec.get("topologySpreadConstraints", [])
              if t.get("topologyKey") == "kubernetes.io/hostname" and
              selects(t.get("labelSelector", {}).get("matchLabels"), labels)]
    if not spread:
        fail.append("%s: no topologySpreadConstraints over kubernetes.io/hostname selecting "
                    "its pods" % w)
    for kind, sel in (("Service", lambda o: o["spec"].get("selector")),
                      ("PodDisruptionBudget", lambda o: o["spec"]["selector"].get("matchLabels"))):
        if not any(selects(sel(o), labels) for _, o in rendered.find(kind, where)):
            fail.append("%s: no %s selects its pods" % (w, kind))
    hpas = [o for _, o in rendered.find("HorizontalPodAutoscaler", where)
            if o["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment",
                                               "name": name}]
    if len(hpas) != 1:
        fail.append("%s: %d HPAs scale it, want 1" % (w, len(hpas)))
    print("%s: %s, %s; grace %ds > preStop %ds + drain %ds; HPA %s" % (
        w, c.get("image"), " ".join(args), grace, sleep, drain,
        ", ".join(hpa_metric_names(h) for h in hpas)))
    return dep


def hpa_metric_names(hpa):
    out = []
    for m in hpa["spec"].get("metrics", []):
        if m["type"] == "Resource":
            out.append("%s %s%%" % (m["resource"]["name"],
                                    m["resource"]["target"].get("averageUtilization")))
        elif m["type"] == "Pods":
            out.append("%s %s" % (m["pods"]["metric"]["name"],
                                  m["pods"]["target"].get("averageValue")))
        else:
            out.append(m["type"])
    return ", ".join(out)


def check_workloads(rendered, tags, fail):
    """The CPU workload (base) and the GPU one (overlays/gpu); tags: (CPU, GPU) image NAME:TAG
    that the Dockerfiles build."""
    cpu = check_workload(rendered, "base", fail)
    gpu = check_workload(rendered, "overlays/gpu", fail)
    if not cpu or not gpu:
        return
    cc = cpu["spec"]["template"]["spec"]["containers"][0]
    gc = gpu["spec"]["template"]["spec"]["containers"][0]
    for c, tag, what in ((cc, tags[0], "CPU"), (gc, tags[1], "GPU")):
        reg, repo, t = image_parts(c["image"])
        if tag and "%s:%s" % (repo.split("/")[-1], t) != tag:
            fail.append("%s image %s: not the image docker/Dockerfile%s builds (%s)"
                        % (what, c["image"], "" if what == "CPU" else ".cuda", tag))
    if image_parts(cc["image"])[:2] != image_parts(gc["image"])[:2]:
        fail.append("the CPU and GPU images are in different repositories: %s, %s"
                    % (cc["image"], gc["image"]))
    # The GPU pods: a GPU, GPU nodes, never --device cpu; the rest as the CPU pods.
    res = gc.get("resources", {})
    n = (res.get("limits") or {}).get("nvidia.com/gpu")
    if not isinstance(n, int) or n < 1:
        fail.append("GPU Deployment: nvidia.com/gpu %r in limits, want a count >= 1" % n)
    if (res.get("requests") or {}).get("nvidia.com/gpu") not in (None, n):
        fail.append("GPU Deployment: nvidia.com/gpu requests != limits")
    if (cc.get("resources", {}).get("limits") or {}).get("nvidia.com/gpu"):
        fail.append("CPU Deployment asks for a GPU")
    gspec, cspec = gpu["spec"]["template"]["spec"], cpu["spec"]["template"]["spec"]
    if not (gspec.get("nodeSelector") or gspec.get("affinity") or gspec.get("tolerations")):
        fail.append("GPU Deployment: no nodeSelector/affinity/tolerations for GPU nodes")
    args = gc.get("args", [])
    if "--device" in args and args[args.index("--device") + 1] == "cpu":
        fail.append("GPU Deployment: --device cpu")
    for k in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "securityContext",
              "ports", "imagePullPolicy"):
        if cc.get(k) != gc.get(k):
            fail.append("GPU Deployment: container %s differs from the CPU one's" % k)
    for k in ("terminationGracePeriodSeconds", "securityContext", "automountServiceAccountToken"):
        if cspec.get(k) != gspec.get(k):
            fail.append("GPU Deployment: pod %s differs from the CPU one's" % k)
    if cpu["spec"]["selector"] == gpu["spec"]["selector"]:
        fail.append("the CPU and GPU Deployments select the same pods")
    # HPAs: the CPU one keeps CPU; the GPU one does not scale on CPU; both scale on work.
    for where, want_cpu in (("base", True), ("overlays/gpu", False)):
        for _, h in rendered.find("HorizontalPodAutoscaler", where):
            ms = h["spec"].get("metrics", [])
            has_cpu = any(m["type"] == "Resource" and m["resource"]["name"] == "cpu" for m in ms)
            if has_cpu != want_cpu:
                fail.append("%s HPA %s: %s" % (where, h["metadata"]["name"],
                                               "lacks the CPU metric" if want_cpu else
                                               "scales GPU pods on CPU"))
            if not any(m["type"] == "Pods" for m in ms):
                fail.append("%s HPA %s: no Pods metric (work per replica)" % (where,
                                                                            h["metadata"]["name"]))


def check_hpa_metrics(rendered, fail):
    """Each HPA Pods metric is made by a prometheus-adapter rule from a kogpt2d series, and no
    rule counts requests (4xx, health checks and cheap calls are not work)."""
    rules = {r["name"]["as"]: (src, r) for src, r in adapter_rules(rendered)}
    if not rules:
        fail.append("no prometheus-adapter rules (a ConfigMap with config.yaml)")
    for n, h in rendered.find("HorizontalPodAutoscaler"):
        for m in h["spec"].get("metrics", []):
            if m["type"] != "Pods":
                continue
            name = m["pods"]["metric"]["name"]
            if name not in rules:
                fail.append("%s HPA %s: no prometheus-adapter rule makes %s"
                            % (n, h["metadata"]["name"], name))
    for name, (src, r) in rules.items():
        if "kogpt2_requests_total" in r["seriesQuery"] + r["metricsQuery"]:
            fail.append("%s: %s scales on requests (kogpt2_requests_total), not on work"
                        % (src, name))
        print("adapter: %s <- %s" % (name, adapter_query(r)))


def check_monitoring(rendered, fail):
    """ServiceMonitor, PrometheusRule and the dashboard, in monitoring/."""
    sms = rendered.find("ServiceMonitor", "monitoring")
    services = [(n, o) for n, o in rendered.all() if o["kind"] == "Service"]
    for _, sm in sms:
        sel = sm["spec"]["selector"].get("matchLabels", {})
        hit = [o for _, o in services if selects(sel, o["metadata"].get("labels", {}))]
        names = {o["metadata"]["name"] for o in hit}
        if not {"kogpt2d", "kogpt2d-gpu"} <= names:
            fail.append("ServiceMonitor %s selects the Services %s, want kogpt2d and kogpt2d-gpu"
                        % (sm["metadata"]["name"], sorted(names)))
        for ep in sm["spec"]["endpoints"]:
            if not all(any(p.get("name") == ep.get("port") for p in o["spec"]["ports"])
                       for o in hit):
                fail.append("ServiceMonitor: port %s not in every Service" % ep.get("port"))
            # kogpt2d's `endpoint` label would become exported_endpoint without it
            if not ep.get("honorLabels"):
                fail.append("ServiceMonitor: honorLabels must be true (kogpt2d's endpoint label)")
    if not sms:
        fail.append("monitoring: no ServiceMonitor")
    rules = [r for _, o in rendered.find("PrometheusRule", "monitoring")
             for g in o["spec"]["groups"] for r in g["rules"] if "alert" in r]
    need = {"not ready": r"kogpt2_ready", "5xx ratio": r'code=~"5\.\."',
            "queue depth": r"kogpt2_queue_depth", "latency": r"histogram_quantile"}
    for what, pat in need.items():
        if not any(re.search(pat, r["expr"]) for r in rules):
            fail.append("PrometheusRule: no alert on %s" % what)
    for r in rules:
        if not r.get("for") or "severity" not in r.get("labels", {}) or \
                "summary" not in r.get("annotations", {}):
            fail.append("alert %s: wants for, a severity label and a summary" % r["alert"])
    dash = dashboards(rendered)
    if not dash:
        fail.append("monitoring: no Grafana dashboard ConfigMap")
    for src, d in dash:
        ids = [p.get("id") for p in d.get("panels", [])]
        if len(set(ids)) != len(ids) or None in ids:
            fail.append("%s: panel ids missing or repeated" % src)
        variables = {v["name"] for v in d.get("templating", {}).get("list", [])}
        text = json.dumps(d)
        for v in set(re.findall(r"\$\{?(\w+)", text)):
            if v not in variables and not v.startswith("__"):  # $__...: Grafana's own
                fail.append("%s: uses $%s, which it does not define" % (src, v))
        for p in d.get("panels", []):
            if p.get("type") != "row" and not p.get("targets"):
                fail.append("%s: panel %r has no query" % (src, p.get("title")))
        print("%s: %d panels, variables %s" % (src, len(ids), ", ".join(sorted(variables))))
    print("alerts: %s" % ", ".join(r["alert"] for r in rules))


def check_all(rendered, tags, fail):
    for n, o in rendered.all():
        for path, pod, meta in pod_templates(o):
            check_restricted("%s %s/%s %s" % (n, o["kind"], o["metadata"]["name"], path), pod,
                             meta, fail)
    pods = sum(len(pod_templates(o)) for _, o in rendered.all())
    print("restricted Pod Security Standard: %d pod templates checked" % pods)
    check_workloads(rendered, tags, fail)
    check_hpa_metrics(rendered, fail)
    check_monitoring(rendered, fail)


def render_and_check(k8s_dir, tags, known, how):
    """Renders docker/k8s, runs every check; known/how: the metric names to check against.
    Returns (rendered, list of failures)."""
    fail = []
    rendered = Rendered(k8s_dir, fail)
    print("rendered with %s: %s" % (rendered.tool, "; ".join(
        "%s (%s)" % (n, ", ".join("%s/%s" % (o["kind"], o["metadata"]["name"]) for o in objs))
        for n, objs in rendered.sets.items())))
    if not fail:
        check_all(rendered, tags, fail)
        check_metric_names(rendered, known, how, fail)
    return rendered, fail


# --- schemas and rules (external tools) ---------------------------------------------------------

def schemas(rendered, node, validator):
    """The rendered objects and dashboards through tests/deploy/validate.mjs. Returns its exit
    code."""
    items = [{"source": n, "object": o} for n, o in rendered.all()]
    items += [{"source": s, "dashboard": d} for s, d in dashboards(rendered)]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(items, f)
    try:
        return subprocess.run([node, validator, f.name]).returncode
    finally:
        os.unlink(f.name)


def rules(rendered, promtool, test_file):
    """promtool: the PrometheusRule's groups (check rules, then the unit tests in test_file), and
    every other query (adapter rules, dashboard) parsed as a recording rule. Returns 0 or 1."""
    t = tempfile.mkdtemp(prefix="kg-rules.")
    try:
        groups = [g for _, o in rendered.find("PrometheusRule") for g in o["spec"]["groups"]]
        with open(os.path.join(t, "rules.yaml"), "w") as f:
            yaml.safe_dump({"groups": groups}, f)
        others = [{"record": "kogpt2d_check:query_%d" % i, "expr": q}
                  for i, (what, _, q) in enumerate(promql_queries(rendered)) if what != "alert"]
        with open(os.path.join(t, "queries.yaml"), "w") as f:
            yaml.safe_dump({"groups": [{"name": "queries", "rules": others}]}, f)
        shutil.copy(test_file, os.path.join(t, "alerts_test.yaml"))
        rc = 0
        for cmd in (["check", "rules", "rules.yaml"], ["check", "rules", "queries.yaml"],
                    ["test", "rules", "alerts_test.yaml"]):
            r = subprocess.run([promtool] + cmd, cwd=t, capture_output=True, text=True)
            out = (r.stdout + r.stderr).strip()
            print("promtool %s: %s" % (" ".join(cmd), out.splitlines()[-1] if out else ""))
            if r.returncode != 0:
                print(out)
                rc = 1
        print("(queries.yaml: %d dashboard and adapter queries as recording rules)" % len(others))
        return rc
    finally:
        shutil.rmtree(t)
