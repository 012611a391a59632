// harness.mjs — what the browser tests of the Explorer share: the checks and their count, the
// skip exit (77), the server they talk to, and Debian's Chromium through playwright-core.
//
// The server, first that applies:
//   KG_SERVER_URL=http://127.0.0.1:8080        a running kogpt2d (serving web/ at /)
//   KG_DAEMON=path/to/kogpt2d KG_MODEL_DIR=dir  started here on a free port, --web-dir web/
//   otherwise                                    mock_server.mjs (a fake daemon; dev aid)
// Other env: KG_CHROMIUM (default /usr/bin/chromium), KG_ARTIFACT_DIR (default build/artifacts).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, '../..');
export const SKIP = 77;
export const ART = path.resolve(process.env.KG_ARTIFACT_DIR || path.join(ROOT, 'build', 'artifacts'));

export const skip = (why) => { console.log(`SKIP: ${why}`); process.exit(SKIP); };

let failures = 0;
// One check: printed as ok/FAIL with its detail, counted; returns ok.
export function check(ok, what, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${detail ? ` (${detail})` : ''}`);
  if (!ok) failures++;
  return ok;
}
// The exit code of the run so far (0: every check passed), its line printed.
export function report() {
  console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
  return failures ? 1 : 0;
}

// playwright-core's chromium, or a skip when Chromium or the package is missing.
export const CHROMIUM = process.env.KG_CHROMIUM || '/usr/bin/chromium';
export async function playwrightChromium() {
  if (!fs.existsSync(CHROMIUM)) skip(`no Chromium at ${CHROMIUM} (apt-get install chromium)`);
  try {
    return (await import('playwright-core')).chromium;
  } catch {
    return skip('playwright-core is not installed (cd tests/browser && npm ci --ignore-scripts)');
  }
}

// true once url's /readyz answers 200 (within ms).
export async function ready(url, ms) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    try {
      const r = await fetch(url + '/readyz', { signal: AbortSignal.timeout(2000) });
      if (r.ok) return true;
    } catch { /* not up yet */ }
    await new Promise((ok) => setTimeout(ok, 250));
  }
  return false;
}

export const freePort = () => new Promise((ok) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
});

// kogpt2d with args on a free port of 127.0.0.1, serving web/: {url, stop, exited()}; stop()
// ends it with SIGTERM and waits.
export function spawnDaemon(daemon, args) {
  return freePort().then((port) => {
    const url = `http://127.0.0.1:${port}`;
    const d = spawn(daemon, [...args, '--host', '127.0.0.1', '--port', String(port), '--web-dir', path.join(ROOT, 'web')],
      { stdio: ['ignore', 'inherit', 'inherit'] });
    let code = null;
    d.on('exit', (c) => { code = c; });
    const stop = async () => { if (code === null) { d.kill('SIGTERM'); await new Promise((ok) => d.on('exit', ok)); } };
    return { url, stop, exited: () => code };
  });
}

// The server of the run (above): {base, stop, mock}. A daemon that never gets ready fails the run.
export async function startServer() {
  if (process.env.KG_SERVER_URL) {
    const base = process.env.KG_SERVER_URL.replace(/\/+$/, '');
    if (!(await ready(base, 10000))) skip(`the server at ${base} is not reachable or not ready`);
    return { base, stop: async () => {}, mock: false };
  }
  if (process.env.KG_DAEMON && process.env.KG_MODEL_DIR) {
    if (!fs.existsSync(process.env.KG_DAEMON)) skip(`no daemon at ${process.env.KG_DAEMON}`);
    const d = await spawnDaemon(process.env.KG_DAEMON, ['--model', process.env.KG_MODEL_DIR, '--quiet']);
    if (!(await ready(d.url, 120000))) {
      await d.stop();
      console.log(`FAIL - kogpt2d did not become ready (exit code ${d.exited()})`);
      process.exit(1);
    }
    return { base: d.url, stop: d.stop, mock: false };
  }
  const { startMock } = await import('./mock_server.mjs');
  const m = await startMock();
  return { base: m.url, stop: m.close, mock: true };
}

// Chromium in a fresh profile (removed by close()), 1280x900, Korean locale: {ctx, page,
// pageErrors, close}. Page errors and console errors (but Chromium's own "Failed to load
// resource" lines) are collected in pageErrors.
export async function launchBrowser(chromium) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-chromium-'));
  const ctx = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 900 },
    locale: 'ko-KR',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'],
  });
  const page = ctx.pages()[0] || (await ctx.newPage());
  const pageErrors = [];
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) pageErrors.push(m.text());
  });
  page.setDefaultTimeout(15000);
  fs.mkdirSync(ART, { recursive: true });
  const close = async () => { await ctx.close(); fs.rmSync(profile, { recursive: true, force: true }); };
  return { ctx, page, pageErrors, close };
}
