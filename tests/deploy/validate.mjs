// Validates rendered deployment manifests against published schemas, offline:
//   node tests/deploy/validate.mjs OBJECTS.json
// OBJECTS.json (written by tests/deploy_fleet.py schemas) is a list of
//   {"source": "...", "object": {...}}      a Kubernetes object (core, apps, policy,
//                                           autoscaling, ... or a Prometheus Operator CRD)
//   {"source": "...", "dashboard": {...}}   a Grafana dashboard
// Two checks per Kubernetes object:
//   1. the object model's JSON-schema validator (npm kubernetes-models, generated from the
//      Kubernetes OpenAPI; @kubernetes-models/prometheus-operator from the operator's CRDs):
//      types, required fields, formats (quantities, int-or-string);
//   2. the same models' TypeScript interfaces, through the TypeScript compiler: every object
//      becomes a typed object literal, so a field the API does not have (a typo such as
//      seccompProfle, which the API server would drop with at most a warning) fails.
// The dashboard gets check 2 against Grafana's Dashboard type (npm @grafana/schema).
// A Kubeflow MPIJob (kubeflow.org/v2beta1, no npm models) is checked by mpijob.mjs against the
// MPI Operator's CRD schema and admission rules, and each of its pod templates by checks 1 and 2
// as a Kubernetes PodTemplateSpec.
// Exit 0 all valid, 1 a failure (each printed), 2 usage or missing modules.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { checkMPIJob } from "./mpijob.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
const ts = require("typescript");

if (process.argv.length !== 3) {
  console.error("usage: node tests/deploy/validate.mjs OBJECTS.json");
  process.exit(2);
}
const items = JSON.parse(readFileSync(process.argv[2], "utf8"));

// The module holding a kind's model: a Prometheus Operator CRD or a built-in API group.
function modelPath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/"))
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function label(it) {
  if (it.label) return it.label;
  if (it.dashboard) return `${it.source}: dashboard ${it.dashboard.uid ?? "?"}`;
  const o = it.object;
  return `${it.source}: ${o.kind}/${o.metadata?.name ?? "?"}`;
}

const DASHBOARD = 'import type { Dashboard } from "@grafana/schema";';
const failures = [];
let nObjects = 0;

// 1. JSON-schema validation, and the typed declarations for step 2.
// Lit<T>: a type with each string enum replaced by the union of its values, so that JSON's
// "absolute" is accepted where Grafana's types say ThresholdsMode.Absolute.
const decls = [
  "type Lit<T> = T extends string ? (string extends T ? string : `${T}`)",
  "  : T extends readonly (infer U)[] ? Lit<U>[]",
  "  : T extends object ? { [K in keyof T]: Lit<T[K]> } : T;",
];
const imports = [];
const entries = []; // [TypeScript type, item]
for (const [i, it] of items.entries()) {
  if (it.dashboard) {
    if (!imports.includes(DASHBOARD)) imports.push(DASHBOARD);
    entries.push(["Dashboard", it]);
    continue;
  }
  nObjects++;
  const { apiVersion, kind } = it.object;
  if (apiVersion === "kubeflow.org/v2beta1" && kind === "MPIJob") {
    const { errs, templates } = checkMPIJob(it.object);
    failures.push(...errs.map((e) => `${label(it)}: ${e}`));
    const { ObjectMeta } = await import("@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta");
    try {
      new ObjectMeta(it.object.metadata ?? {}).validate();
    } catch (e) {
      failures.push(`${label(it)}: metadata: ${e.message}`);
    }
    const path = "kubernetes-models/v1/PodTemplateSpec";
    const { PodTemplateSpec } = await import(path);
    for (const [j, [where, t]] of templates.entries()) {
      const sub = { label: `${label(it)} ${where}`, object: t };
      try {
        new PodTemplateSpec(t).validate();
      } catch (e) {
        failures.push(`${label(sub)}: ${e.message}`);
      }
      imports.push(`import type { IPodTemplateSpec as T${i}_${j} } from "${path}";`);
      entries.push([`T${i}_${j}`, sub]);
    }
    continue;
  }
  const path = modelPath(apiVersion ?? "?", kind ?? "?");
  let Model;
  try {
    Model = (await import(path))[kind];
  } catch {
    Model = undefined;
  }
  if (!Model) {
    failures.push(`${label(it)}: no schema for ${apiVersion} ${kind}`);
    continue;
  }
  try {
    new Model(it.object).validate();
  } catch (e) {
    failures.push(`${label(it)}: ${e.message}`);
  }
  imports.push(`import type { I${kind} as T${i} } from "${path}";`);
  entries.push([`T${i}`, it]);
}

// 2. The TypeScript compiler over one virtual file inside tests/deploy/, so that its imports
// resolve in tests/deploy/node_modules. spans: [first line, last line, item] of each object.
const lines = [...imports, ...decls];
const spans = [];
for (const [i, [type, it]] of entries.entries()) {
  const body = JSON.stringify(it.dashboard ?? it.object, null, 1).split("\n");
  spans.push([lines.length + 1, lines.length + body.length, it]);
  body[0] = `export const o${i}: Lit<${type}> = ${body[0]}`;
  body[body.length - 1] += ";";
  lines.push(...body);
}
const file = join(here, "__manifests__.ts");
const text = lines.join("\n") + "\n";
const options = {
  strict: true,
  noEmit: true,
  skipLibCheck: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: [],
};
const host = ts.createCompilerHost(options);
const getSourceFile = host.getSourceFile;
host.getSourceFile = (name, lang, ...rest) =>
  name === file ? ts.createSourceFile(name, text, lang) : getSourceFile(name, lang, ...rest);
const fileExists = host.fileExists;
host.fileExists = (name) => name === file || fileExists(name);
const readFile = host.readFile;
host.readFile = (name) => (name === file ? text : readFile(name));
const program = ts.createProgram([file], options, host);
for (const d of ts.getPreEmitDiagnostics(program)) {
  let where = "(the generated file)";
  if (d.file && d.file.fileName === file && d.start !== undefined) {
    const line = d.file.getLineAndCharacterOfPosition(d.start).line + 1;
    const span = spans.find(([a, b]) => line >= a && line <= b);
    if (span) where = label(span[2]);
  } else if (d.file) {
    where = d.file.fileName;
  }
  let msg = ts.flattenDiagnosticMessageText(d.messageText, " ");
  // "Object literal may only specify known properties, and '"x"' does not exist in type '{...
  // the whole type...}'": the field's name is what matters
  const unknown = msg.match(/known properties, (?:and|but) '"?([^'"]+)"?' does not exist in type/);
  const mean = msg.match(/Did you mean to write '([^']+)'\?/);
  if (unknown) msg = `unknown field ${unknown[1]}` + (mean ? ` (did you mean ${mean[1]}?)` : "");
  if (msg.length > 300) msg = msg.slice(0, 300) + " ...";
  failures.push(`${where}: ${msg}`);
}

for (const f of failures) console.log("FAIL:", f);
const nDash = items.length - nObjects;
if (failures.length) process.exit(1);
console.log(
  `schemas: ${nObjects} Kubernetes objects valid (JSON schema and known fields only)` +
    (nDash ? `, ${nDash} Grafana dashboard${nDash > 1 ? "s" : ""} valid (known fields only)` : ""),
);
