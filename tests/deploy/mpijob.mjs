// A Kubeflow MPI Operator MPIJob (kubeflow.org/v2beta1) checked offline, for validate.mjs:
//   1. against the operator's CRD schema (mpijob-v2beta1.schema.json beside this file: the
//      openAPIV3Schema of kubeflow/mpi-operator manifests/base/kubeflow.org_mpijobs.yaml at
//      commit caa3c47fc42eb762635f78045ec0fcd1a89eb038, descriptions dropped, each replica's
//      pod spec and the object's metadata left to kubernetes-models, see its $comment) by
//      structuralErrors below: the
//      subset of OpenAPI v3 that Kubernetes' structural schemas use (type, properties,
//      required, items, additionalProperties, enum, format int32/int64, anyOf, pattern,
//      x-kubernetes-int-or-string, x-kubernetes-preserve-unknown-fields); a field the schema
//      does not have is an error (the API server would prune it silently);
//   2. against the operator's own admission rules (pkg/apis/kubeflow/validation/validation.go
//      at the same commit): a Launcher with replicas 1, a Worker with replicas >= 1, each with
//      restartPolicy Never or OnFailure and a container, slotsPerWorker >= 0, sshAuthMountPath
//      and runPolicy.cleanPodPolicy (None, Running, All) set, mpiImplementation OpenMPI, Intel
//      or MPICH, and "<name>-worker-<replicas - 1>" a DNS-1035 label.
// The pod templates are returned for the Kubernetes checks (PodTemplateSpec's schema and type).
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const SCHEMA = JSON.parse(readFileSync(join(here, "mpijob-v2beta1.schema.json"), "utf8"));
const INT_RANGE = { int32: [-(2 ** 31), 2 ** 31 - 1], int64: [-(2 ** 63), 2 ** 63 - 1] };

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v; // string, boolean, object
}

// The errors of value v against schema s at path (strings, empty when valid).
export function structuralErrors(s, v, path = "") {
  const errs = [];
  const where = path || "(the object)";
  if (s["x-kubernetes-int-or-string"]) {
    if (!["integer", "string"].includes(typeOf(v))) errs.push(`${where}: not an integer or string`);
  } else if (s.anyOf) {
    if (!s.anyOf.some((alt) => structuralErrors(alt, v, path).length === 0))
      errs.push(`${where}: matches none of its forms`);
  }
  if (s.type) {
    const t = typeOf(v);
    if (!(t === s.type || (s.type === "number" && t === "integer"))) {
      errs.push(`${where}: ${t}, not ${s.type}`);
      return errs;
    }
  }
  if (s.enum && !s.enum.includes(v)) errs.push(`${where}: ${JSON.stringify(v)} is not one of ${s.enum.join(", ")}`);
  if (s.format in INT_RANGE && typeof v === "number") {
    const [lo, hi] = INT_RANGE[s.format];
    if (v < lo || v > hi) errs.push(`${where}: ${v} is outside ${s.format}`);
  }
  if (s.pattern && typeof v === "string" && !new RegExp(s.pattern).test(v))
    errs.push(`${where}: ${JSON.stringify(v)} does not match ${s.pattern}`);
  if (typeOf(v) === "array" && s.items)
    v.forEach((item, i) => errs.push(...structuralErrors(s.items, item, `${path}[${i}]`)));
  if (typeOf(v) === "object" && !s["x-kogpt2-podspec"] && !s["x-kogpt2-objectmeta"]) {
    for (const k of s.required ?? [])
      if (!(k in v)) errs.push(`${path ? path + "." : ""}${k}: required`);
    for (const [k, val] of Object.entries(v)) {
      const sub = s.properties?.[k] ?? (typeof s.additionalProperties === "object" ? s.additionalProperties : null);
      const at = path ? `${path}.${k}` : k;
      if (sub) errs.push(...structuralErrors(sub, val, at));
      else if (!s["x-kubernetes-preserve-unknown-fields"] && s.additionalProperties !== true)
        errs.push(`${at}: unknown field (the CRD's schema has no such field)`);
    }
  }
  return errs;
}

const DNS1035 = /^[a-z]([-a-z0-9]*[a-z0-9])?$/;

// The operator's admission rules (validation.go), on the object as written (no defaults
// applied: this project's manifests state every field the rules read).
function operatorErrors(o) {
  const errs = [];
  const spec = o.spec ?? {};
  const rs = spec.mpiReplicaSpecs ?? {};
  for (const k of Object.keys(rs))
    if (!["Launcher", "Worker"].includes(k)) errs.push(`spec.mpiReplicaSpecs.${k}: not Launcher or Worker`);
  const replica = (name, r) => {
    const at = `spec.mpiReplicaSpecs.${name}`;
    if (r.replicas === undefined) errs.push(`${at}.replicas: must define number of replicas`);
    if (!["Never", "OnFailure"].includes(r.restartPolicy))
      errs.push(`${at}.restartPolicy: ${r.restartPolicy} is not Never or OnFailure`);
    if (!(r.template?.spec?.containers?.length > 0)) errs.push(`${at}.template.spec.containers: none`);
  };
  if (!rs.Launcher) errs.push("spec.mpiReplicaSpecs.Launcher: required");
  else {
    replica("Launcher", rs.Launcher);
    if (rs.Launcher.replicas !== undefined && rs.Launcher.replicas !== 1)
      errs.push("spec.mpiReplicaSpecs.Launcher.replicas: must be 1");
  }
  if (rs.Worker) {
    replica("Worker", rs.Worker);
    if (rs.Worker.replicas !== undefined && rs.Worker.replicas <= 0)
      errs.push("spec.mpiReplicaSpecs.Worker.replicas: must be at least 1");
  }
  if (!(spec.slotsPerWorker >= 0)) errs.push("spec.slotsPerWorker: must be set, at least 0");
  if (!spec.sshAuthMountPath) errs.push("spec.sshAuthMountPath: must be set");
  if (!["OpenMPI", "Intel", "MPICH"].includes(spec.mpiImplementation ?? "OpenMPI"))
    errs.push(`spec.mpiImplementation: ${spec.mpiImplementation}`);
  if (!["None", "Running", "All"].includes(spec.runPolicy?.cleanPodPolicy))
    errs.push("spec.runPolicy.cleanPodPolicy: must be None, Running or All");
  const workers = rs.Worker?.replicas > 0 ? rs.Worker.replicas : 1;
  const host = `${o.metadata?.name}-worker-${workers - 1}`;
  if (host.length > 63 || !DNS1035.test(host)) errs.push(`metadata.name: ${host} is not a DNS-1035 label`);
  return errs;
}

// Every error of the MPIJob o, and its pod templates as [path, template].
export function checkMPIJob(o) {
  const errs = [...structuralErrors(SCHEMA, o), ...operatorErrors(o)];
  const templates = Object.entries(o.spec?.mpiReplicaSpecs ?? {})
    .filter(([, r]) => r?.template)
    .map(([name, r]) => [`spec.mpiReplicaSpecs.${name}.template`, r.template]);
  return { errs, templates };
}
