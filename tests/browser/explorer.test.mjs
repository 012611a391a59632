// explorer.test.mjs — browser test of the KoGPT-2 Explorer (web/), run by ctest as
// test_browser_explorer (label "browser"; tests/browser.cmake).
//
// playwright-core drives Debian's Chromium (/usr/bin/chromium; never a downloaded browser):
// load the page, type Korean, see 10 sorted candidates with bars and percentages, click one
// (the prompt grows, the URL updates, the next request sends token ids), keyboard choice,
// Undo, reload the URL (same state), kindly shown errors (429 + retry, network down, 4xx),
// a streamed generation, "Append to prompt", Stop, dark mode and a 390 px wide layout.
// Saves screenshots and prints their paths. Exit 0: passed; 1: a check failed; 77: skipped
// (no chromium, no node_modules, or KG_SERVER_URL unreachable).
//
// The server, first that applies:
//   KG_SERVER_URL=http://127.0.0.1:8080        a running kogpt2d (serving web/ at /)
//   KG_DAEMON=path/to/kogpt2d KG_MODEL_DIR=dir  started here on a free port, --web-dir web/
//   otherwise                                    mock_server.mjs (a fake daemon; dev aid)
// Other env: KG_CHROMIUM (default /usr/bin/chromium), KG_ARTIFACT_DIR (default build/artifacts).
//
// Setup once: cd tests/browser && npm ci --ignore-scripts
//   node tests/browser/explorer.test.mjs
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import net from 'node:net';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '../..');
const SKIP = 77;
const PROMPT = '여러분 2019년 수고하셨습니다. 올해에는';

const skip = (why) => { console.log(`SKIP: ${why}`); process.exit(SKIP); };
let failures = 0;
function check(ok, what, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'} - ${what}${detail ? ` (${detail})` : ''}`);
  if (!ok) failures++;
  return ok;
}

// ---- prerequisites ----------------------------------------------------------------------
const CHROMIUM = process.env.KG_CHROMIUM || '/usr/bin/chromium';
if (!fs.existsSync(CHROMIUM)) skip(`no Chromium at ${CHROMIUM} (apt-get install chromium)`);
let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch {
  skip('playwright-core is not installed (cd tests/browser && npm ci --ignore-scripts)');
}

async function ready(url, ms) {
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

const freePort = () => new Promise((ok) => {
  const s = net.createServer().listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => ok(p)); });
});

let base, stopServer = async () => {}, mock = false;
if (process.env.KG_SERVER_URL) {
  base = process.env.KG_SERVER_URL.replace(/\/+$/, '');
  if (!(await ready(base, 10000))) skip(`the server at ${base} is not reachable or not ready`);
} else if (process.env.KG_DAEMON && process.env.KG_MODEL_DIR) {
  if (!fs.existsSync(process.env.KG_DAEMON)) skip(`no daemon at ${process.env.KG_DAEMON}`);
  const port = await freePort();
  base = `http://127.0.0.1:${port}`;
  const d = spawn(process.env.KG_DAEMON, ['--model', process.env.KG_MODEL_DIR, '--host', '127.0.0.1',
    '--port', String(port), '--web-dir', path.join(ROOT, 'web')], { stdio: ['ignore', 'inherit', 'inherit'] });
  let exited = null;
  d.on('exit', (code) => { exited = code; });
  stopServer = async () => { if (exited === null) { d.kill('SIGTERM'); await new Promise((ok) => d.on('exit', ok)); } };
  if (!(await ready(base, 120000))) {
    await stopServer();
    console.log(`FAIL - kogpt2d did not become ready (exit code ${exited})`);
    process.exit(1);
  }
} else {
  const { startMock } = await import('./mock_server.mjs');
  const m = await startMock();
  base = m.url;
  stopServer = m.close;
  mock = true;
}
console.log(`# server: ${base}${mock ? ' (mock_server.mjs, a fake daemon)' : ''}`);

const ART = path.resolve(process.env.KG_ARTIFACT_DIR || path.join(ROOT, 'build', 'artifacts'));
fs.mkdirSync(ART, { recursive: true });

// ---- the browser ------------------------------------------------------------------------
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
page.on('console', (m) => {  // a failed request is logged by Chromium itself: expected in step 6
  if (m.type() === 'error' && !/^Failed to load resource/.test(m.text())) pageErrors.push(m.text());
});
page.setDefaultTimeout(15000);

const cands = page.locator('#cands .cand');
// Waits until a settled (not busy, not stale) list of n candidates is shown.
async function settled(n = 10) {
  await page.waitForFunction((n) => {
    const l = document.getElementById('cands');
    return l.getAttribute('aria-busy') === 'false' && !l.classList.contains('stale') &&
      l.querySelectorAll('.cand').length === n;
  }, n);
}
const readCands = () => page.$$eval('#cands .cand', (bs) => bs.map((b) => ({
  id: Number(b.dataset.id),
  key: b.querySelector('.key').textContent,
  piece: b.querySelector('.piece').textContent,
  pct: b.querySelector('.pct').textContent,
  bar: b.querySelector('.fill').getBoundingClientRect().width,
  meter: b.querySelector('.meter').getBoundingClientRect().width,
})));
const prompt = () => page.inputValue('#text');
const urlTokens = () => (new URL(page.url()).searchParams.get('t') || '').split(',').filter(Boolean).map(Number);
const nextBody = () => page.waitForRequest((r) => r.url().endsWith('/v1/next-token') && r.method() === 'POST')
  .then((r) => r.postDataJSON());

try {
  // 1. load, type Korean, 10 candidates
  await page.goto(base + '/');
  check((await page.title()).includes('KoGPT-2'), 'the Explorer page loads');
  await page.waitForFunction(() => document.querySelector('#model').classList.contains('ok'));
  check(true, 'the model name is shown', await page.textContent('#model-name'));
  await page.locator('#text').pressSequentially(PROMPT, { delay: 5 });
  await settled();
  let c = await readCands();
  check(c.length === 10, '10 candidates after typing Korean');
  const pcts = c.map((x) => parseFloat(x.pct.replace('<', '')));
  check(c.every((x) => /^<?\d+(\.\d+)?%$/.test(x.pct)), 'each candidate shows a percentage', c.map((x) => x.pct).join(' '));
  check(pcts.every((p, i) => i === 0 || p <= pcts[i - 1]), 'candidates are sorted by probability');
  check(c.every((x, i) => i === 0 || x.bar <= c[i - 1].bar + 0.5) && c[0].bar > 0,
    'probability bars are drawn and shrink down the list', c.map((x) => x.bar.toFixed(0)).join(' '));
  check(Math.abs(c[0].bar / c[0].meter - pcts[0] / 100) < 0.02, 'the top bar matches its percentage');
  check(c.map((x) => x.key).join('') === '1234567890', 'keyboard shortcuts 1–9, 0 are labelled');
  check(c.every((x) => !x.piece.includes('\u2581')), 'no raw ▁ is shown');
  if (mock) check(c.some((x) => x.piece.startsWith('__')), '▁ is shown as __');
  check(/cached/.test(await page.textContent('#stats')) && /round-trip/.test(await page.textContent('#stats')),
    'latency and cache figures are shown', await page.textContent('#stats'));
  const start = { text: await prompt(), tokens: urlTokens(), url: page.url() };
  check(start.text === PROMPT && start.tokens.length > 0 && new URL(start.url).searchParams.get('text') === PROMPT,
    'the URL holds the token ids and the text', start.url);

  // 2. click a candidate: the prompt grows, the URL updates, the next request sends ids
  const pick = c[1];
  const candText = await page.evaluate((i) => state.cands[i].text, 1);
  let req = nextBody();
  await cands.nth(1).click();
  let body = await req;
  await settled();
  check(await prompt() === PROMPT + candText, 'clicking a candidate appends its text', JSON.stringify(candText));
  check(JSON.stringify(urlTokens()) === JSON.stringify(start.tokens.concat(pick.id)), 'the URL gains the token id');
  check(Array.isArray(body.tokens) && body.text === undefined && body.tokens.at(-1) === pick.id,
    'the next request sends token ids, not text');
  const afterClick = { text: await prompt(), tokens: urlTokens() };

  // 3. keyboard: "1" appends the top candidate
  c = await readCands();
  req = nextBody();
  await page.keyboard.press('1');
  await req;
  await settled();
  check(JSON.stringify(urlTokens()) === JSON.stringify(afterClick.tokens.concat(c[0].id)), 'key 1 appends the top candidate');

  // 4. Undo twice: back to the start
  await page.click('#undo');
  await settled();
  check(await prompt() === afterClick.text && JSON.stringify(urlTokens()) === JSON.stringify(afterClick.tokens), 'Undo removes the last token');
  await page.keyboard.press('Control+z');
  await settled();
  check(await prompt() === start.text && JSON.stringify(urlTokens()) === JSON.stringify(start.tokens), 'Undo again returns to the typed prompt');
  check(await page.isDisabled('#undo'), 'Undo is disabled with nothing to undo');

  // 5. reload the URL of a clicked state: same prompt, same ids, same candidates
  await cands.nth(2).click();
  await settled();
  const saved = { url: page.url(), text: await prompt(), tokens: urlTokens(), ids: (await readCands()).map((x) => x.id) };
  req = nextBody();
  await page.goto(saved.url);
  body = await req;
  await settled();
  check(await prompt() === saved.text, 'reloading the URL restores the text');
  check(JSON.stringify(body.tokens) === JSON.stringify(saved.tokens), 'reloading sends the same token ids');
  check(JSON.stringify((await readCands()).map((x) => x.id)) === JSON.stringify(saved.ids), 'reloading shows the same candidates');

  // 6. errors shown kindly: a 429 with Retry-After, then the automatic retry recovers
  await page.route('**/v1/next-token', (r) => r.fulfill({ status: 429, headers: { 'Retry-After': '1' },
    contentType: 'application/json',
    body: JSON.stringify({ error: { code: 429, type: 'rate_limit_error', message: 'queue full', param: null } }) }), { times: 1 });
  await page.locator('#text').press('End');
  await page.keyboard.type(' 우리');
  await page.waitForSelector('#error:not([hidden])');
  const err = await page.textContent('#error');
  check(/busy/.test(err) && /1 s/.test(err) && /queue full/.test(err), 'a 429 is explained with its Retry-After', err);
  await page.waitForSelector('#error', { state: 'hidden', timeout: 8000 });
  await settled();
  check(true, 'after Retry-After the request is retried and the error clears');
  const overflow = 'the prompt has 1100 tokens; n_ctx is 1024';
  for (const [what, fulfil, want] of [
    ['a network failure', (r) => r.abort('connectionrefused'), /Cannot reach the server/],
    ['a 4xx JSON error', (r) => r.fulfill({ status: 422, contentType: 'application/json',
      body: JSON.stringify({ error: { code: 422, type: 'invalid_request_error', message: overflow, param: 'text' } }) }),
    new RegExp(overflow)],
  ]) {
    await page.route('**/v1/next-token', fulfil, { times: 1 });
    await page.keyboard.type('은');
    await page.waitForSelector('#error:not([hidden])');
    check(want.test(await page.textContent('#error')), `${what} is explained`, await page.textContent('#error'));
    check(await page.$eval('#cands', (l) => l.classList.contains('stale')), `${what} marks the list stale`);
    await page.keyboard.press('Backspace');
    await page.waitForSelector('#error', { state: 'hidden' });
    await settled();
  }

  // 7. a streamed generation
  await page.fill('#max_tokens', '12');
  await page.fill('#seed', '7');
  await page.evaluate(() => {  // count the streamed updates of the output
    window.__updates = 0;
    new MutationObserver(() => { window.__updates++; }).observe(document.getElementById('gen-text'),
      { childList: true, characterData: true, subtree: true });
  });
  await page.click('#generate');
  await page.waitForFunction(() => /finished|stopped|interrupted/.test(document.getElementById('gen-stats').textContent), null, { timeout: 60000 });
  const gstats = await page.textContent('#gen-stats');
  const gtext = await page.textContent('#gen-text');
  const updates = await page.evaluate(() => window.__updates);
  check(/finished/.test(gstats) && gtext.length > 0, 'generation produced text', `${JSON.stringify(gtext)} · ${gstats}`);
  check(updates >= 2, 'the output arrived streamed, token by token', `${updates} updates`);
  check(await page.textContent('#gen-prompt') === await prompt(), 'the generation continues the prompt');
  const before = { text: await prompt(), n: urlTokens().length };
  await page.click('#adopt');
  await settled();
  check(await prompt() === before.text + gtext && urlTokens().length > before.n, '"Append to prompt" adopts the generated text and ids');
  await page.click('#undo');
  await settled();
  check(await prompt() === before.text, 'Undo takes the generated text back out');

  // 8. Stop (a long generation; a fast server may finish first, which is fine)
  const nCtx = Number(await page.getAttribute('#max_tokens', 'max')) || 1024;  // kogpt2d's n_ctx
  await page.fill('#max_tokens', String(Math.min(400, Math.floor(nCtx / 2))));
  await page.fill('#seed', '');
  await page.click('#generate');
  await page.waitForFunction(() => document.getElementById('gen-text').textContent.length > 0
    || !document.getElementById('gen-out').classList.contains('running'), null, { timeout: 60000 });
  await page.click('#stop', { timeout: 3000 }).catch(() => {});  // already finished: fine
  await page.waitForSelector('#generate:not([disabled])', { timeout: 30000 });
  check(/stopped|finished/.test(await page.textContent('#gen-stats')), 'Stop ends the generation', await page.textContent('#gen-stats'));

  // 9. screenshots (then a narrow one: the layout must stack)
  await page.fill('#max_tokens', '24');
  await page.fill('#seed', '3');
  await page.click('#generate');
  await page.waitForSelector('#generate:not([disabled])', { timeout: 60000 });
  await page.locator('#cands .cand').first().focus();
  const shot = path.join(ART, 'explorer.png');
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`# screenshot: ${shot}`);
  await page.emulateMedia({ colorScheme: 'dark' });
  const dshot = path.join(ART, 'explorer-dark.png');
  await page.screenshot({ path: dshot, fullPage: true });
  console.log(`# screenshot: ${dshot}`);
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 390, height: 844 });
  const narrow = await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1);
  check(narrow, 'no horizontal scrolling on a 390 px wide screen');
  const mshot = path.join(ART, 'explorer-mobile.png');
  await page.screenshot({ path: mshot, fullPage: true });
  console.log(`# screenshot: ${mshot}`);
  check(pageErrors.length === 0, 'no errors in the page', pageErrors.join(' | '));
} catch (e) {
  check(false, 'the browser session ran to the end', String(e && e.stack || e));
  try { await page.screenshot({ path: path.join(ART, 'explorer-failure.png'), fullPage: true }); } catch { /* */ }
} finally {
  await ctx.close();
  await stopServer();
  fs.rmSync(profile, { recursive: true, force: true });
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
