// explorer.test.mjs — browser test of the KoGPT-2 Explorer (web/), run by ctest as
// test_browser_explorer (label "browser"; tests/browser.cmake).
//
// playwright-core drives Debian's Chromium (/usr/bin/chromium; never a downloaded browser):
// load the page, type Korean, see 10 sorted candidates with bars and percentages, click one
// (the prompt grows, the URL updates, the next request sends token ids), keyboard choice,
// Undo, reload the URL (same state), kindly shown errors (429 + retry, network down, 4xx),
// a streamed generation, "Append to prompt", Stop, dark mode and a 390 px wide layout.
// Issue 17 (real daemon only): the prompt's tokens coloured by rank (vs /v1/next-token at each
// prefix) with a tooltip on hover and focus, a candidate's peek from the prefix cache, the tree
// of choices (branch, jump, the link restores it), the mass and entropy at a view temperature,
// the generate panel's penalties (greedy "이 책은" must not loop on the default model), the
// layout-shift score while candidates arrive, focus order and accessible names, and
// screenshots at 390 and 1280 px in light and dark.
// Issue 26 (real daemon only): the exact entropy against the whole distribution from
// `kogpt2 next --top-k V` (the CLI beside KG_DAEMON, or KG_CLI), a double-click and repeated
// keys while the next answer loads, IME composition events, the peek after Undo and a view
// temperature, Enter after a choice, an over-long prompt and a server gone, the small things
// (aligned inputs, visible __, bar widths, peek chips, a branch from the start, /favicon.ico),
// and layout shift over the first stats line and the error banner; GLTR's view (a token's
// tooltip lists its 5 alternatives, as /v1/next-token ranks them; the rank histogram sums to the
// scored tokens); on a 390x844 touch screen (mock too) the first candidate on the first
// screen, a press held on a candidate peeks without choosing (the peek whole and in view), a
// tap chooses; screenshots explorer-26-*.png. Item 13 (KG_DAEMON only): a second kogpt2d
// serving two models (KG_MODEL_DIR as "a", a small random one as "b"): the picker lists both
// and switching sends "model" with the next request; the compare view shows both models'
// candidates in two columns and marks prompt tokens; screenshot explorer-26-compare.png.
// Saves screenshots and prints their paths. Exit 0: passed; 1: a check failed; 77: skipped
// (no chromium, no node_modules, or KG_SERVER_URL unreachable).
//
// The server and the browser: harness.mjs (KG_SERVER_URL, KG_DAEMON + KG_MODEL_DIR, or the mock;
// KG_CHROMIUM, KG_ARTIFACT_DIR).
//
// Setup once: cd tests/browser && npm ci --ignore-scripts
//   node tests/browser/explorer.test.mjs
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import {
  ART, CHROMIUM, ROOT, check, launchBrowser, playwrightChromium, ready, report, spawnDaemon, startServer,
} from './harness.mjs';

const PROMPT = '여러분 2019년 수고하셨습니다. 올해에는';

// ---- prerequisites, the server, the browser (harness.mjs) -------------------------------
const chromium = await playwrightChromium();
const { base, stop: stopServer, mock } = await startServer();
console.log(`# server: ${base}${mock ? ' (mock_server.mjs, a fake daemon)' : ''}`);
const { ctx, page, pageErrors, close: closeBrowser } = await launchBrowser(chromium);
// layout shift (issue 17): every 'layout-shift' entry not caused by recent input is summed
await page.addInitScript(() => {
  window.__cls = 0;
  window.__shifts = [];
  window.__allShift = 0;  // input included: the stats line appears within 500 ms of typing
  new PerformanceObserver((l) => {
    for (const e of l.getEntries()) {
      window.__allShift += e.value;
      if (!e.hadRecentInput) { window.__cls += e.value; window.__shifts.push(e.value); }
    }
  }).observe({ type: 'layout-shift', buffered: true });
});

const cands = page.locator('#cands .cand');
// Waits until a settled (not busy, not stale) list of n candidates is shown, and the layer-by-layer
// request that follows it has come back (so that it never meets a route set for the next answer).
async function settled(n = 10) {
  await page.waitForFunction((n) => {
    const l = document.getElementById('cands');
    return l.getAttribute('aria-busy') === 'false' && !l.classList.contains('stale') &&
      l.querySelectorAll('.cand').length === n && (!n || state.lensFor === state.tokens);
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
// The next candidates request (not a layer-by-layer one: those carry "explain").
const isAnswer = (r) => r.url().endsWith('/v1/next-token') && r.method() === 'POST' && !(r.postDataJSON() || {}).explain;
const nextBody = () => page.waitForRequest(isAnswer).then((r) => r.postDataJSON());

const pctOf = (s) => parseFloat(String(s).replace('<', ''));
async function scoresShown() {
  await page.waitForFunction(() => state.scores && state.tokens && state.scores.length === state.tokens.length &&
    document.querySelectorAll('#toks .tok').length === state.tokens.length);
}

async function issue17() {
  // (1) the prompt's tokens, coloured by rank, checked against /v1/next-token at each prefix
  await page.fill('#text', '');
  await page.locator('#text').pressSequentially('이 책은 정말 재미있다', { delay: 5 });
  await settled();
  await scoresShown();
  const toks = await page.$$eval('#toks .tok', (ts) => ts.map((t) => ({ cls: t.className, label: t.getAttribute('aria-label'),
    role: t.getAttribute('role'), tab: t.tabIndex })));
  const ids = await page.evaluate(() => state.tokens);
  let agree = true, detail = [];
  for (let k = 1; k < ids.length; k++) {
    const j = await (await fetch(base + '/v1/next-token', { method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ tokens: ids.slice(0, k), top_k: 100 }) })).json();
    const r = j.candidates.findIndex((c) => c.id === ids[k]) + 1;  // 0: beyond the top 100
    const want = r && r <= 10 ? ['r10'] : r && r <= 100 ? ['r100'] : ['r1000', 'rx'];  // the histogram's buckets
    agree &&= want.some((w) => toks[k].cls.split(' ').includes(w)) &&
      toks[k].label.includes(j.candidates[0].text.replace(/\n/g, '↵'));
    detail.push(`${k}:${want}`);
  }
  check(toks.length === ids.length && toks[0].cls.includes('r0') && agree,
    'prompt tokens are coloured by their rank and name the top choice (vs /v1/next-token per prefix)', detail.join(' '));
  check(toks.every((t) => t.role === 'listitem') && toks.filter((t) => t.tab === 0).length === 1,
    'the token list is one tab stop with list items');
  await page.locator('#toks .tok').nth(1).hover();
  const tip = await page.textContent('#tip');
  check(await page.isVisible('#tip') && /rank|beyond/.test(tip) && /top choice/.test(tip) && /%/.test(tip),
    'hovering a token shows its rank, probability and the top choice', tip);
  await page.mouse.move(0, 0);
  // keyboard: Tab from the prompt reaches the tokens (after the prompt's buttons); arrows move;
  // focus shows the tooltip
  await page.focus('#text');
  for (let k = 0; k < 5 && !/tok/.test(await page.evaluate(() => document.activeElement.className)); k++)
    await page.keyboard.press('Tab');
  const f1 = await page.evaluate(() => document.activeElement.className);
  await page.keyboard.press('ArrowRight');
  const f2 = await page.evaluate(() => [document.activeElement.dataset.i, document.getElementById('tip').hidden]);
  check(/tok/.test(f1) && f2[0] === '1' && f2[1] === false, 'Tab reaches the tokens, arrows move, focus shows the tooltip', `${f1} ${f2}`);

  // (4) distribution: mass of the ten and entropy; the view temperature re-shapes it
  const d1 = await page.evaluate(() => ({ m: Number($('dist-stats').dataset.mass10), h: Number($('dist-stats').dataset.entropy),
    sum: state.cands.reduce((a, c) => a + c.prob, 0), text: $('dist-stats').textContent }));
  check(Math.abs(d1.m - d1.sum) < 1e-9 && d1.h > 0 && /cover/.test(d1.text) && /entropy/.test(d1.text),
    'the mass of the ten and the entropy are shown', d1.text);
  let req = nextBody();
  await page.$eval('#view-temp', (el) => { el.value = '2'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  const tb = await req;
  await settled();
  await page.waitForFunction(() => Number($('dist-stats').dataset.entropy) > 0 && state.viewTemp === 2);
  const d2 = await page.evaluate(() => ({ m: Number($('dist-stats').dataset.mass10), h: Number($('dist-stats').dataset.entropy) }));
  check(tb.temperature === 2 && d2.h > d1.h && d2.m < d1.m, 'a higher view temperature flattens the distribution',
    `mass ${d1.m.toFixed(3)}→${d2.m.toFixed(3)}, H ${d1.h.toFixed(2)}→${d2.h.toFixed(2)} bits`);
  await page.$eval('#view-temp', (el) => { el.value = '1'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => state.viewTemp === 1);
  await settled();

  // (2) peek: hovering a candidate shows its own next tokens, from the prefix cache
  await page.waitForTimeout(150);  // speculation runs when the engine is idle
  const t0 = Date.now();
  await cands.nth(0).hover();
  await page.waitForFunction(() => $('peek').querySelectorAll('.peek-c').length > 0);
  const pk = await page.evaluate(() => ({ cached: $('peek').dataset.cached, n: $('peek').querySelectorAll('.peek-c').length,
    text: $('peek').textContent }));
  check(pk.n === 5 && pk.cached === '1', 'hovering a candidate shows its next tokens from the prefix cache (no forward pass)',
    `${pk.text} (${Date.now() - t0} ms)`);
  await cands.nth(3).focus();
  await page.waitForFunction(() => ($('peek').dataset.for || '').startsWith(state.tokens.concat(state.cands[3].id).join(',') + '@'));
  check(true, 'focusing a candidate by keyboard shows its peek');
  const live = await page.evaluate(() => [$('cands-status').getAttribute('aria-live'), $('peek').getAttribute('aria-live'),
    document.querySelector('#cands .cand').getAttribute('aria-label')]);
  check(live[0] === 'polite' && live[1] === 'polite' && /%/.test(live[2]), 'live regions for candidates and peek; labelled buttons', live.join(' | '));
  await page.mouse.move(0, 0);

  // (3) the tree: two clicks, back to step 1, another branch; the link restores it all
  const rootTokens = await page.evaluate(() => state.tokens.slice());
  const lat = [];
  for (const i of [0, 0]) {
    const tc = Date.now();
    await cands.nth(i).click();
    await settled();
    lat.push(Date.now() - tc);
  }
  await page.click('#tree .branch .step[data-k="1"]');
  await settled();
  check(JSON.stringify(await page.evaluate(() => state.tokens)) === JSON.stringify(rootTokens.concat(await page.evaluate(() => state.tree.paths[0][0].id))),
    'jumping to step 1 of the path restores that prompt');
  const alt = await page.evaluate(() => state.cands[2].id);
  await cands.nth(2).click();
  await settled();
  const tr = await page.evaluate(() => ({ n: state.tree.paths.length, at: state.tree.at, rows: document.querySelectorAll('#tree .branch').length,
    cur: document.querySelector('#tree [aria-current]')?.getAttribute('aria-label') }));
  check(tr.n === 2 && tr.rows === 2 && tr.at.join() === '1,2' && /Branch 2, from step 1/.test(tr.cur || ''),
    'another choice at an earlier point makes a branch, shown as a second row', JSON.stringify(tr));
  const url = page.url();
  const want = await page.evaluate(() => ({ text: $('text').value, tokens: state.tokens, paths: state.tree.paths.map((p) => p.map((c) => c.id + c.text)), at: state.tree.at }));
  await page.goto('about:blank');
  await page.goto(url);
  await settled();
  await page.waitForFunction(() => state.tree.paths.length === 2);
  const got = await page.evaluate(() => ({ text: $('text').value, tokens: state.tokens, paths: state.tree.paths.map((p) => p.map((c) => c.id + c.text)), at: state.tree.at }));
  check(JSON.stringify(got) === JSON.stringify(want) && alt === got.tokens.at(-1), 'the link restores the text, the tokens and the whole tree', url);
  await page.click('#tree .branch:first-child .step[data-k="2"]');
  await settled();
  check(await page.evaluate(() => state.tree.at.join()) === '0,2', 'after the reload the first branch can be walked again');
  lat.sort((a, b) => a - b);
  console.log(`# click to settled list (2 clicks): ${lat.join(', ')} ms`);

  // (5) the generate panel's penalties: greedy "이 책은" does not loop with the defaults
  const pen = await page.evaluate(() => ['repetition_penalty', 'presence_penalty', 'frequency_penalty'].map((id) => Number($(id).value)));
  check(pen[0] > 1 && pen[2] > 0, 'the penalties are offered with defaults', pen.join(', '));
  const greedy = async (rp, pp, fp) => (await (await fetch(base + '/v1/generate', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text: '이 책은', max_tokens: 40, temperature: 0, repetition_penalty: rp, presence_penalty: pp, frequency_penalty: fp }) })).json()).text;
  const loops = (t) => /(.{3,})\1\1/.test(t);
  const plain = await greedy(1, 0, 0), withDefaults = await greedy(...pen);
  const onDefault = (await page.textContent('#model-name')) === 'default';
  check(!onDefault || !loops(withDefaults), 'greedy generation with the default penalties does not loop', `${JSON.stringify(plain.slice(0, 40))} → ${JSON.stringify(withDefaults.slice(0, 60))}`);
  const greq = page.waitForRequest((r) => r.url().endsWith('/v1/generate')).then((r) => r.postDataJSON());
  await page.fill('#max_tokens', '8');
  await page.click('#generate');
  const gb = await greq;
  await page.waitForSelector('#generate:not([disabled])', { timeout: 60000 });
  check(gb.repetition_penalty === pen[0] && gb.presence_penalty === pen[1] && gb.frequency_penalty === pen[2],
    'the generate request sends the penalties');

  // (6) no layout shift while candidates arrive (typing, a click, a temperature change)
  const cls0 = await page.evaluate(() => window.__cls);
  // in page coordinates: typing scrolls the prompt into view, which is no shift
  const box0 = await page.$eval('#gen-h', (e) => e.getBoundingClientRect().top + scrollY);
  await page.fill('#text', '');
  await settled(0).catch(() => {});
  await page.locator('#text').pressSequentially('오늘 날씨가', { delay: 5 });
  await settled();
  await page.waitForTimeout(600);
  const box1 = await page.$eval('#gen-h', (e) => e.getBoundingClientRect().top + scrollY);
  const cls = await page.evaluate(() => window.__cls);
  check(cls - cls0 < 0.01 && Math.abs(box1 - box0) < 1, 'no layout shift when candidates arrive',
    `CLS ${(cls - cls0).toFixed(4)} (whole session ${cls.toFixed(4)}), the generate panel moved ${Math.abs(box1 - box0)} px`);
  // focus order by keyboard: prompt → buttons → tokens (their own card since issue 26, below
  // the candidates on a phone) → view temperature → candidates → tree
  await page.focus('#text');
  const order = [];
  for (let i = 0; i < 9; i++) {
    await page.keyboard.press('Tab');
    order.push(await page.evaluate(() => document.activeElement.id || document.activeElement.className));
  }
  const pos = (re) => order.findIndex((x) => re.test(x));
  check(pos(/^undo|^clear/) >= 0 && pos(/^undo|^clear/) < pos(/tok/) && pos(/tok/) < pos(/view-temp/) &&
    pos(/view-temp/) < pos(/cand/) && pos(/cand/) >= 0,
  'keyboard focus order: prompt, buttons, tokens, view temperature, candidates', order.join(' → '));
  const unlabelled = await page.$$eval('input, textarea, button, [role=listitem]', (els) => els.filter((e) => {
    const lab = e.getAttribute('aria-label') || (e.labels && e.labels.length && e.labels[0].textContent.trim()) || e.textContent.trim() || e.getAttribute('aria-labelledby');
    return !lab;
  }).map((e) => e.id || e.className));
  check(unlabelled.length === 0, 'every control has an accessible name', unlabelled.join(' '));
  // a 390 px screen: shots in light and dark
  for (const scheme of ['light', 'dark']) {
    await page.emulateMedia({ colorScheme: scheme });
    await page.setViewportSize({ width: 390, height: 844 });
    check(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1), `390 px (${scheme}): no horizontal scroll`);
    const f = path.join(ART, `explorer-390-${scheme}.png`);
    await page.screenshot({ path: f, fullPage: true });
    console.log(`# screenshot: ${f}`);
    await page.setViewportSize({ width: 1280, height: 900 });
    const g = path.join(ART, `explorer-1280-${scheme}.png`);
    await page.screenshot({ path: g, fullPage: true });
    console.log(`# screenshot: ${g}`);
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.fill('#max_tokens', '64');
  // back to the state the later steps expect: the typed prompt
  await page.fill('#text', '');
  await page.locator('#text').pressSequentially(PROMPT, { delay: 5 });
  await settled();
}

const post = async (p, body) => (await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify(body) })).json();
const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));
const shot = async (name) => {
  const f = path.join(ART, `explorer-26-${name}.png`);
  await page.screenshot({ path: f, fullPage: true });
  console.log(`# screenshot: ${f}`);
};
async function typePrompt(t) {
  await page.fill('#text', '');
  await page.locator('#text').pressSequentially(t, { delay: 5 });
  await settled();
}

// The entropy in bits of the distribution at temperature T from every token's logprob at T = 1:
// the page's figure must be this, not a bound from the ten shown.
function entropyOf(logprobs, T) {
  const z = logprobs.map((l) => l / T), mx = Math.max(...z);
  const lse = mx + Math.log(z.reduce((a, x) => a + Math.exp(x - mx), 0));
  return -z.reduce((h, x) => h + Math.exp(x - lse) * (x - lse), 0) / Math.LN2;
}

// Issue 26 (1): the prompt stays a token path. The next-token answers are replaced by the
// server's own token objects (from /v1/score) of the three bytes of "진" and </s>, so that
// they can be clicked wherever the model would rank them.
async function issue26Tokens() {
  await typePrompt('오늘');
  const base = await page.evaluate(() => state.tokens.slice());
  const jin = [0xec, 0xa7, 0x84];
  const sc = await post('/v1/score', { tokens: [2, ...jin.map((b) => b + 3)] });
  const toks = sc.scores.map(({ id, piece, text, display, bytes }) => ({ id, piece, text, display, bytes }));
  const [eos, ...bytes] = toks;
  check(bytes.every((t, i) => t.piece === `<0x${jin[i].toString(16).toUpperCase()}>` && t.bytes[0] === jin[i]) &&
    eos.piece === '</s>' && eos.bytes.length === 0 && eos.display === '</s>',
  '/v1/score gives each token its bytes and a display form', JSON.stringify(toks));
  const a = await post('/v1/score', { tokens: [2, 100] });
  const dt = await post('/v1/detokenize', { tokens: [100] });
  check(a.scores[1].text === dt.text && dt.text === 'a', "/v1/score's text of a byte token is /v1/detokenize's",
    `${a.scores[1].text} vs ${dt.text}`);
  const list = toks.map((t, i) => Object.assign({ prob: 0.2 - i / 100, logprob: Math.log(0.2 - i / 100) }, t));
  await page.route('**/v1/next-token', async (r) => {
    const b = r.request().postDataJSON();
    await r.fulfill({ contentType: 'application/json', body: JSON.stringify({ model: 'm', tokens: b.tokens || base,
      candidates: list.slice(0, b.top_k), entropy_bits: 3, candidates_mass: 0.7, prompt_tokens: (b.tokens || base).length,
      cached_tokens: 0, timings: { total_ms: 1 } }) });
  });
  await page.fill('#text', '오늘 ');  // a fresh answer from the route
  await page.keyboard.press('Backspace');
  const click = async (id) => { await page.click(`#cands .cand[data-id="${id}"]`); await settled(toks.length); };
  await page.locator('#text').press('End');
  await settled(toks.length);
  await click(bytes[0].id);
  await click(bytes[1].id);
  const mid = { text: await prompt(), pend: await page.textContent('#pending'), hidden: await page.isHidden('#pending') };
  check(mid.text === '오늘' && !mid.hidden && /<0xEC><0xA7>/.test(mid.pend),
    'two bytes of a character show as pending bytes, not as text', JSON.stringify(mid));
  await click(bytes[2].id);
  const ids = await page.evaluate(() => state.tokens.slice());
  check(await prompt() === '오늘진' && await page.isHidden('#pending') &&
    JSON.stringify(ids) === JSON.stringify(base.concat(bytes.map((t) => t.id))),
  'the three byte candidates of "진" show "진", and the prompt is those three ids', `${await prompt()} ${ids}`);
  await click(eos.id);
  const afterEos = await page.evaluate(() => state.tokens.slice());
  check(await prompt() === '오늘진' && afterEos[afterEos.length - 1] === 2, 'clicking </s> keeps id 2, with no literal "</s>"',
    `${await prompt()} ${afterEos}`);
  await page.unroute('**/v1/next-token');
  await page.locator('#text').press('End');
  await page.keyboard.type('이');
  await settled();
  const edited = await page.evaluate(() => state.tokens.slice());
  check(JSON.stringify(edited.slice(0, afterEos.length)) === JSON.stringify(afterEos) && edited.length > afterEos.length &&
    !(await prompt()).includes('<'), 'after an edit the clicked byte and </s> ids stay; the typed text is tokenized',
  `${await prompt()} ${edited}`);
  await scoresShown();
  const shownToks = await page.textContent('#toks');
  check(shownToks.includes('</s>') && (await page.$$('#toks .piece.special')).length === 1,
    'the token view shows </s> as a special token', shownToks);
  await typePrompt('안녕\n하세요');
  await scoresShown();
  const nl = await page.textContent('#toks');
  check(!nl.includes('<0x0A>') && nl.includes('↵'), 'a typed newline shows as ↵, not <0x0A>', nl);
  await shot('tokens');
}

// Issue 26 (12): GLTR's view from the one /v1/score answer: a token's tooltip lists the model's
// 5 most likely tokens there (the ids /v1/next-token ranks first at that prefix), and the
// histogram's buckets hold every scored token (all but the first) by its rank.
async function issue26Gltr() {
  await typePrompt('이 책은 정말 재미있다');
  await scoresShown();
  await page.locator('#toks .tok').nth(2).hover();
  const tip = await page.evaluate(() => ({ visible: !$('tip').hidden, ids: state.scores[2].alternatives.map((a) => a.id),
    items: [...document.querySelectorAll('#tip .tip-alts li')].map((li) => li.textContent), tokens: state.tokens.slice() }));
  const nt = await post('/v1/next-token', { tokens: tip.tokens.slice(0, 2), top_k: 5 });
  check(tip.visible && tip.items.length === 5 && tip.items.every((t) => /%/.test(t)) &&
    JSON.stringify(tip.ids) === JSON.stringify(nt.candidates.map((c) => c.id)),
  "a token's tooltip lists the model's 5 most likely tokens there with their probabilities (vs /v1/next-token)",
  tip.items.join(' | '));
  await shot('gltr');
  await page.mouse.move(0, 0);
  const hist = await page.$$eval('#hist li', (ls) => ls.map((l) => ({ b: l.dataset.bucket, n: Number(l.dataset.count),
    w: l.querySelector('.fill').getBoundingClientRect().width, text: l.textContent })));
  const ranks = await page.evaluate(() => state.scores.slice(1).map((s) => s.rank));
  const want = [10, 100, 1000, Infinity].map((hi, k, a) => ranks.filter((r) => r > (k ? a[k - 1] : 0) && r <= hi).length);
  check(hist.length === 4 && hist.reduce((a, h) => a + h.n, 0) === ranks.length && hist.every((h, k) => h.n === want[k]),
    'the rank histogram (top 10 / 100 / 1000 / beyond) counts every scored token once',
    `${hist.map((h) => `${h.b}:${h.n}`).join(' ')} of ${ranks.length}; ranks ${ranks.join(',')}`);
}

// Issue 26 (8): a 390x844 touch screen (its own browser: a mobile, touch context). The first
// candidate starts on the first screen; a press held on a candidate shows its peek, whole and
// in view, and chooses nothing; a tap chooses.
async function touch390() {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking'] });
  try {
    const tctx = await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true,
      deviceScaleFactor: 2, locale: 'ko-KR' });
    const tp = await tctx.newPage();
    tp.setDefaultTimeout(15000);
    const tshot = async (name) => {
      const f = path.join(ART, `explorer-26-${name}.png`);
      await tp.screenshot({ path: f });
      console.log(`# screenshot: ${f}`);
    };
    const ready10 = () => tp.waitForFunction(() => $('cands').getAttribute('aria-busy') === 'false' &&
      !$('cands').classList.contains('stale') && document.querySelectorAll('#cands .cand').length === 10);
    await tp.goto(base + '/?text=' + encodeURIComponent(PROMPT));
    await ready10();
    const fold = await tp.evaluate(() => {
      const bs = [...document.querySelectorAll('#cands .cand')].map((b) => b.getBoundingClientRect());
      return { top: Math.round(bs[0].top), h: innerHeight, whole: bs.filter((r) => r.top >= 0 && r.bottom <= innerHeight).length };
    });
    check(fold.top >= 0 && fold.top < fold.h && fold.whole >= 3, '390x844: the candidates are on the first screen',
      `first candidate at ${fold.top} px of ${fold.h}; ${fold.whole} wholly visible`);
    await tshot('touch');
    await tp.waitForTimeout(150);  // speculation runs when the engine is idle
    const before = await tp.evaluate(() => state.tokens.slice());
    const box = await tp.locator('#cands .cand').nth(2).boundingBox();
    const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
    const cdp = await tctx.newCDPSession(tp);
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: [at] });
    await tp.waitForTimeout(800);
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
    await tp.waitForFunction(() => $('peek').querySelectorAll('.peek-c').length > 0);
    await tp.waitForTimeout(400);  // a click the press might end with would have chosen by now
    const pk = await tp.evaluate(() => {
      const p = $('peek'), r = p.getBoundingClientRect();
      return { for: p.dataset.for || '', want: state.tokens.concat(state.cands[2].id).join(',') + '@', tokens: state.tokens.slice(),
        whole: p.scrollHeight <= p.clientHeight + 1 && [...p.querySelectorAll('.peek-c, .peek-src')].every((c) =>
          c.getBoundingClientRect().bottom <= r.bottom + 1 && c.getBoundingClientRect().right <= r.right + 1),
        inView: r.top >= 0 && r.bottom <= innerHeight, text: p.textContent };
    });
    check(pk.for.startsWith(pk.want) && JSON.stringify(pk.tokens) === JSON.stringify(before) && pk.whole && pk.inView,
      'touch: a press held on a candidate shows its peek, whole and in view, and chooses nothing', pk.text);
    await tshot('touch-peek');
    const first = await tp.evaluate(() => state.cands[0].id);
    await tp.locator('#cands .cand').nth(0).tap();
    await tp.waitForFunction((n) => state.tokens && state.tokens.length === n, before.length + 1);
    await ready10();
    check(await tp.evaluate(() => state.tokens.at(-1)) === first, 'touch: a tap on a candidate chooses it');
    await tshot('touch-chosen');
  } finally {
    await browser.close();
  }
}

// Item 13: a daemon of two models; the picker and the compare view (KG_DAEMON only).
async function issue26Models() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-models-'));
  try {
    execFileSync('python3', [path.join(ROOT, 'tests', 'test_server_lib.py'), 'make-model', path.join(dir, 'b')],
      { stdio: 'ignore' });
  } catch (e) {
    check(false, 'item 13: a small model from test_server_lib.py make-model', String(e));
    return;
  }
  const d = await spawnDaemon(process.env.KG_DAEMON, ['--model', 'a=' + process.env.KG_MODEL_DIR,
    '--model', 'b=' + path.join(dir, 'b'), '--quiet']);
  const url = d.url;
  const p = await ctx.newPage();
  try {
    check(await ready(url, 120000), 'two models: the daemon is ready');
    await p.goto(url + '/');
    await p.waitForSelector('#model-pick:not([hidden])');
    const opts = await p.$$eval('#model-pick option', (o) => o.map((x) => x.value));
    check(JSON.stringify(opts) === '["a","b"]', 'the picker lists both models', opts.join(','));
    await p.fill('#text', PROMPT);
    await p.waitForSelector('#cands .cand');
    const sent = p.waitForRequest((r) => r.url().endsWith('/v1/next-token') && /"model":"b"/.test(r.postData() || ''));
    await p.selectOption('#model-pick', 'b');
    check(Boolean(await sent.catch(() => null)), 'switching the model sends "model": "b"');
    await p.waitForFunction(() => !document.getElementById('cands').classList.contains('stale')
      && document.querySelectorAll('#cands .cand').length > 0);
    await p.click('#cmp-go');
    await p.waitForFunction(() => document.querySelectorAll('#cmp-a-cands li').length > 0
      && document.querySelectorAll('#cmp-b-cands li').length > 0);
    const heads = [await p.textContent('#cmp-a-h'), await p.textContent('#cmp-b-h')];
    check(heads.join() === 'a,b', 'the compare view has a column per model', heads.join());
    check(await p.locator('#cmp-toks .tok.disagree').count() > 0, 'the compare view marks prompt tokens',
      await p.textContent('#cmp-stats'));
    const shot = path.join(ART, 'explorer-26-compare.png');
    await p.screenshot({ path: shot, fullPage: true });
    console.log(`# screenshot: ${shot}`);
  } finally {
    await p.close();
    await d.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

async function issue26() {
  await issue26Gltr();
  await issue26Tokens();
  // (5) exact entropy vs the whole vocabulary from the CLI (the same model, every candidate)
  await typePrompt('이 책은');
  const ids = await page.evaluate(() => state.tokens.slice());
  const cli = process.env.KG_CLI || (process.env.KG_DAEMON && path.join(path.dirname(process.env.KG_DAEMON), 'kogpt2'));
  if (cli && fs.existsSync(cli) && process.env.KG_MODEL_DIR) {
    const vocab = JSON.parse(fs.readFileSync(path.join(process.env.KG_MODEL_DIR, 'config.json'), 'utf8')).vocab_size;
    const all = JSON.parse(execFileSync(cli, ['next', '--model', process.env.KG_MODEL_DIR, '--device', 'cpu',
      '--tokens', ids.join(','), '--top-k', String(vocab), '--json'], { maxBuffer: 1 << 28 }));
    const lps = all.candidates.map((c) => c.logprob);
    for (const T of [1, 2]) {
      const j = await post('/v1/next-token', { tokens: ids, top_k: 10, temperature: T });
      const want = entropyOf(lps, T), top10 = j.candidates.reduce((a, c) => a + c.prob, 0);
      // tolerance: float32 logits and probabilities summed over V terms, ~1e-5 bits; 1e-3 stated
      check(all.candidates.length === vocab && Math.abs(j.entropy_bits - want) < 1e-3 && Math.abs(j.candidates_mass - top10) < 1e-6,
        `/v1/next-token's entropy_bits is the exact entropy over all ${vocab} tokens at T=${T} (±1e-3 bits)`,
        `server ${j.entropy_bits.toFixed(5)}, from every logprob ${want.toFixed(5)}, mass ${j.candidates_mass.toFixed(5)}`);
    }
    const shown = await page.evaluate(() => ({ h: Number($('dist-stats').dataset.entropy), text: $('dist-stats').textContent }));
    const want1 = entropyOf(lps, 1);
    check(Math.abs(shown.h - want1) < 1e-3 && shown.text.includes(want1.toFixed(2)) && !/≈|bound/.test(shown.text),
      'the page shows the exact entropy', `${shown.text} vs ${want1.toFixed(4)}`);
  } else {
    console.log(`# the exact-entropy check needs the CLI beside KG_DAEMON and KG_MODEL_DIR (skipped)`);
  }

  // (2) a double-click and repeated keys while the next answer loads add the candidate once
  await settled();
  const before = await page.evaluate(() => ({ tokens: state.tokens.slice(), text: $('text').value,
    id: state.cands[1].id, t: state.cands[1].text }));
  await page.route('**/v1/next-token', async (r) => { await sleep(400); await r.continue().catch(() => {}); });
  await cands.nth(1).dblclick();
  await page.keyboard.press('1');
  await page.keyboard.press('1');
  await page.unroute('**/v1/next-token');
  await settled();
  await page.waitForTimeout(300);
  const after = await page.evaluate(() => ({ tokens: state.tokens, text: $('text').value }));
  check(JSON.stringify(after.tokens) === JSON.stringify(before.tokens.concat(before.id)) && after.text === before.text + before.t,
    'a double-click and two key presses while the answer loads add the candidate once', JSON.stringify(after.text));

  // (6) Enter after a choice takes the new list's best, not the same slot (arrows to the 4th)
  await cands.nth(0).focus();
  for (let k = 0; k < 3; k++) await page.keyboard.press('ArrowDown');
  const c3 = await page.evaluate(() => state.cands[3].id);
  await page.keyboard.press('Enter');
  await settled();
  const best = await page.evaluate(() => state.cands[0].id);
  await page.keyboard.press('Enter');
  await settled();
  const tail = await page.evaluate(() => state.tokens.slice(-2));
  check(tail[0] === c3 && tail[1] === best, 'Enter after a choice picks the new list\'s top candidate', `${tail} vs ${c3},${best}`);

  // (4) the peek follows the list: after Undo (Backspace in the list) and a view temperature
  const peekOk = () => page.evaluate(() => {
    const f = $('peek').dataset.for;
    return !f || state.cands.some((c) => f === state.tokens.concat(c.id).join(',') + '@' + state.viewTemp);
  });
  await cands.nth(2).hover();
  await page.waitForFunction(() => ($('peek').dataset.for || '').startsWith(state.tokens.join(',') + ','));
  await page.click('#undo');
  await settled();
  await page.waitForTimeout(200);
  const pu = await peekOk();
  await cands.nth(2).hover();
  await page.waitForFunction(() => ($('peek').dataset.for || '').startsWith(state.tokens.join(',') + ','));
  await page.$eval('#view-temp', (el) => { el.value = '2'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => state.viewTemp === 2);
  await settled();
  await page.waitForFunction(() => ($('peek').dataset.for || '').endsWith('@2'), null, { timeout: 5000 }).catch(() => {});
  const pt = await peekOk() && await page.evaluate(() => ($('peek').dataset.for || '').endsWith('@2'));
  check(pu && pt, 'the peek names a listed candidate after Undo and after a view-temperature change');
  // (11) 1–4 % bars stay visible: a flat view (T = 3)
  await page.$eval('#view-temp', (el) => { el.value = '3'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => state.viewTemp === 3);
  await settled();
  const bars = await readCands();
  check(bars.every((b) => b.bar >= 5.9), 'every bar is at least 6 px wide on a flat distribution',
    bars.map((b) => `${b.pct}:${b.bar.toFixed(1)}`).join(' '));
  await page.$eval('#view-temp', (el) => { el.value = '1'; el.dispatchEvent(new Event('input', { bubbles: true })); });
  await page.waitForFunction(() => state.viewTemp === 1);
  await settled();
  // (11) the peek: chips, no " · ", plain words for where it came from
  await page.waitForTimeout(150);
  await cands.nth(0).hover();
  await page.waitForFunction(() => $('peek').querySelectorAll('.peek-c').length > 0);
  const pk = await page.evaluate(() => ({ text: $('peek').textContent, border: getComputedStyle($('peek').querySelector('.peek-c')).borderTopStyle }));
  check(!pk.text.includes('·') && pk.border === 'solid' && !/prefix cache|forward pass/.test(pk.text),
    'the peek shows chips without " · " and in plain words', pk.text);
  await shot('peek');
  await page.mouse.move(0, 0);

  // (3) IME: half-typed syllables are not sent; the composed text is, once it ends
  await typePrompt('오늘');
  let sent = [];
  const onReq = (r) => { if (isAnswer(r)) sent.push(r.postDataJSON()); };
  page.on('request', onReq);
  await page.focus('#text');
  await page.$eval('#text', (el) => el.dispatchEvent(new CompositionEvent('compositionstart', { data: '' })));
  for (const part of [' ㄴ', ' 나', ' 날', ' 날ㅆ', ' 날씨']) {
    await page.$eval('#text', (el, v) => {
      el.value = '오늘' + v;
      el.dispatchEvent(new CompositionEvent('compositionupdate', { data: v.trim() }));
      el.dispatchEvent(new InputEvent('input', { bubbles: true, isComposing: true, inputType: 'insertCompositionText', data: v.trim() }));
    }, part);
    await page.waitForTimeout(320);  // past the 250 ms pause that sends typed text
  }
  const during = sent.length;
  await page.$eval('#text', (el) => el.dispatchEvent(new CompositionEvent('compositionend', { data: '씨' })));
  await settled();
  await page.waitForTimeout(100);
  page.off('request', onReq);
  check(during === 0 && sent.length >= 1 && sent.every((b) => b.text === '오늘 날씨'),
    'an IME composition is sent only when it ends, as the composed text', `${during} during, then ${JSON.stringify(sent.map((b) => b.text))}`);

  // (11) the small things: inputs in line, __ visible in the footer and on the current step
  const rows = await page.$$eval('.params label', (ls) => ls.map((l) => ({ row: Math.round(l.getBoundingClientRect().top),
    top: Math.round(l.querySelector('input').getBoundingClientRect().top) })));
  const misaligned = rows.filter((a) => rows.some((b) => b.row === a.row && Math.abs(b.top - a.top) > 1));
  check(misaligned.length === 0, 'the generate inputs of a row are in line (presence penalty included)', JSON.stringify(rows));
  const contrast = (sel) => page.$eval(sel, (el) => {
    let bg = el, c = getComputedStyle(el).color;
    while (bg && /rgba\(0, 0, 0, 0\)|transparent/.test(getComputedStyle(bg).backgroundColor)) bg = bg.parentElement;
    const op = Number(getComputedStyle(el).opacity);
    return { color: c, bg: bg ? getComputedStyle(bg).backgroundColor : 'none', op, w: el.getBoundingClientRect().width };
  });
  const fl = await contrast('footer .sp');
  check(fl.color !== fl.bg && fl.w > 4 && fl.op >= 0.5, 'the footer\'s __ legend is visible', JSON.stringify(fl));
  const sp = await page.evaluate(() => state.cands.findIndex((c) => (c.piece || '').startsWith('\u2581')));
  if (sp >= 0) {
    await cands.nth(sp).click();
    await settled();
    const cs = await contrast('#tree [aria-current] .sp');
    check(cs.color !== cs.bg, '__ stays visible on the current step of the path', JSON.stringify(cs));
  }
  // a branch from the start reads differently from Path 1
  await page.click('#tree .branch:first-child .step.root');
  await settled();
  const other = await page.evaluate(() => state.cands.findIndex((c) => c.id !== state.tree.paths[0][0].id));
  await cands.nth(other).click();
  await settled();
  const heads = await page.$$eval('#tree .step.root', (bs) => bs.map((b) => b.textContent));
  check(heads.length >= 2 && new Set(heads).size === heads.length, 'a branch from the start is marked apart from Path 1', heads.join(' | '));
  await shot('branch');
  const fav = await fetch(base + '/favicon.ico');
  check(fav.status === 200 && /icon/.test(fav.headers.get('content-type') || ''), '/favicon.ico is served',
    `${fav.status} ${fav.headers.get('content-type')}`);

  // (10) an over-long prompt: a human message, and no figures of the previous prompt
  await typePrompt('오늘 날씨가');
  await scoresShown();
  const nCtx = (await (await fetch(base + '/v1/models')).json()).data[0].n_ctx || 1024;
  await page.fill('#text', '가나다라마바사 '.repeat(Math.ceil(nCtx / 2)));
  await page.waitForSelector('#error:not([hidden])');
  const long = await page.evaluate(() => ({ err: $('error').textContent, toks: document.querySelectorAll('#toks .tok').length,
    stats: $('stats').textContent, ent: $('dist-stats').dataset.entropy }));
  check(/too long/.test(long.err) && !/n_prompt_tokens|n_ctx/.test(long.err) && long.toks === 0 && long.stats === '' && long.ent === undefined,
    'an over-long prompt is explained in words and the old colours and figures are gone', JSON.stringify(long));
  await shot('too-long');
  // the server gone: the dot turns red, Undo stays usable
  await typePrompt('오늘 날씨가');
  await page.route('**/v1/**', (r) => r.abort('connectionrefused'));
  const was = await prompt();
  await cands.nth(0).click();
  await page.waitForSelector('#error:not([hidden])');
  const gone = await page.evaluate(() => ({ dot: $('model').className, undo: $('undo').disabled, name: $('model-name').textContent }));
  await shot('server-gone');
  await page.click('#undo');
  check(/bad/.test(gone.dot) && !gone.undo && await prompt() === was, 'with the server gone the dot turns red and Undo still works',
    JSON.stringify(gone));
  await page.unroute('**/v1/**');
  await page.waitForFunction(() => $('model').classList.contains('ok'), null, { timeout: 10000 });
  await settled();
  await page.waitForSelector('#error', { state: 'hidden' });
  check(true, 'the page recovers by itself when the server is back');

  // (9) layout shift: the first stats line and the error banner move nothing
  await page.goto(base + '/');
  await page.waitForFunction(() => document.querySelector('#model').classList.contains('ok'));
  const pos = () => page.evaluate(() => ['gen-h', 'next-h', 'toks-h'].map((id) => Math.round($(id).getBoundingClientRect().top)).join(','));
  const s0 = await page.evaluate(() => window.__allShift), p0 = await pos();
  await page.locator('#text').pressSequentially('오늘 날씨가', { delay: 5 });
  await settled();
  await page.waitForTimeout(600);
  const s1 = await page.evaluate(() => window.__allShift), p1 = await pos();
  await page.route('**/v1/next-token', (r) => r.fulfill({ status: 422, contentType: 'application/json',
    body: JSON.stringify({ error: { code: 422, type: 'invalid_request_error', message: 'nope' } }) }), { times: 1 });
  await page.keyboard.type('은');
  await page.waitForSelector('#error:not([hidden])');
  await page.waitForTimeout(300);
  const p2 = await pos();
  await page.keyboard.press('Backspace');
  await page.waitForSelector('#error', { state: 'hidden' });
  await settled();
  await page.waitForTimeout(300);
  const s3 = await page.evaluate(() => window.__allShift), p3 = await pos();
  check(p0 === p1 && p1 === p2 && p2 === p3 && s3 - s0 < 0.01 && (await page.textContent('#stats')).length > 0,
    'no layout shift when the stats line first appears or the error banner comes and goes (input included)',
    `shift ${(s1 - s0).toFixed(4)} + ${(s3 - s1).toFixed(4)}; tops ${p0} / ${p1} / ${p2} / ${p3}`);
  await typePrompt(PROMPT);
}

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

  // 5b. issue 17 on the real daemon: token colours, peek, tree, distribution, keyboard, CLS
  await page.mouse.move(0, 0);
  if (mock) console.log('# issue 17 checks need the real daemon (skipped on the mock)');
  else {
    await issue17();
    await page.mouse.move(0, 0);
    await issue26();
  }
  await page.mouse.move(0, 0);

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
  await touch390();
  if (process.env.KG_DAEMON && !process.env.KG_SERVER_URL) await issue26Models();
  check(pageErrors.length === 0, 'no errors in the page', pageErrors.join(' | '));
} catch (e) {
  check(false, 'the browser session ran to the end', String(e && e.stack || e));
  try { await page.screenshot({ path: path.join(ART, 'explorer-failure.png'), fullPage: true }); } catch { /* */ }
} finally {
  await closeBrowser();
  await stopServer();
}
process.exit(report());
