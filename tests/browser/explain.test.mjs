// explain.test.mjs — browser test of the Explorer's views of how the model reaches its guess
// (issue 36), run by ctest as test_browser_explain (label "browser"; tests/browser.cmake), against
// the real daemon only (KG_DAEMON + KG_MODEL_DIR, or KG_SERVER_URL; the mock has no "explain"):
//   1. layer by layer: the grid has a row per layer with the layer's best tokens as
//      /v1/next-token's explain.lens gives them, follows the hovered candidate (its rank column,
//      its cells marked, the summary line), then the one the keyboard focuses, then one a touch
//      held on (a touch context); it can be reached by Tab and has an accessible name;
//   2. where it looks: hovering, then focusing, a prompt token marks under the tokens up to it
//      their share of its attention (the layer's head mean, then one head, as the API gives
//      them), names the tokens it looks at most, and leaves the GLTR colours as they were;
//   3. no layout shift while the lens arrives and tokens are hovered (PerformanceObserver);
//   4. the loose ends: a shared link ending in pending bytes reloads to the same state (no U+FFFD,
//      the bytes pending again, the same ids); token colours are the histogram's rank buckets;
//      the model picker (KG_DAEMON: the model served twice) styled like the page's buttons.
// Screenshots explain-{lens,attention,pending,picker}.png in $KG_ARTIFACT_DIR.
// Exit 0 pass, 1 fail, 77 skip (no Chromium, no node_modules, no daemon).
import path from 'node:path';
import {
  ART, CHROMIUM, check, launchBrowser, playwrightChromium, ready, report, skip, spawnDaemon, startServer,
} from './harness.mjs';

if (!process.env.KG_SERVER_URL && !(process.env.KG_DAEMON && process.env.KG_MODEL_DIR))
  skip('the views of explain need the real daemon (KG_DAEMON and KG_MODEL_DIR, or KG_SERVER_URL)');
const chromium = await playwrightChromium();
const { base, stop: stopServer } = await startServer();
console.log(`# server: ${base}`);
const { ctx, page, pageErrors, close: closeBrowser } = await launchBrowser(chromium);
await page.addInitScript(() => {  // layout shift not caused by input, summed
  window.__cls = 0;
  new PerformanceObserver((l) => {
    for (const e of l.getEntries()) {
      if (e.hadRecentInput) continue;
      window.__cls += e.value;
      window.__shifted = (window.__shifted || []).concat(e.sources.map((s) => s.node && (s.node.id || s.node.className)));
    }
  }).observe({ type: 'layout-shift', buffered: true });
});

const post = async (p, body) => (await fetch(base + p, { method: 'POST', headers: { 'Content-Type': 'application/json' },
  body: JSON.stringify(body) })).json();
const shot = async (name, p = page) => {
  const f = path.join(ART, `explain-${name}.png`);
  await p.screenshot({ path: f, fullPage: true });
  console.log(`# screenshot: ${f}`);
};
// The candidates are shown, the lens request after them has come back, the scores are in.
async function settledAll(p = page) {
  await p.waitForFunction(() => {
    const l = document.getElementById('cands');
    return l.getAttribute('aria-busy') === 'false' && !l.classList.contains('stale') && state.cands.length > 0 &&
      state.lensFor === state.tokens && state.scores && state.scores.length === state.tokens.length;
  });
}
async function typePrompt(t) {
  await page.fill('#text', '');
  await page.locator('#text').pressSequentially(t, { delay: 5 });
  await settledAll();
}
// The grid as shown: header's followed piece, and per row its rank cell and token ids.
const readGrid = () => page.evaluate(() => ({
  followed: Number(document.getElementById('lens-box').dataset.for),
  rows: [...document.querySelectorAll('#lens tbody tr')].map((tr) => ({
    rank: Number(tr.querySelector('td.lens-rank').textContent),
    ids: [...tr.querySelectorAll('td.lens-tok')].map((td, k) => ({ k, followed: td.classList.contains('followed') })),
  })),
  sum: document.getElementById('lens-sum').textContent,
}));

// 1. layer by layer
async function lensView() {
  await typePrompt('여러분 2019년 수고하셨습니다. 올해에는');
  const tokens = await page.evaluate(() => state.tokens.slice());
  const api = (await post('/v1/next-token', { tokens, top_k: 10, explain: { lens: true, top_k: 5 } })).explain.lens;
  const cands = await page.evaluate(() => state.cands.map((c) => c.id));
  const follows = async (i, how) => {
    await page.waitForFunction((id) => Number(document.getElementById('lens-box').dataset.for) === id, cands[i]);
    const g = await readGrid();
    const f = api.candidates.find((c) => c.id === cands[i]);
    const ranksOk = g.rows.length === api.layers.length && g.rows.every((r, k) => r.rank === f.ranks[k]);
    const marksOk = g.rows.every((r, k) => r.ids.every((c) => c.followed === (api.layers[k].top[c.k].id === cands[i])));
    check(ranksOk && marksOk && /Rank by layer/.test(g.sum),
      `the grid follows candidate ${i + 1} ${how}: its rank at each of ${api.layers.length} layers and its cells marked`,
      `ranks ${g.rows.map((r) => r.rank).join(',')} vs ${f.ranks.join(',')}; ${g.sum}`);
  };
  const cells = await page.$$eval('#lens tbody tr', (trs) => trs.map((tr) =>
    [...tr.querySelectorAll('td.lens-tok')].map((td) => Number(td.dataset.id))));
  const want = api.layers.map((l) => l.top.map((t) => t.id));
  check(JSON.stringify(cells) === JSON.stringify(want),
    "a row per layer (the embedding first) with its 5 best tokens, as explain.lens has them", `${cells.length} rows`);
  await follows(0, 'by default (the first)');
  await page.locator('#cands .cand').nth(3).hover();
  await follows(3, 'hovered');
  const answer = api.answer;
  const sum0 = (await readGrid()).sum;
  await page.mouse.move(0, 0);
  await page.locator('#cands .cand').nth(0).focus();
  await page.keyboard.press('ArrowDown');
  await page.keyboard.press('ArrowDown');
  await follows(2, 'focused by the keyboard');
  await page.locator('#cands .cand').nth(0).focus();
  await follows(0, 'focused');
  const s0 = (await readGrid()).sum;
  check(s0.includes(`layer ${answer.first_layer}`) || (answer.first_layer === 0 && s0.includes('embedding')),
    "the summary names the layer where the answer first is top-1", `${s0} (api: ${JSON.stringify(answer)}) ${sum0}`);
  const a11y = await page.evaluate(() => {
    const b = document.getElementById('lens-box');
    return { tab: b.tabIndex, name: document.getElementById(b.getAttribute('aria-labelledby')).textContent,
      caption: !!document.querySelector('#lens caption'), th: document.querySelectorAll('#lens th[scope=row]').length };
  });
  check(a11y.tab === 0 && /Layer by layer/.test(a11y.name) && a11y.caption && a11y.th === api.layers.length,
    'the grid is a table reachable by Tab, with a name, a caption and row headers', JSON.stringify(a11y));
  await shot('lens');
}

// 1 (touch). A press held on a candidate peeks, and the grid follows it.
async function lensTouch() {
  const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking'] });
  const tctx = await browser.newContext({ viewport: { width: 390, height: 844 }, hasTouch: true, isMobile: true,
    deviceScaleFactor: 2, locale: 'ko-KR' });
  const tp = await tctx.newPage();
  tp.setDefaultTimeout(15000);
  try {
    await tp.goto(base + '/');
    await tp.fill('#text', '이 책은 정말');
    await settledAll(tp);
    const id = await tp.evaluate(() => state.cands[4].id);
    const b = await tp.locator('#cands .cand').nth(4).boundingBox();
    const cdp = await tctx.newCDPSession(tp);
    const at = { x: b.x + b.width / 2, y: b.y + b.height / 2 };
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: [at] });
    await tp.waitForTimeout(700);
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
    const followed = await tp.waitForFunction((id) => Number(document.getElementById('lens-box').dataset.for) === id, id,
      { timeout: 5000 }).then(() => true).catch(() => false);
    check(followed, 'a press held on a candidate (touch) makes the grid follow it');
  } finally {
    await browser.close();
  }
}

// 2. where it looks
async function attentionView() {
  await typePrompt('이 책은 정말 재미있다');
  const before = await page.$$eval('#toks .tok', (ts) => ts.map((t) => [t.className, getComputedStyle(t).backgroundColor]));
  const tokens = await page.evaluate(() => state.tokens.slice());
  const k = tokens.length - 2;
  const api = (await post('/v1/next-token', { tokens: tokens.slice(0, k + 1), top_k: 1, explain: { attention: true } })).explain.attention;
  const marks = () => page.$$eval('#toks .tok', (ts) => ts.map((t) => ({ on: t.classList.contains('att'),
    from: t.classList.contains('att-from'), w: Number(t.style.getPropertyValue('--att') || 0) })));
  const agrees = (m, w) => {
    const top = Math.max(...w);
    return m.every((x, p) => (p <= k ? x.on && Math.abs(x.w - w[p] / top) < 1e-9 : !x.on)) && m[k].from;
  };
  await page.locator('#toks .tok').nth(k).hover();
  await page.waitForFunction((k) => document.getElementById('att-sum').dataset.pos === String(k), k);
  const L = api.layers;
  const m1 = await marks();
  check(agrees(m1, api.mean[L - 1]), `hovering token ${k} marks its attention over tokens 0..${k} (the last layer's head mean)`,
    m1.map((x) => x.w.toFixed(2)).join(' '));
  const line = await page.textContent('#att-sum');
  const best = api.mean[L - 1].indexOf(Math.max(...api.mean[L - 1]));
  const bestText = await page.evaluate((b) => state.scores[b].display, best);
  check(line.includes(bestText.replace(/ /g, '__')) && /looks most at/.test(line) && /layer/.test(line),
    'the line names the token it looks at most', line);
  await page.selectOption('#att-layer', '0');
  await page.selectOption('#att-head', { value: '1' });  // head 2
  const m2 = await marks();
  check(agrees(m2, api.weights[0][1]), 'a layer and a head chosen: their weights are marked', m2.map((x) => x.w.toFixed(2)).join(' '));
  await shot('attention');
  const after = await page.$$eval('#toks .tok', (ts) => ts.map((t) => [t.className.replace(/ ?att(-from)?/g, ''), getComputedStyle(t).backgroundColor]));
  check(JSON.stringify(after) === JSON.stringify(before), "the prompt's GLTR colours stay as they were");
  await page.mouse.move(0, 0);
  await page.waitForFunction(() => !document.querySelector('#toks .tok.att'));
  // the keyboard: focus a token, then the arrows
  await page.locator('#toks .tok').nth(0).focus();
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  await page.waitForFunction(() => document.getElementById('att-sum').dataset.pos === '2');
  const m3 = await marks();
  check(m3.filter((x) => x.on).length === 3 && m3[2].from, 'focusing a token by the keyboard shows its attention',
    await page.textContent('#att-sum'));
  const live = await page.getAttribute('#att-sum', 'aria-live');
  const labels = await page.$$eval('#att-layer, #att-head', (s) => s.map((x) => x.labels[0].textContent.trim().split(/\s/)[0]));
  check(live === 'polite' && labels.join() === 'Layer,Head', 'the attention line is a live region; the choices are labelled');
  await page.locator('#text').focus();
}

// 3. no layout shift
async function layoutShift() {
  const cls0 = await page.evaluate(() => { window.__shifted = []; return window.__cls; });
  await typePrompt('오늘 날씨가 좋아서');
  for (let i = 0; i < 3; i++) {
    await page.locator('#toks .tok').nth(i).hover();
    await page.waitForFunction((i) => document.getElementById('att-sum').dataset.pos === String(i), i);
  }
  await page.locator('#cands .cand').nth(5).hover();
  await page.waitForTimeout(300);
  const cls = await page.evaluate(() => window.__cls) - cls0;
  const what = await page.evaluate(() => [...new Set(window.__shifted || [])].join(', '));
  check(cls < 0.001, 'no layout shift while the lens arrives, tokens are hovered and the grid follows',
    `CLS ${cls.toFixed(5)}${what ? ': ' + what : ''}`);
  await page.mouse.move(0, 0);
}

// 4a. a link whose path ends in pending bytes: two of the three bytes of "진" clicked (the next
// candidates replaced by those byte tokens, as the explorer test does), then the link reloaded.
async function pendingLink() {
  await typePrompt('오늘');
  const base = await page.evaluate(() => state.tokens.slice());
  const jin = [0xec, 0xa7, 0x84];
  const sc = await post('/v1/score', { tokens: [2, ...jin.map((b) => b + 3)] });
  const bytes = sc.scores.slice(1).map(({ id, piece, text, display, bytes }, i) => ({ id, piece, text, display, bytes,
    prob: 0.3 - i / 10, logprob: Math.log(0.3 - i / 10) }));
  if (!check(bytes.every((t, i) => t.bytes[0] === jin[i]), 'the byte tokens of "진"', JSON.stringify(bytes))) return;
  await page.route('**/v1/next-token', async (r) => {
    const b = r.request().postDataJSON();
    if (b.explain) return r.continue();
    const tokens = b.tokens || base;
    await r.fulfill({ contentType: 'application/json', body: JSON.stringify({ model: 'm', tokens,
      candidates: bytes, entropy_bits: 3, candidates_mass: 0.6, prompt_tokens: tokens.length, cached_tokens: 0,
      timings: { total_ms: 1 } }) });
  });
  await page.fill('#text', '오늘 ');
  await page.keyboard.press('Backspace');
  await page.waitForFunction(() => state.cands.length === 3 && state.candsFor === state.tokens);
  for (const t of bytes.slice(0, 2)) {
    await page.click(`#cands .cand[data-id="${t.id}"]`);
    await page.waitForFunction((id) => state.tokens.at(-1) === id && state.candsFor === state.tokens, t.id);
  }
  const want = await page.evaluate(() => ({ text: $('text').value, pend: $('pending').textContent, tokens: state.tokens.slice(),
    anchor: state.anchor && state.anchor.tokens.length }));
  await page.unroute('**/v1/next-token');
  const url = page.url();
  await page.goto('about:blank');
  await page.goto(url);
  await page.waitForFunction((n) => state.tokens && state.tokens.length === n && state.candsFor === state.tokens, want.tokens.length);
  const got = await page.evaluate(() => ({ text: $('text').value, pend: $('pending').textContent, hidden: $('pending').hidden,
    tokens: state.tokens.slice(), anchor: state.anchor && state.anchor.tokens.length }));
  check(want.text === '오늘' && /<0xEC><0xA7>/.test(want.pend), 'two bytes of "진" clicked are pending', JSON.stringify(want));
  check(got.text === want.text && !got.text.includes('\uFFFD') && !got.hidden && got.pend === want.pend &&
    JSON.stringify(got.tokens) === JSON.stringify(want.tokens) && got.anchor === want.anchor,
  'the link reloads to the same state: the same text (no U+FFFD), the same pending bytes and ids', JSON.stringify(got));
  const bare = new URL(url);
  bare.searchParams.delete('text');
  await page.goto('about:blank');
  await page.goto(bare.toString());
  await page.waitForFunction((n) => state.tokens && state.tokens.length === n && state.candsFor === state.tokens, want.tokens.length);
  const noText = await page.evaluate(() => ({ text: $('text').value, pend: $('pending').textContent }));
  check(noText.text === want.text && noText.pend === want.pend, 'without its text the link gives the same state, no U+FFFD',
    JSON.stringify(noText));
  await shot('pending');
}

// 4b. token colours: the bucket of the histogram each token is counted in
async function rankBuckets() {
  await typePrompt('여러분 2019년 수고하셨습니다. 올해에는 정말로 바나나 우주선이 노래를 합니다');
  const r = await page.evaluate(() => ({
    toks: [...document.querySelectorAll('#toks .tok')].map((t) => t.className.split(' ').find((c) => /^r/.test(c))),
    ranks: state.scores.map((s) => s.rank),
    hist: Object.fromEntries([...document.querySelectorAll('#hist li')].map((li) => [li.dataset.bucket, Number(li.dataset.count)])),
    legend: [...document.querySelectorAll('.legend .sw')].map((s) => s.className.split(' ')[1]),
    histSw: [...document.querySelectorAll('#hist .sw')].map((s) => s.className.split(' ')[1]),
  }));
  const bucket = (k) => (k <= 10 ? 'r10' : k <= 100 ? 'r100' : k <= 1000 ? 'r1000' : 'rx');
  const ok = r.toks.slice(1).every((c, i) => c === bucket(r.ranks[i + 1]));
  const count = (c) => r.toks.slice(1).filter((x) => x === c).length;
  check(ok && count('r10') === r.hist['10'] && count('r100') === r.hist['100'] && count('r1000') === r.hist['1000'] &&
    count('rx') === r.hist.beyond, "each token's colour is the histogram bucket it counts in (top 10 / 100 / 1000 / beyond)",
  `${r.toks.join(' ')} vs ranks ${r.ranks.join(',')}; hist ${JSON.stringify(r.hist)}`);
  check(r.legend.join() === 'r10,r100,r1000,rx' && r.histSw.join() === r.legend.join(),
    "the legend and the histogram's swatches are the same four colours", `${r.legend} / ${r.histSw}`);
}

// 4c. the model picker looks like the page's other controls (two models: the default twice)
async function picker() {
  if (!process.env.KG_DAEMON) { console.log('# the model picker check needs KG_DAEMON (skipped)'); return; }
  const d = await spawnDaemon(process.env.KG_DAEMON, ['--model', 'a=' + process.env.KG_MODEL_DIR,
    '--model', 'b=' + process.env.KG_MODEL_DIR, '--quiet']);
  const p = await ctx.newPage();
  try {
    check(await ready(d.url, 120000), 'two models: the daemon is ready');
    await p.goto(d.url + '/');
    await p.waitForSelector('#model-pick:not([hidden])');
    const st = await p.evaluate(() => {
      const css = (el) => { const s = getComputedStyle(el); return { radius: s.borderTopLeftRadius, border: s.borderTopColor,
        bg: s.backgroundColor, font: s.fontFamily, color: s.color, appearance: s.appearance }; };
      return { pick: css(document.getElementById('model-pick')), button: css(document.getElementById('undo')),
        cmp: css(document.getElementById('cmp-a')), h: document.getElementById('model-pick').getBoundingClientRect().height };
    });
    const same = (a, b) => a.radius === b.radius && a.border === b.border && a.bg === b.bg && a.font === b.font && a.color === b.color;
    check(same(st.pick, st.button) && same(st.cmp, st.button) && st.pick.appearance === 'none' && st.h >= 24,
      "the model picker has the buttons' font, colours, border and radius (not the browser's own look)", JSON.stringify(st));
    await p.focus('#model-pick');
    const ring = await p.$eval('#model-pick', (e) => getComputedStyle(e).boxShadow);
    check(ring !== 'none', 'the focused picker shows the focus ring', ring);
    await shot('picker', p);
  } finally {
    await p.close();
    await d.stop();
  }
}

try {
  await page.goto(base + '/');
  await lensView();
  await lensTouch();
  await attentionView();
  await layoutShift();
  await rankBuckets();
  await pendingLink();
  await picker();
  check(pageErrors.length === 0, 'no errors in the page', pageErrors.join(' | '));
} catch (e) {
  check(false, 'the browser session ran to the end', String((e && e.stack) || e));
  try { await shot('failure'); } catch { /* */ }
} finally {
  await closeBrowser();
  await stopServer();
}
process.exit(report());
