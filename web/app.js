// app.js — the KoGPT-2 Explorer. Plain JS, no build step, no network beyond kogpt2d.
//
// Type Korean text; after a short pause the top-10 next tokens appear with their
// probabilities. Click one (or press 1–9 / 0, or arrows + Enter) to append it; Undo.
// The state lives in the URL, so a link reproduces it:
//   ?t=<comma-separated token ids>&text=<the prompt as shown>
// The client keeps the token ids: after a click the next request sends {"tokens": [...]}
// so the prompt is never re-tokenized (no drift). Editing the text box tokenizes anew.
// Generation streams Server-Sent Events over fetch + ReadableStream (EventSource can't POST).
//
// Issue 17: the prompt's tokens coloured by the rank the model gave each (POST /v1/score, one
// request, mostly answered from the server's caches); a candidate's own next tokens on hover
// or focus (a next-token request that speculation has already answered); the choices as a
// tree of paths (jump back, take another branch; the URL keeps it: &root=N&paths=a.b~c.d&at=P.K);
// the mass of the ten shown and the entropy, at a view temperature (&vt=T).
//
// Issue 26: the entropy is the server's, exact over the whole vocabulary; a choice applies to
// the list it was made on, once (a double-click or a held key adds nothing more while the next
// answer loads); typing waits for an IME composition to end; the peek follows the list. The
// prompt is a token path: a clicked candidate adds its bytes (from the server), a character cut
// short shows as pending bytes until it completes, </s> shows as such; after an edit the text
// typed after a clicked byte or special token is tokenized on its own, the clicked ids kept.
// GLTR's view from the same /v1/score answer: a token's tooltip lists the model's five most
// likely tokens there, and a histogram counts the prompt's ranks in top 10 / 100 / 1000 /
// beyond. On a phone the candidates come before the token colours (on the first screen), and
// pressing and holding a candidate peeks at it (a tap still chooses).
//
// Issue 36: how the model reached its guess (explain.js: the layer-by-layer grid and the
// attention marks); token colours in the histogram's rank buckets (top 10 / 100 / 1000 /
// beyond); a link ending in pending bytes reloads to the same state.
'use strict';

const $ = (id) => document.getElementById(id);
const TOP_K = 10;      // candidates shown
const PEEK_K = 5;     // a candidate's own next tokens
const ALT_K = 5;      // a prompt token's alternatives in its tooltip (GLTR's five)
const HOLD_MS = 450;  // a touch held this long on a candidate peeks instead of choosing
const DEBOUNCE_MS = 250;

const state = {
  text: '',      // the prompt as shown
  tokens: null,  // its ids (from the server, extended by clicks); null: send the text
  pend: [],      // bytes at the end of the path that do not make a character yet
  anchor: null,  // {text, tokens}: the path up to the last clicked byte or special token
  undo: [],      // earlier {text, tokens, pend, anchor}
  cands: [],     // the current answer's candidates, best first
  candsFor: null, // the tokens they answer (the same array as state.tokens while they hold)
  dist: null,    // the answer's {entropy (bits, whole vocabulary), mass (of the candidates)}
  focus: 0,      // which candidate has the keyboard focus
  viewTemp: 1,   // the next-token request's temperature (the view only)
  scores: null,  // /v1/score's scores of state.tokens
  lens: null,    // explain.lens of state.tokens: {layers, candidates, answer}
  lensFor: null, // the tokens the last lens request was for, once it has answered or failed
  // the choices made from a root prompt: paths of {id, text} (a path shares a prefix with
  // earlier ones up to its branch point); at: the path shown and how far along it
  tree: { root: null, paths: [], at: [0, 0] },
  model: null,   // the served model every request names (null: one model served, none named)
};
let seq = 0;           // bumped on every change; a stale answer is dropped
let inflight = null;   // AbortController of the next-token request
let timer = 0;         // debounce / retry timer
let gen = null;        // {ctl, base: {text, tokens}, ids, text} of the generation panel
let composing = false; // an IME composition is under way: its half-typed syllables wait

// ---- talking to the server -------------------------------------------------------------

class ApiError extends Error {
  constructor(message, status = 0, retryAfter = 0) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

// The prompt part of a request: the kept ids when there are any, else the text.
const promptBody = (p) => (p.tokens ? { tokens: p.tokens } : { text: p.text });

// A token's bytes (the server's; else its text's) and whether typing its text would not give
// it back: a byte of a character, a special token (no bytes), anything after pending bytes.
const bytesOf = (c) => c.bytes ?? [...new TextEncoder().encode(c.text ?? '')];
const isRaw = (c) => !bytesOf(c).length || (c.display ?? c.text) !== c.text;

// text and its pending bytes with bytes added: the complete characters join the text, a last
// one cut short stays pending.
function addBytes(text, pend, bytes) {
  const all = pend.concat(bytes);
  let cut = all.length;
  for (let k = 1; k <= Math.min(3, all.length); k++) {
    const b = all[all.length - k];
    if ((b & 0xc0) === 0x80) continue;  // a continuation byte: its lead is further back
    if ((b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1) > k) cut = all.length - k;
    break;
  }
  return { text: text + new TextDecoder().decode(new Uint8Array(all.slice(0, cut))), pend: all.slice(cut) };
}

// Steps (candidates or tree steps) after a prompt: its text, pending bytes and anchor.
function addSteps(p, steps) {
  let t = { text: p.text, pend: p.pend || [] }, anchor = p.anchor || null;
  const tokens = p.tokens.slice();
  for (const c of steps) {
    const raw = isRaw(c) || t.pend.length;
    t = addBytes(t.text, t.pend, bytesOf(c));
    tokens.push(c.id);
    if (raw || t.pend.length) anchor = { text: t.text, tokens: tokens.slice() };
  }
  return { text: t.text, tokens, pend: t.pend, anchor };
}

// A daemon started with --api-key wants "Authorization: Bearer <key>"; asked once per tab.
let apiKey = '';
try { apiKey = sessionStorage.getItem('kogpt2-api-key') || ''; } catch { /* storage off */ }

// fetch() that turns every failure into an ApiError with a message fit for people.
async function api(path, body, signal, retried = false) {
  const init = { signal, headers: { Accept: 'application/json' } };
  const sentKey = apiKey;
  if (sentKey) init.headers.Authorization = 'Bearer ' + sentKey;
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['Content-Type'] = 'application/json';
    // the picked model, unless the request names its own (the compare view's)
    init.body = JSON.stringify(state.model ? { model: state.model, ...body } : body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('Cannot reach the server. Is kogpt2d running? Check your connection and try again.');
  }
  if (res.ok) return res;
  if (res.status === 401 && !retried) {
    if (apiKey !== sentKey) return api(path, body, signal, true);  // entered meanwhile
    const key = window.prompt('This kogpt2d needs an API key:', '');
    if (key && key.trim()) {
      apiKey = key.trim();
      try { sessionStorage.setItem('kogpt2-api-key', apiKey); } catch { /* storage off */ }
      return api(path, body, signal, true);
    }
  }
  let detail = '';
  try {
    const j = await res.json();
    detail = (j && j.error && j.error.message) || '';
  } catch { /* not JSON: keep the generic message */ }
  // the server's "n_prompt_tokens (841) exceeds n_ctx (512)", in words
  const long = /n_prompt_tokens \(?((?:more than )?\d+)\)? exceeds n_ctx \(?(\d+)/.exec(detail);
  if (long) {
    detail = `The prompt is too long for this model: it is ${long[1]} tokens and the model reads at most ${long[2]}. ` +
      'Shorten it or Undo.';
  }
  const ra = Math.max(1, Math.ceil(parseFloat(res.headers.get('Retry-After')) || 1));
  const msg = {
    429: `The server is busy right now; please wait ${ra} s.`,
    503: 'The model is not ready yet (loading or restarting). Please try again shortly.',
    413: 'That prompt is too long for the server.',
    401: 'The server needs an API key (reload the page to enter it).',
  }[res.status];
  throw new ApiError([msg, detail].filter(Boolean).join(' ') || `Request failed (HTTP ${res.status}).`,
                     res.status, res.status === 429 ? ra : 0);
}

// Yields the JSON payload of each Server-Sent Event of a response body.
async function* sseEvents(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let m;
    while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block.split(/\r\n|\n|\r/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data && data !== '[DONE]') yield JSON.parse(data);
    }
  }
}

function showError(msg) {
  const el = $('error');
  el.textContent = msg;
  el.hidden = !msg;
}

const ms = (x) => (x < 10 ? x.toFixed(1) : Math.round(x)) + ' ms';

// ---- next-token ------------------------------------------------------------------------

function schedule(delay) {
  clearTimeout(timer);
  timer = setTimeout(fetchNext, delay);
}

async function fetchNext() {
  clearTimeout(timer);
  if (inflight) inflight.abort();
  const my = ++seq;
  syncUrl();
  if (!state.text.trim() && !(state.tokens && state.tokens.length)) {
    inflight = null;
    state.cands = [];
    forgetAnswer();
    render();
    showError('');
    $('cands').setAttribute('aria-busy', 'false');
    return;
  }
  const ctl = (inflight = new AbortController());
  $('cands').setAttribute('aria-busy', 'true');
  const t0 = performance.now();
  try {
    const a = state.anchor;
    if (!state.tokens && a) {  // typed after clicked byte or special tokens: those stay ids
      const rest = state.text.slice(a.text.length);
      const ids = rest ? (await (await api('/v1/tokenize', { text: rest }, ctl.signal)).json()).tokens : [];
      if (my !== seq) return;
      state.tokens = a.tokens.concat(ids);
    }
    // speculate: the server precomputes the answers for these candidates, so a click is instant
    const body = Object.assign(promptBody(state), { top_k: TOP_K, temperature: state.viewTemp, speculate: true });
    const res = await api('/v1/next-token', body, ctl.signal);
    const j = await res.json();
    if (my !== seq) return;
    const rtt = performance.now() - t0;
    if (Array.isArray(j.tokens)) state.tokens = j.tokens;
    state.cands = (j.candidates || []).slice().sort((a, b) => b.prob - a.prob).slice(0, TOP_K);
    state.candsFor = state.tokens;
    state.lens = null;  // the grid of the previous prompt; fetchLens brings this one's
    state.dist = { entropy: j.entropy_bits, mass: j.candidates_mass };
    if (state.focus >= state.cands.length) state.focus = 0;
    treeSync();
    showError('');
    render();
    renderDist();
    renderTree();
    syncUrl();
    fetchScores(my);
    fetchLens(my);
    const t = j.timings || {};
    const n = j.prompt_tokens ?? (state.tokens || []).length;
    $('stats').textContent = [
      `${n} token${n === 1 ? '' : 's'}`,
      j.cached_tokens != null ? `${j.cached_tokens} cached` : '',
      t.total_ms != null ? `server ${ms(t.total_ms)}` : '',
      `round-trip ${ms(rtt)}`,
    ].filter(Boolean).join(' · ');
    $('stats').title = 'cached: prompt tokens whose KV came from the server\'s prefix cache';
  } catch (e) {
    if (e.name === 'AbortError' || my !== seq) return;
    showError(e.status === 429 ? e.message + ' Retrying by itself…' : e.message);
    $('cands').classList.add('stale');
    forgetAnswer();  // the colours and figures described the previous prompt
    if (e.status === 429) schedule(e.retryAfter * 1000);
    if (!e.status) serverDown();
  } finally {
    if (my === seq) $('cands').setAttribute('aria-busy', 'false');
  }
}

// The figures of an answer that no longer describes the prompt: token colours, stats, entropy.
function forgetAnswer() {
  state.scores = null;
  state.lens = null;
  renderLens();
  state.dist = null;
  renderToks();
  renderDist();
  $('stats').textContent = '';
}

// A piece with its space marker ▁ shown as a visible "__".
// A byte of a character and a special token show as their piece (<0xEC>, </s>), marked.
function pieceNode(c) {
  const piece = c.display != null ? c.display.replace(/ /g, '\u2581')
    : c.piece ?? String(c.text ?? '').replace(/ /g, '\u2581');
  const span = document.createElement('span');
  span.className = 'piece' + (c.bytes && !c.bytes.length ? ' special' : isRaw(c) ? ' raw' : '');
  piece.split('\u2581').forEach((part, i) => {
    if (i) span.appendChild(Object.assign(document.createElement('span'), { className: 'sp', textContent: '__' }));
    if (part) span.appendChild(document.createTextNode(shown(part)));
  });
  if (!piece) span.textContent = '∅';
  return span;
}

function pct(p) {
  const x = p * 100;
  return x < 0.005 ? '<0.01%' : x.toFixed(x < 0.995 ? 2 : 1) + '%';
}

function render() {
  const list = $('cands');
  const hadFocus = list.contains(document.activeElement);
  list.replaceChildren();
  list.classList.remove('stale');
  state.cands.forEach((c, i) => {
    const key = String((i + 1) % 10);
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'cand';
    b.tabIndex = i === state.focus ? 0 : -1;
    b.dataset.i = i;
    b.dataset.id = c.id;
    if (i < 10) b.setAttribute('aria-keyshortcuts', key);
    b.setAttribute('aria-label', `${key}: ${(c.display ?? c.piece ?? c.text ?? '').replace(/\u2581| /g, ' (space) ')}, ${pct(c.prob)}`);
    b.title = `id ${c.id} · logprob ${Number(c.logprob).toFixed(3)}`;
    b.setAttribute('aria-describedby', 'peek');
    const meter = document.createElement('span');
    meter.className = 'meter';
    const fill = document.createElement('span');
    fill.className = 'fill';
    fill.style.width = Math.max(0, Math.min(100, c.prob * 100)) + '%';
    meter.appendChild(fill);
    b.append(
      Object.assign(document.createElement('span'), { className: 'key', textContent: i < 10 ? key : '' }),
      pieceNode(c), meter,
      Object.assign(document.createElement('span'), { className: 'pct', textContent: pct(c.prob) }));
    const li = document.createElement('li');
    li.appendChild(b);
    list.appendChild(li);
  });
  $('cands-empty').hidden = state.cands.length > 0;
  const top = state.cands[0];
  $('cands-status').textContent = top
    ? `${state.cands.length} candidates. Most likely: ${top.display ?? top.text ?? top.piece}, ${pct(top.prob)}.` : '';
  if (hadFocus && state.cands.length) list.querySelectorAll('.cand')[state.focus].focus();
  refreshPeek();
  renderLens();
}

// The path as it is now, for Undo.
const snapshot = () => ({ text: state.text, tokens: state.tokens, pend: state.pend, anchor: state.anchor });

// Undo is usable whenever there is something to undo, the server answering or not.
function setPrompt(text, tokens, pend = [], anchor = null) {
  state.text = text;
  state.tokens = tokens;
  state.pend = pend;
  state.anchor = anchor;
  $('text').value = text;
  renderPending();
  $('undo').disabled = state.undo.length === 0;
  clearPeek();  // until the new list is there: it may not hold the candidate peeked at
  fetchNext();
}

// Appends candidate i of the list shown, when that list answers the prompt as it is now: a
// second click of a double-click, a key repeat or a choice after Undo while the next answer
// loads finds the prompt changed and adds nothing. The keyboard focus goes to the first
// candidate, so that Enter next takes the new list's best, not the same slot again.
function choose(i) {
  const c = state.cands[i];
  if (!c || !state.tokens || state.candsFor !== state.tokens) return;
  state.undo.push(snapshot());
  treeChoose({ id: c.id, text: c.text, display: c.display, bytes: bytesOf(c) });
  const p = addSteps(state, [c]);
  setPrompt(p.text, p.tokens, p.pend, p.anchor);
  state.focus = 0;
  const btns = $('cands').querySelectorAll('.cand');
  btns.forEach((x, k) => { x.tabIndex = k === 0 ? 0 : -1; });
  if ($('cands').contains(document.activeElement) && btns.length) btns[0].focus();
}

function undo() {
  const prev = state.undo.pop();
  if (prev) setPrompt(prev.text, prev.tokens, prev.pend, prev.anchor);
}

// The bytes of a character not complete yet, after the text box.
function renderPending() {
  const el = $('pending');
  el.hidden = !state.pend.length;
  el.textContent = state.pend.length ? 'pending bytes (a character not complete yet): ' +
    state.pend.map((b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`).join('') : '';
}

// ---- how surprising each prompt token was (/v1/score) ----------------------------------

// GLTR's buckets, the histogram's own: the colour of a token is the bar it counts in
const HIST_BUCKETS = [['10', 10], ['100', 100], ['1000', 1000], ['beyond', Infinity]];
const RANK_CLASS = (r) => 'r' + (r == null ? 'x' : HIST_BUCKETS.find(([, upto]) => r <= upto)[0].replace('beyond', 'x'));
const RANK_WORD = (r) => `rank ${r}`;  // exact over the whole vocabulary
const shown = (t) => String(t ?? '').replace(/\n/g, '↵').replace(/\t/g, '⇥');
const visible = (t) => shown(t).replace(/ /g, '__');  // a token in a sentence, spaces as the pieces show them

async function fetchScores(my) {
  if (!state.tokens || !state.tokens.length) return;
  const tokens = state.tokens;
  try {
    const j = await (await api('/v1/score', { tokens, top_alternatives: ALT_K })).json();
    if (my !== seq || state.tokens !== tokens) return;
    state.scores = j.scores || null;
    renderToks();
  } catch (e) {
    if (e.name !== 'AbortError' && my === seq) state.scores = null;
  }
}

// One sentence for a token: for aria-label (with its alternatives) and the tooltip (which
// lists them below it).
function scoreText(s, i, withAlts = true) {
  if (i === 0 || s.top == null) return `${shown(s.text)}: the first token (nothing predicts it)`;
  const alts = (s.alternatives || []).map((a) => `${shown(a.text)} ${pct(a.prob)}`).join(', ');
  return `${shown(s.text)}: ${RANK_WORD(s.rank)}, ${pct(s.prob)}; the model's top choice: ${shown(s.top.text)} ${pct(s.top.prob)}` +
    (alts && withAlts ? `; its ${s.alternatives.length} most likely: ${alts}` : '');
}

// GLTR's histogram: how many of the scored tokens (all but the first) fall in each rank bucket.
function renderHist() {
  const scored = (state.scores || []).slice(1).filter((s) => s.rank != null);
  let from = 0;
  for (const [bucket, upto] of HIST_BUCKETS) {
    const n = scored.filter((s) => s.rank > from && s.rank <= upto).length;
    from = upto;
    const li = $('hist').querySelector(`[data-bucket="${bucket}"]`);
    li.dataset.count = n;
    li.querySelector('.fill').style.width = (scored.length ? (100 * n) / scored.length : 0) + '%';
    li.querySelector('.hist-n').textContent = scored.length ? `${n} (${Math.round((100 * n) / scored.length)}%)` : '';
    li.setAttribute('aria-label', `${li.querySelector('.hist-label').textContent}: ${n} of ${scored.length} tokens`);
  }
}

function renderToks() {
  const box = $('toks');
  const had = box.contains(document.activeElement) ? Number(document.activeElement.dataset.i) : -1;
  box.replaceChildren();
  (state.scores || []).forEach((s, i) => {
    const el = document.createElement('span');
    el.setAttribute('role', 'listitem');
    el.className = 'tok ' + (i === 0 ? 'r0' : RANK_CLASS(s.rank));
    el.dataset.i = i;
    el.tabIndex = i === (had >= 0 ? had : 0) ? 0 : -1;
    el.setAttribute('aria-label', scoreText(s, i));
    el.appendChild(pieceNode(s));
    box.appendChild(el);
  });
  const back = had >= 0 && box.children[Math.min(had, box.children.length - 1)];
  if (back) back.focus();
  renderHist();
  renderAttention();
}

// The tooltip of prompt token i: its sentence, then the model's most likely tokens there.
function showTip(el, i) {
  const tip = $('tip'), s = state.scores[i];
  tip.replaceChildren(document.createTextNode(scoreText(s, i, false)));
  if (i > 0 && s.alternatives && s.alternatives.length) {
    const ol = Object.assign(document.createElement('ol'), { className: 'tip-alts' });
    for (const a of s.alternatives) {
      const li = Object.assign(document.createElement('li'), { className: a.id === s.id ? 'is-token' : '' });
      li.append(pieceNode(a), Object.assign(document.createElement('span'), { className: 'pct', textContent: pct(a.prob) }));
      ol.appendChild(li);
    }
    tip.appendChild(ol);
  }
  tip.hidden = false;
  const r = el.getBoundingClientRect();
  const w = Math.min(320, window.innerWidth - 16);
  tip.style.maxWidth = w + 'px';
  // placed by a transform: moving from token to token is then no layout shift
  tip.style.transform = `translate(${Math.max(8, Math.min(r.left, window.innerWidth - w - 8))}px, ${r.bottom + 6}px)`;
  el.setAttribute('aria-describedby', 'tip');
}
function hideTip(el) {
  $('tip').hidden = true;
  if (el) el.removeAttribute('aria-describedby');
}

// ---- peeking one step further -----------------------------------------------------------

const peekCache = new Map();  // "ids" -> {cands, cached}
let peekFor = '';
let peekAt = -1;  // the candidate under the pointer or the keyboard focus; -1: none

function clearPeek() {
  peekFor = '';
  const box = $('peek');
  box.replaceChildren(Object.assign(document.createElement('span'), { className: 'muted',
    textContent: 'Hover, focus or press and hold a candidate to see what would follow it.' }));
  delete box.dataset.for;
  delete box.dataset.cached;
}

// A new list (after a choice, Undo, a view temperature): the peek shows its candidate or none.
function refreshPeek() {
  if (peekAt >= 0 && peekAt < state.cands.length) peek(peekAt);
  else clearPeek();
}

async function peek(i) {
  const c = state.cands[i];
  if (!c || !state.tokens || state.candsFor !== state.tokens) return;
  renderLens();  // the grid follows the candidate peeked at
  const tokens = state.tokens.concat(c.id);
  const key = tokens.join(',') + '@' + state.viewTemp;
  peekFor = key;
  let hit = peekCache.get(key);
  if (!hit) {
    try {
      const j = await (await api('/v1/next-token', { tokens, top_k: PEEK_K, temperature: state.viewTemp })).json();
      hit = { cands: j.candidates || [], cached: j.cached_tokens === j.prompt_tokens, ms: (j.timings || {}).total_ms };
      peekCache.set(key, hit);
      if (peekCache.size > 200) peekCache.delete(peekCache.keys().next().value);
    } catch (e) {
      return;
    }
  }
  if (peekFor !== key) return;
  const box = $('peek');
  box.replaceChildren(Object.assign(document.createElement('span'), { className: 'muted', textContent: 'after ' }),
    pieceNode(c), document.createTextNode(': '));
  hit.cands.forEach((d) => {  // chips, not " · ": a separator would read as a candidate
    const s = document.createElement('span');
    s.className = 'peek-c';
    s.append(pieceNode(d), Object.assign(document.createElement('span'), { className: 'pct', textContent: pct(d.prob) }));
    box.appendChild(s);
  });
  box.appendChild(Object.assign(document.createElement('span'), {
    className: 'muted peek-src', textContent: hit.cached ? 'ready in advance' : 'computed now' }));
  box.dataset.cached = hit.cached ? '1' : '0';
  box.dataset.for = key;
}

// ---- the distribution: mass of the ten, entropy -------------------------------------------

function clampTemp(t) { return Math.max(0.1, Math.min(3, Math.round(t * 100) / 100)); }

// The server's figures of the whole distribution at the view temperature.
function renderDist() {
  const el = $('dist-stats'), d = state.dist;
  if (!d || !state.cands.length || typeof d.entropy !== 'number') {
    el.innerHTML = '&nbsp;';
    delete el.dataset.mass10;
    delete el.dataset.entropy;
    return;
  }
  el.textContent = `top ${state.cands.length} cover ${pct(d.mass)} · entropy ${d.entropy.toFixed(2)} bits`;
  el.title = `Entropy of the next-token distribution at view temperature ${state.viewTemp}, over the whole vocabulary.`;
  el.dataset.mass10 = d.mass;
  el.dataset.entropy = d.entropy;
}

// ---- the tree of choices --------------------------------------------------------------------

// Where state.tokens sits in the tree; a prompt outside it becomes a new root.
function treeSync() {
  const tr = state.tree, tk = state.tokens || [];
  if (tr.root && tr.root.tokens.length <= tk.length && tr.root.tokens.every((x, i) => x === tk[i])) {
    const rest = tk.slice(tr.root.tokens.length);
    if (!rest.length) { tr.at = [tr.at[0], 0]; return; }
    for (let p = 0; p < tr.paths.length; p++) {
      const path = tr.paths[p];
      if (rest.length <= path.length && rest.every((x, i) => path[i].id === x)) { tr.at = [p, rest.length]; return; }
    }
  }
  state.tree = { root: { text: state.text, tokens: tk.slice() }, paths: [], at: [0, 0] };
}

// A choice made at the current point: walk on, extend the path, or branch off.
function treeChoose(c) {
  const tr = state.tree;
  if (!tr.root) return;
  const [p, k] = tr.at;
  const path = tr.paths[p];
  if (!path) { tr.paths.push([c]); tr.at = [tr.paths.length - 1, 1]; return; }
  if (path[k] && path[k].id === c.id) { tr.at = [p, k + 1]; return; }
  if (k === path.length) { path.push(c); tr.at = [p, k + 1]; return; }
  for (let q = 0; q < tr.paths.length; q++) {  // an earlier branch already took it
    const o = tr.paths[q];
    if (o.length > k && o[k].id === c.id && path.slice(0, k).every((x, i) => o[i].id === x.id)) { tr.at = [q, k + 1]; return; }
  }
  tr.paths.push(path.slice(0, k).concat(c));
  tr.at = [tr.paths.length - 1, k + 1];
}

function treeJump(p, k) {
  const tr = state.tree, path = tr.paths[p];
  if (!tr.root || !path) return;
  state.undo.push(snapshot());
  tr.at = [p, k];
  const q = addSteps(tr.root, path.slice(0, k));
  setPrompt(q.text, q.tokens, q.pend, q.anchor);
}

// The first step where path p leaves the earlier paths (its branch point).
function branchAt(p) {
  const paths = state.tree.paths;
  let best = 0;
  for (let q = 0; q < p; q++) {
    let k = 0;
    while (k < paths[p].length && k < paths[q].length && paths[p][k].id === paths[q][k].id) k++;
    best = Math.max(best, k);
  }
  return best;
}

function renderTree() {
  const ol = $('tree'), tr = state.tree;
  const focused = ol.contains(document.activeElement) ? document.activeElement.dataset.key : '';
  ol.replaceChildren();
  if (!tr.root || !tr.paths.length) {
    ol.appendChild(Object.assign(document.createElement('li'), { className: 'muted', textContent: 'No choices yet: click a candidate.' }));
    return;
  }
  tr.paths.forEach((path, p) => {
    const li = document.createElement('li');
    li.className = 'branch' + (p === tr.at[0] ? ' current' : '');
    const from = branchAt(p);
    const label = p === 0 ? 'Path 1' : `Branch ${p + 1}, from step ${from}`;
    li.setAttribute('aria-label', label);
    const head = Object.assign(document.createElement('button'), { type: 'button', className: 'step root',
      textContent: from ? `↳ ${from}` : p ? '↳ start' : '●' });  // a branch from the start is not Path 1
    head.dataset.key = `${p}.${from}`;
    head.dataset.p = p; head.dataset.k = from;
    head.setAttribute('aria-label', from ? `${label}: back to step ${from}` : 'Back to the typed prompt');
    if (p === tr.at[0] && tr.at[1] === from) head.setAttribute('aria-current', 'step');
    li.appendChild(head);
    for (let k = from; k < path.length; k++) {
      const b = document.createElement('button');
      b.type = 'button';
      b.className = 'step';
      b.dataset.p = p; b.dataset.k = k + 1; b.dataset.key = `${p}.${k + 1}`;
      b.appendChild(pieceNode(path[k]));
      b.setAttribute('aria-label', `${label}, step ${k + 1}: ${shown(path[k].text)}`);
      if (p === tr.at[0] && tr.at[1] === k + 1) b.setAttribute('aria-current', 'step');
      if (p === tr.at[0] && k + 1 > tr.at[1]) b.classList.add('ahead');
      li.appendChild(b);
    }
    ol.appendChild(li);
  });
  if (focused) { const b = ol.querySelector(`[data-key="${focused}"]`); if (b) b.focus(); }
}

// &root=N&paths=a.b~a.c&at=P.K: the texts of the steps come from /v1/score of each path.
async function treeFromUrl(p, text, tokens) {
  state.tree = { root: null, paths: [], at: [0, 0] };
  const n = Number(p.get('root')), raw = p.get('paths');
  if (!tokens || !raw || !Number.isInteger(n) || n < 1 || n > tokens.length) return;
  const ids = raw.split('~').map((s) => s.split('.').filter(Boolean).map(Number));
  if (!ids.every((a) => a.length && a.every((x) => Number.isInteger(x) && x >= 0))) return;
  const rootTokens = tokens.slice(0, n);
  try {
    const paths = await Promise.all(ids.map(async (a) => {
      const j = await (await api('/v1/score', { tokens: rootTokens.concat(a) })).json();
      return j.scores.slice(n).map((s) => ({ id: s.id, text: s.text, display: s.display, bytes: s.bytes }));
    }));
    const [ap, ak] = (p.get('at') || '0.0').split('.').map(Number);
    const cur = paths[ap] ? paths[ap].slice(0, ak) : [];
    const curText = addSteps({ text: '', tokens: [] }, cur).text;
    const rootText = text.endsWith(curText) ? text.slice(0, text.length - curText.length) : text;
    state.tree = { root: { text: rootText, tokens: rootTokens }, paths, at: [ap || 0, ak || 0] };
  } catch (e) {
    showError(e.message);
  }
}

// ---- the URL ---------------------------------------------------------------------------

function syncUrl() {
  const q = [];
  if (state.tokens && state.tokens.length) q.push('t=' + state.tokens.join(','));
  if (state.text) q.push('text=' + encodeURIComponent(state.text));
  const tr = state.tree;
  if (tr.root && tr.paths.length) {
    q.push('root=' + tr.root.tokens.length, 'paths=' + tr.paths.map((p) => p.map((c) => c.id).join('.')).join('~'),
      'at=' + tr.at.join('.'));
  }
  if (state.viewTemp !== 1) q.push('vt=' + state.viewTemp);
  const url = location.pathname + (q.length ? '?' + q.join('&') : '');
  if (url !== location.pathname + location.search) history.replaceState(null, '', url);
}

// The path a link's ids make, from their own bytes (/v1/score's): the bytes of a last character
// not complete yet and the anchor, as clicking those tokens made them, and the text (the link's,
// or else the complete part decoded). null when the server cannot say or the two disagree.
async function pathOfTokens(tokens, text) {
  try {
    const j = await (await api('/v1/score', { tokens })).json();
    const p = addSteps({ text: '', tokens: [], pend: [] },
      j.scores.map(({ id, text: t, display, bytes }) => ({ id, text: t, display, bytes })));
    const done = tokens.slice(0, tokens.length - p.pend.length);  // a pending byte is a byte token
    const whole = text ?? (done.length ? (await (await api('/v1/detokenize', { tokens: done })).json()).text : '');
    const cut = p.text.length - whole.length;  // the decoder drops the space a text starts with
    if (cut < 0 || p.text.slice(cut) !== whole) return null;
    return { text: whole, pend: p.pend, anchor: p.anchor && { text: p.anchor.text.slice(cut), tokens: p.anchor.tokens } };
  } catch (e) {
    showError(e.message);
    return null;
  }
}

async function loadFromUrl() {
  const p = new URLSearchParams(location.search);
  const ids = (p.get('t') || '').split(',').filter((s) => s.trim() !== '').map(Number);
  const tokens = ids.length && ids.every((n) => Number.isInteger(n) && n >= 0) ? ids : null;
  let text = p.get('text') || '', pend = [], anchor = null;
  // ids ending inside a character (clicked bytes) or a link without its text: the path from the
  // ids' bytes, so the box never shows U+FFFD and the pending bytes are pending again
  const path = tokens && (await pathOfTokens(tokens, p.has('text') ? text : null));
  if (path && (path.pend.length || !p.has('text'))) ({ text, pend, anchor } = path);
  state.viewTemp = clampTemp(Number(p.get('vt')) || 1);
  $('view-temp').value = state.viewTemp;
  $('view-temp-out').textContent = state.viewTemp.toFixed(2);
  await treeFromUrl(p, text, tokens);
  setPrompt(text, tokens, pend, anchor);
}

// ---- generation ------------------------------------------------------------------------

function num(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

async function generate(ev) {
  ev.preventDefault();
  if (gen && gen.ctl) return;
  const base = { text: state.text, tokens: state.tokens };
  const body = Object.assign(promptBody(base), {
    stream: true, max_tokens: num('max_tokens'), temperature: num('temperature'),
    top_k: num('top_k'), top_p: num('top_p'), seed: num('seed'),
    repetition_penalty: num('repetition_penalty'), presence_penalty: num('presence_penalty'),
    frequency_penalty: num('frequency_penalty'), ignore_eos: $('ignore_eos').checked,
  });
  gen = { ctl: new AbortController(), base, ids: [], text: '', exact: true };
  const g = gen;
  $('generate').disabled = true;
  $('stop').disabled = false;
  $('adopt').disabled = true;
  $('gen-prompt').textContent = base.text;
  $('gen-text').textContent = '';
  $('gen-out').classList.add('running');
  $('gen-stats').textContent = 'Generating…';
  const t0 = performance.now();
  let done = null, failed = false;
  try {
    const res = await api('/v1/generate', body, g.ctl.signal);
    const add = (t) => {
      g.ids.push(t.id);
      g.text += t.text ?? '';
      $('gen-text').textContent = g.text;
    };
    if (!(res.headers.get('Content-Type') || '').includes('text/event-stream')) {
      done = await res.json();  // a server that answered without streaming
    } else {
      for await (const e of sseEvents(res.body)) {
        if (e.error) throw new ApiError(e.error.message || 'The generation failed.');
        if (e.done) done = e;
        else if (e.token) add(e.token);   // {"token": {id, text, logprob}}
        else if (e.id !== undefined) add(e);  // kogpt2d: the token object itself
      }
    }
    if (done && typeof done.text === 'string' && done.text !== g.text) {
      // the final text wins (e.g. cut before a stop string); then ids and text may differ
      g.exact = !g.ids.length;
      if (!g.ids.length) g.ids = done.tokens || [];
      g.text = done.text;
      $('gen-text').textContent = g.text;
    }
    showError('');
  } catch (e) {
    failed = e.name !== 'AbortError';
    if (failed) showError(e.message);
  }
  const secs = (performance.now() - t0) / 1000;
  const t = (done && done.timings) || {};
  $('gen-stats').textContent = [
    `${g.ids.length} token${g.ids.length === 1 ? '' : 's'}`,
    done ? `finished: ${done.finish_reason || 'done'}` : g.ctl.signal.aborted ? 'stopped' : failed ? 'failed' : 'interrupted',
    g.ids.length && secs > 0 ? `${(g.ids.length / secs).toFixed(1)} tok/s` : '',
    t.total_ms != null ? `server ${ms(t.total_ms)}` : '',
  ].filter(Boolean).join(' · ');
  g.ctl = null;
  $('gen-out').classList.remove('running');
  $('generate').disabled = false;
  $('stop').disabled = true;
  $('adopt').disabled = !g.text;
}

function adopt() {
  if (!gen || gen.ctl || !gen.text) return;
  state.undo.push(snapshot());
  const b = gen.base;
  const exact = b.tokens && gen.exact && gen.ids.length;  // else tokenize the text anew
  const tokens = exact ? b.tokens.concat(gen.ids) : null;
  setPrompt(b.text + gen.text, tokens, [], exact ? { text: b.text + gen.text, tokens } : null);
  $('adopt').disabled = true;
}

// ---- wiring ----------------------------------------------------------------------------

// The served models into the picker and the compare view's selects; both stay hidden while
// the daemon serves one model (the requests then name none, as before).
function listModels(data) {
  const ids = data.map((m) => m.id);
  const several = ids.length > 1;
  if (several && !ids.includes(state.model)) state.model = ids[0];
  const fill = (sel, pick) => {
    if (sel.options.length === ids.length && [...sel.options].every((o, i) => o.value === ids[i])) return;
    sel.replaceChildren(...ids.map((id) => new Option(id, id)));
    sel.value = pick;
  };
  fill($('model-pick'), state.model);
  fill($('cmp-a'), ids[0]);
  fill($('cmp-b'), ids[1] ?? ids[0]);
  $('model-pick').hidden = !several;
  $('model-name').hidden = several;
  $('compare').hidden = !several;
}

// Another model: ids mean other tokens there, so the prompt goes back to its text and the
// candidates, scores, peeks and paths (all ids) are asked anew.
function switchModel(id) {
  state.model = id;
  peekCache.clear();
  state.undo = [];
  state.tree = { root: null, paths: [], at: [0, 0] };
  state.scores = null;
  state.lens = null;
  attCache.clear();
  renderTree();
  renderToks();
  setPrompt(state.text, null);
}

// The compare view: for the prompt's text, each model's next-token candidates side by side,
// and the prompt tokens where the two models' logprobs differ most marked (where both read the
// text as the same tokens; otherwise where each model was most surprised).
const CMP_MARK = 3;  // tokens marked
async function compare() {
  const a = $('cmp-a').value, b = $('cmp-b').value, text = state.text;
  if (!text.trim()) { $('cmp-stats').textContent = 'Type a prompt first.'; return; }
  $('cmp-stats').textContent = 'comparing…';
  try {
    const ask = (path, model, body) => api(path, { ...body, model }).then((r) => r.json());
    const [na, nb, sa, sb] = await Promise.all([
      ask('/v1/next-token', a, { text, top_k: TOP_K }), ask('/v1/next-token', b, { text, top_k: TOP_K }),
      ask('/v1/score', a, { text }), ask('/v1/score', b, { text })]);
    [[a, na, 'cmp-a'], [b, nb, 'cmp-b']].forEach(([id, j, el]) => {
      $(el + '-h').textContent = id;
      $(el + '-cands').replaceChildren(...(j.candidates || []).map((c) => {
        const li = document.createElement('li');
        li.append(pieceNode(c), Object.assign(document.createElement('span'), { className: 'prob', textContent: pct(c.prob) }));
        return li;
      }));
    });
    const same = sa.tokens.length === sb.tokens.length && sa.tokens.every((t, i) => t === sb.tokens[i]);
    const gap = sa.scores.map((s, i) => (i === 0 ? -1 : same ? Math.abs(s.logprob - sb.scores[i].logprob) : -s.logprob));
    const marked = new Set(gap.map((g, i) => [g, i]).filter(([g]) => g > 0)
      .sort((x, y) => y[0] - x[0]).slice(0, CMP_MARK).map(([, i]) => i));
    $('cmp-toks').replaceChildren(...sa.scores.map((s, i) => {
      const el = document.createElement('span');
      el.setAttribute('role', 'listitem');
      el.className = 'tok' + (marked.has(i) ? ' disagree' : '');
      el.title = i === 0 ? 'the first token' : same
        ? `${a}: ${s.logprob.toFixed(2)}, ${b}: ${sb.scores[i].logprob.toFixed(2)} (logprob)`
        : `${a}: ${s.logprob.toFixed(2)} (logprob)`;
      el.appendChild(pieceNode(s));
      return el;
    }));
    $('cmp-stats').textContent = same ? `marked: the ${marked.size} tokens where the logprobs differ most`
      : `the models tokenize differently: marked where ${a} was most surprised`;
  } catch (e) {
    $('cmp-stats').textContent = '';
    if (e.name !== 'AbortError') showError(e.message);
  }
}

async function checkModel() {
  const el = $('model');
  try {
    const j = await (await api('/v1/models')).json();
    const m = (j.data && j.data[0]) || {};
    $('model-name').textContent = m.id || 'model loaded';
    listModels(j.data || []);
    if (m.n_ctx > 0) $('max_tokens').max = m.n_ctx;  // the daemon refuses more
    el.className = 'model ok';
    if ($('cands').classList.contains('stale') && !composing) schedule(0);  // back after an outage
  } catch (e) {
    $('model-name').textContent = e.status === 503 ? 'model loading…' : 'server unreachable';
    el.className = 'model bad';
    setTimeout(checkModel, 3000);
  }
}

// A request found no server: the status says so until checkModel reaches it again.
function serverDown() {
  if ($('model').classList.contains('bad')) return;  // already polling
  $('model-name').textContent = 'server unreachable';
  $('model').className = 'model bad';
  setTimeout(checkModel, 3000);
}

const editable = (el) => el && (el.tagName === 'TEXTAREA' || el.tagName === 'INPUT' || el.isContentEditable);

function wire() {
  const text = $('text');
  text.addEventListener('input', (e) => {
    state.text = text.value;
    state.tokens = null;  // edited: tokenize anew (what follows the anchor, when it still holds)
    if (state.anchor && !state.text.startsWith(state.anchor.text)) state.anchor = null;
    if (state.pend.length && state.text !== (state.anchor || {}).text) state.pend = [];  // cut short
    renderPending();
    seq++;
    if (inflight) inflight.abort();
    $('cands').classList.add('stale');
    syncUrl();
    if (composing || e.isComposing) clearTimeout(timer);  // "날ㅆ" is not what the user means
    else schedule(DEBOUNCE_MS);
  });
  text.addEventListener('compositionstart', () => { composing = true; clearTimeout(timer); });
  text.addEventListener('compositionend', () => {
    composing = false;
    state.text = text.value;  // Chrome's last input event came before this
    schedule(DEBOUNCE_MS);
  });
  text.addEventListener('keydown', (e) => {  // ↓ at the end of the text: into the list
    if (e.key === 'ArrowDown' && text.selectionStart === text.value.length && state.cands.length) {
      e.preventDefault();
      $('cands').querySelectorAll('.cand')[state.focus].focus();
    }
  });
  // touch: a press held HOLD_MS peeks at the candidate and the click that ends it chooses
  // nothing; a tap chooses as a click does. A finger that moves (a scroll) cancels the hold.
  let hold = 0, held = false, holdAt = null;
  const endHold = () => { clearTimeout(hold); hold = 0; };
  $('cands').addEventListener('pointerdown', (e) => {
    const b = e.target.closest('.cand');
    held = false;
    if (!b || e.pointerType !== 'touch') return;
    holdAt = [e.clientX, e.clientY];
    hold = setTimeout(() => { held = true; peek((peekAt = Number(b.dataset.i))); }, HOLD_MS);
  });
  $('cands').addEventListener('pointermove', (e) => {
    if (hold && Math.hypot(e.clientX - holdAt[0], e.clientY - holdAt[1]) > 10) endHold();
  });
  for (const ev of ['pointerup', 'pointercancel']) $('cands').addEventListener(ev, endHold);
  $('cands').addEventListener('contextmenu', (e) => { if (e.target.closest('.cand')) e.preventDefault(); });
  $('cands').addEventListener('click', (e) => {
    const b = e.target.closest('.cand');
    if (held) { held = false; return; }  // the end of a press that peeked
    if (b) choose(Number(b.dataset.i));
  });
  $('cands').addEventListener('keydown', (e) => {
    const b = e.target.closest('.cand');
    if (!b) return;
    const n = state.cands.length, i = Number(b.dataset.i);
    const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: n - 1 }[e.key];
    if (to === -1 && e.key === 'ArrowUp') return text.focus();
    if (e.key === 'Backspace') { e.preventDefault(); return undo(); }
    if (to === undefined) return;
    e.preventDefault();
    const btns = $('cands').querySelectorAll('.cand');
    state.focus = Math.max(0, Math.min(n - 1, to));
    btns.forEach((x, k) => { x.tabIndex = k === state.focus ? 0 : -1; });
    btns[state.focus].focus();
  });
  document.addEventListener('keydown', (e) => {
    if (editable(e.target) || e.altKey || e.metaKey || e.ctrlKey) {
      if ((e.ctrlKey || e.metaKey) && e.key === 'z' && !editable(e.target)) { e.preventDefault(); undo(); }
      return;
    }
    if (/^[0-9]$/.test(e.key)) {
      e.preventDefault();
      choose((Number(e.key) + 9) % 10);
    }
  });
  $('undo').addEventListener('click', undo);
  $('clear').addEventListener('click', () => {
    if (state.text || state.tokens) state.undo.push(snapshot());
    setPrompt('', null);
    text.focus();
  });
  $('copy').addEventListener('click', async () => {
    const b = $('copy');
    try {
      await navigator.clipboard.writeText(location.href);
      b.textContent = 'Copied ✓';
    } catch {
      b.textContent = 'Link is in the address bar';
    }
    setTimeout(() => { b.textContent = 'Copy link'; }, 1500);
  });
  $('view-temp').addEventListener('input', () => {
    state.viewTemp = clampTemp(Number($('view-temp').value));
    $('view-temp-out').textContent = state.viewTemp.toFixed(2);
    if (state.tokens) schedule(60);  // the server's softmax at this temperature (cached logits)
  });
  const toks = $('toks');
  const onTip = (e) => {
    const t = e.target.closest('.tok');
    if (t && state.scores) showTip(t, Number(t.dataset.i));
  };
  toks.addEventListener('mouseover', onTip);
  toks.addEventListener('mouseout', (e) => { const t = e.target.closest('.tok'); if (t) hideTip(t); });
  toks.addEventListener('focusin', onTip);
  toks.addEventListener('focusout', (e) => hideTip(e.target.closest('.tok')));
  // where it looks: the token under the pointer or the keyboard focus
  const onAtt = (e) => { const t = e.target.closest('.tok'); if (t && state.tokens) attentionOf(Number(t.dataset.i)); };
  toks.addEventListener('mouseover', onAtt);
  toks.addEventListener('focusin', onAtt);
  toks.addEventListener('mouseleave', () => { if (!toks.contains(document.activeElement)) attentionOff(); });
  toks.addEventListener('focusout', (e) => { if (!toks.contains(e.relatedTarget)) attentionOff(); });
  $('att-layer').addEventListener('change', renderAttention);
  $('att-head').addEventListener('change', renderAttention);
  toks.addEventListener('keydown', (e) => {
    const t = e.target.closest('.tok');
    if (!t) return;
    const all = toks.querySelectorAll('.tok'), i = Number(t.dataset.i);
    const to = { ArrowRight: i + 1, ArrowDown: i + 1, ArrowLeft: i - 1, ArrowUp: i - 1, Home: 0, End: all.length - 1 }[e.key];
    if (e.key === 'Escape') return hideTip(t);
    if (to === undefined) return;
    e.preventDefault();
    const k = Math.max(0, Math.min(all.length - 1, to));
    all.forEach((x, j) => { x.tabIndex = j === k ? 0 : -1; });
    all[k].focus();
  });
  const onPeek = (e) => {
    const b = e.target.closest('.cand');
    if (b) peek((peekAt = Number(b.dataset.i)));
  };
  $('cands').addEventListener('mouseover', onPeek);
  $('cands').addEventListener('focusin', onPeek);
  const offPeek = () => {
    const f = $('cands').contains(document.activeElement) && document.activeElement.closest('.cand');
    peekAt = f ? Number(f.dataset.i) : -1;
    renderLens();
  };
  $('cands').addEventListener('mouseleave', offPeek);
  $('cands').addEventListener('focusout', (e) => { if (!$('cands').contains(e.relatedTarget)) offPeek(); });
  $('tree').addEventListener('click', (e) => {
    const b = e.target.closest('.step');
    if (b) treeJump(Number(b.dataset.p), Number(b.dataset.k));
  });
  $('gen-form').addEventListener('submit', generate);
  $('stop').addEventListener('click', () => gen && gen.ctl && gen.ctl.abort());
  $('adopt').addEventListener('click', adopt);
  $('model-pick').addEventListener('change', (e) => switchModel(e.target.value));
  $('cmp-go').addEventListener('click', compare);
  window.addEventListener('popstate', loadFromUrl);
}

wire();
renderTree();
checkModel();
loadFromUrl();
