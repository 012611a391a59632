// app.js — the KoGPT-2 Explorer. Plain JS, no build step, no network beyond kogpt2d.
//
// Type Korean text; after a short pause the top-10 next tokens appear with their
// probabilities. Click one (or press 1–9 / 0, or arrows + Enter) to append it; Undo.
// The state lives in the URL, so a link reproduces it:
//   ?t=<comma-separated token ids>&text=<the prompt as shown>
// The client keeps the token ids: after a click the next request sends {"tokens": [...]}
// so the prompt is never re-tokenized (no drift). Editing the text box tokenizes anew.
// Generation streams Server-Sent Events over fetch + ReadableStream (EventSource can't POST).
'use strict';

const $ = (id) => document.getElementById(id);
const TOP_K = 10;
const DEBOUNCE_MS = 250;

const state = {
  text: '',      // the prompt as shown
  tokens: null,  // its ids (from the server, extended by clicks); null: send the text
  undo: [],      // earlier {text, tokens}
  cands: [],     // the current answer's candidates, best first
  focus: 0,      // which candidate has the keyboard focus
};
let seq = 0;           // bumped on every change; a stale answer is dropped
let inflight = null;   // AbortController of the next-token request
let timer = 0;         // debounce / retry timer
let gen = null;        // {ctl, base: {text, tokens}, ids, text} of the generation panel

// ---- talking to the server -------------------------------------------------------------

class ApiError extends Error {
  constructor(message, status = 0, retryAfter = 0) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
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
    init.body = JSON.stringify(body);
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
    render();
    showError('');
    $('stats').textContent = '';
    $('cands').setAttribute('aria-busy', 'false');
    return;
  }
  const ctl = (inflight = new AbortController());
  // speculate: the server precomputes the answers for these candidates, so a click is instant
  const body = state.tokens ? { tokens: state.tokens, top_k: TOP_K, speculate: true }
                            : { text: state.text, top_k: TOP_K, speculate: true };
  $('cands').setAttribute('aria-busy', 'true');
  const t0 = performance.now();
  try {
    const res = await api('/v1/next-token', body, ctl.signal);
    const j = await res.json();
    if (my !== seq) return;
    const rtt = performance.now() - t0;
    if (Array.isArray(j.tokens)) state.tokens = j.tokens;
    state.cands = (j.candidates || []).slice().sort((a, b) => b.prob - a.prob);
    state.focus = 0;
    showError('');
    render();
    syncUrl();
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
    if (e.status === 429) schedule(e.retryAfter * 1000);
  } finally {
    if (my === seq) $('cands').setAttribute('aria-busy', 'false');
  }
}

// A piece with its space marker ▁ shown as a visible "__".
function pieceNode(c) {
  const piece = c.piece ?? String(c.text ?? '').replace(/ /g, '\u2581');
  const span = document.createElement('span');
  span.className = 'piece';
  piece.split('\u2581').forEach((part, i) => {
    if (i) span.appendChild(Object.assign(document.createElement('span'), { className: 'sp', textContent: '__' }));
    if (part) span.appendChild(document.createTextNode(part.replace(/\n/g, '↵').replace(/\t/g, '⇥')));
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
    b.setAttribute('aria-label', `${key}: ${(c.piece ?? c.text ?? '').replace(/\u2581/g, ' (space) ')}, ${pct(c.prob)}`);
    b.title = `id ${c.id} · logprob ${Number(c.logprob).toFixed(3)}`;
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
    ? `${state.cands.length} candidates. Most likely: ${top.text ?? top.piece}, ${pct(top.prob)}.` : '';
  if (hadFocus && state.cands.length) list.querySelectorAll('.cand')[state.focus].focus();
  $('undo').disabled = state.undo.length === 0;
}

function setPrompt(text, tokens) {
  state.text = text;
  state.tokens = tokens;
  $('text').value = text;
  fetchNext();
}

function choose(i) {
  const c = state.cands[i];
  if (!c || !state.tokens || $('cands').classList.contains('stale')) return;
  state.undo.push({ text: state.text, tokens: state.tokens });
  setPrompt(state.text + (c.text ?? c.piece.replace(/\u2581/g, ' ')), state.tokens.concat(c.id));
}

function undo() {
  const prev = state.undo.pop();
  if (prev) setPrompt(prev.text, prev.tokens);
  $('undo').disabled = state.undo.length === 0;
}

// ---- the URL ---------------------------------------------------------------------------

function syncUrl() {
  const q = [];
  if (state.tokens && state.tokens.length) q.push('t=' + state.tokens.join(','));
  if (state.text) q.push('text=' + encodeURIComponent(state.text));
  const url = location.pathname + (q.length ? '?' + q.join('&') : '');
  if (url !== location.pathname + location.search) history.replaceState(null, '', url);
}

async function loadFromUrl() {
  const p = new URLSearchParams(location.search);
  const ids = (p.get('t') || '').split(',').filter((s) => s.trim() !== '').map(Number);
  const tokens = ids.length && ids.every((n) => Number.isInteger(n) && n >= 0) ? ids : null;
  let text = p.get('text') || '';
  if (tokens && !p.has('text')) {
    try {
      text = (await (await api('/v1/detokenize', { tokens })).json()).text || '';
    } catch (e) {
      showError(e.message);
    }
  }
  setPrompt(text, tokens);
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
  const body = Object.assign(base.tokens ? { tokens: base.tokens } : { text: base.text }, {
    stream: true, max_tokens: num('max_tokens'), temperature: num('temperature'),
    top_k: num('top_k'), top_p: num('top_p'), seed: num('seed'),
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
  state.undo.push({ text: state.text, tokens: state.tokens });
  const b = gen.base;
  const exact = b.tokens && gen.exact && gen.ids.length;  // else tokenize the text anew
  setPrompt(b.text + gen.text, exact ? b.tokens.concat(gen.ids) : null);
  $('adopt').disabled = true;
}

// ---- wiring ----------------------------------------------------------------------------

async function checkModel() {
  const el = $('model');
  try {
    const j = await (await api('/v1/models')).json();
    const m = (j.data && j.data[0]) || {};
    $('model-name').textContent = m.id || 'model loaded';
    if (m.n_ctx > 0) $('max_tokens').max = m.n_ctx;  // the daemon refuses more
    el.className = 'model ok';
  } catch (e) {
    $('model-name').textContent = e.status === 503 ? 'model loading…' : 'server unreachable';
    el.className = 'model bad';
    setTimeout(checkModel, 3000);
  }
}

const editable = (el) => el && (el.tagName === 'TEXTAREA' || el.tagName === 'INPUT' || el.isContentEditable);

function wire() {
  const text = $('text');
  text.addEventListener('input', () => {
    state.text = text.value;
    state.tokens = null;  // edited: tokenize anew
    seq++;
    if (inflight) inflight.abort();
    $('cands').classList.add('stale');
    syncUrl();
    schedule(DEBOUNCE_MS);
  });
  text.addEventListener('keydown', (e) => {  // ↓ at the end of the text: into the list
    if (e.key === 'ArrowDown' && text.selectionStart === text.value.length && state.cands.length) {
      e.preventDefault();
      $('cands').querySelectorAll('.cand')[state.focus].focus();
    }
  });
  $('cands').addEventListener('click', (e) => {
    const b = e.target.closest('.cand');
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
    if (state.text) state.undo.push({ text: state.text, tokens: state.tokens });
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
  $('gen-form').addEventListener('submit', generate);
  $('stop').addEventListener('click', () => gen && gen.ctl && gen.ctl.abort());
  $('adopt').addEventListener('click', adopt);
  window.addEventListener('popstate', loadFromUrl);
}

wire();
checkModel();
loadFromUrl();
