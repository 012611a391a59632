// run.mjs — kogpt2d's client suite (issue 15), run by ctest as test_clients (labels server,
// clients; tests/clients.cmake): real client libraries nobody here wrote, against the real
// daemon on a small model.
//
//   sdk.mjs       the official openai Node SDK: completions, streams with include_usage, prompt
//                 arrays, n, chat, responses, models, typed errors, the API key, penalties
//   aisdk.mjs     the AI SDK's default provider call (openai(id): /v1/responses), generateText
//                 and streamText, and openai.chat(id) without a token limit
//   browser.mjs   the same SDK in Debian's Chromium (playwright-core) against --cors-origin
//   langchain.mjs LangChain's OpenAI and ChatOpenAI
//   metrics.mjs   promtool check metrics on a live /metrics, and the metric families expected
//   hf.mjs        Hugging Face's @huggingface/inference: textGeneration(Stream) with endpointUrl
//
// This runner starts a static server (the browser part's page and the SDK's .mjs files) and
// kogpt2d on free ports (--api-key, --cors-origin the page's origin), runs each part under its
// own time limit, then stops kogpt2d with SIGTERM (a check: exit 0) and kills it on any way out.
// Prints one line per check; exit 0 all passed, 1 a check failed, 77 skipped (no node_modules,
// no kogpt2d, no model).
//
// Env: KG_DAEMON (default build/kogpt2d), KG_MODEL_DIR (default models/default: a real small
// Korean model, no ../shared needed), KG_TEST_DEVICE (default auto), KG_CHROMIUM (default
// /usr/bin/chromium), KG_PROMTOOL (default promtool on PATH), KG_ARTIFACT_DIR (kogpt2d's log;
// default build/artifacts), KG_CLIENTS_PARTS (say sdk,metrics to run some parts only).
// Setup once: cd tests/clients && npm ci --ignore-scripts
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Checks, SKIP, freePort, startDaemon, startStatic, stopDaemon, withTimeout } from './lib.mjs';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const MODEL_ID = 'kogpt2-clients';
const API_KEY = 'sekrit';
const PARTS = [['sdk', 40000], ['aisdk', 25000], ['browser', 40000], ['langchain', 25000],
  ['metrics', 20000], ['hf', 25000]];
const WATCHDOG_MS = 150000; // under ctest's TIMEOUT, so the daemon is always ours to stop

const skip = (why) => { console.log(`SKIP: ${why}`); process.exit(SKIP); };

for (const pkg of ['openai', 'ai', '@ai-sdk/openai', '@langchain/openai', '@langchain/core',
  'playwright-core', '@huggingface/inference'])
  if (!fs.existsSync(path.join(HERE, 'node_modules', pkg, 'package.json')))
    skip(`${pkg} is not installed (cd tests/clients && npm ci --ignore-scripts)`);
const daemonBin = process.env.KG_DAEMON || path.join(ROOT, 'build', 'kogpt2d');
if (!fs.existsSync(daemonBin)) skip(`no kogpt2d at ${daemonBin} (build it, or set KG_DAEMON)`);
const modelDir = process.env.KG_MODEL_DIR || path.join(ROOT, 'models', 'default');
if (!fs.existsSync(path.join(modelDir, 'config.json'))) skip(`no model at ${modelDir} (set KG_MODEL_DIR)`);
const promtool = process.env.KG_PROMTOOL ||
  (process.env.PATH || '').split(':').map((d) => path.join(d, 'promtool')).find((p) => fs.existsSync(p));
const wanted = (process.env.KG_CLIENTS_PARTS || PARTS.map((p) => p[0]).join(',')).split(',');

const artifacts = path.resolve(process.env.KG_ARTIFACT_DIR || path.join(ROOT, 'build', 'artifacts'));
fs.mkdirSync(artifacts, { recursive: true });
const checks = new Checks();
let daemon = null, site = null, cleanup = null;
// Whatever happens, kogpt2d does not outlive the runner.
process.on('exit', () => { if (daemon?.running()) daemon.proc.kill('SIGKILL'); });
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(1));
setTimeout(() => {
  console.log(`FAIL - the suite did not end within ${WATCHDOG_MS / 1000} s`);
  process.exit(1);
}, WATCHDOG_MS).unref();

const t0 = Date.now();
try {
  site = await startStatic({ '/openai/': path.join(HERE, 'node_modules', 'openai') },
    '<!doctype html><meta charset="utf-8"><title>kogpt2d client suite</title><p>openai SDK in a browser</p>\n');
  const pageUrl = `http://127.0.0.1:${site.port}/`;
  const port = await freePort();
  const args = ['--model', modelDir, '--alias', MODEL_ID, '--host', '127.0.0.1', '--port', String(port),
    '--device', process.env.KG_TEST_DEVICE || 'auto', '--threads', '2', '--timeout', '5',
    '--api-key', API_KEY, '--cors-origin', `http://127.0.0.1:${site.port}`];
  const logPath = path.join(artifacts, 'test_clients-kogpt2d.log');
  console.log(`# kogpt2d ${args.join(' ')}\n# its log: ${logPath}`);
  daemon = await startDaemon(daemonBin, args, port, logPath);
  const ctx = {
    checks, model: MODEL_ID, key: API_KEY, daemonUrl: daemon.url, v1: `${daemon.url}/v1`, pageUrl, promtool,
    chromiumPath: process.env.KG_CHROMIUM || '/usr/bin/chromium',
    setCleanup: (f) => { cleanup = f; },
  };
  for (const [name, ms] of PARTS) {
    if (!wanted.includes(name)) continue;
    console.log(`# ${name} (limit ${ms / 1000} s)`);
    const t = Date.now();
    const { run } = await import(`./${name}.mjs`);
    await checks.check(`${name}: ran to its end within ${ms / 1000} s`, () => withTimeout(run(ctx), ms, name));
    if (cleanup) await Promise.resolve(cleanup()).catch(() => {});
    cleanup = null;
    console.log(`# ${name}: ${((Date.now() - t) / 1000).toFixed(1)} s`);
    if (!daemon.running()) break;
  }
  await checks.check('kogpt2d exits 0 on SIGTERM', async () => {
    const was = daemon.running() ? null : `it had already exited (${daemon.exitCode ?? daemon.signal})`;
    const r = await stopDaemon(daemon);
    if (was) throw new Error(was);
    if (r.killed) throw new Error('no exit within 15 s; killed');
    if (r.code !== 0) throw new Error(`exit ${r.code ?? r.signal}`);
  });
} catch (e) {
  checks.failed.push({ name: 'setup', why: String(e?.message || e) });
  console.log(`FAIL - setup: ${e?.message || e}`);
} finally {
  if (cleanup) await Promise.resolve(cleanup()).catch(() => {});
  if (daemon?.running()) await stopDaemon(daemon, 5000);
  if (site) await site.close();
}

const secs = ((Date.now() - t0) / 1000).toFixed(1);
if (checks.failed.length) {
  if (daemon) console.log(`# the end of kogpt2d's log:\n${daemon.logTail(20)}`);
  console.log(`\n${checks.failed.length} of ${checks.failed.length + checks.passed} checks failed (${secs} s):`);
  for (const f of checks.failed) console.log(`  - ${f.name}`);
  process.exit(1);
}
console.log(`\nall ${checks.passed} checks passed (${secs} s)`);
process.exit(0);
