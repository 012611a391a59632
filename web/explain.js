// explain.js — how the model reached its guess, from /v1/next-token's "explain" (issue 36).
// Uses state.js, show.js and api.js; scores.js and candidates.js call its renderers.
//
// Layer by layer (the logit lens): a grid of each layer's best tokens beside the candidates,
// following the candidate hovered, focused or peeked at (its rank at every layer, its cells
// marked); asked after the candidates are shown, so a click stays as fast. Where it looks:
// hovering or focusing a prompt token marks, under the tokens up to it, its attention in the
// chosen layer and head (or the heads' mean); the tokens keep GLTR's colours.
'use strict';

const LENS_K = 5;   // the lens's tokens per layer
const ATT_TOP = 3;  // tokens named in the attention view's line

// ---- layer by layer: the logit lens (/v1/next-token's explain.lens) ----------------------

// After the candidates: every layer's best tokens for the same prompt (a request of its own, so
// that the candidates never wait for it).
async function fetchLens(my) {
  const tokens = state.tokens;
  if (!tokens || !tokens.length) return;
  try {
    const j = await (await api('/v1/next-token', { tokens, top_k: TOP_K, explain: { lens: true, top_k: LENS_K } })).json();
    if (my !== seq || state.tokens !== tokens) return;
    state.lens = (j.explain && j.explain.lens) || null;
    renderLens();
  } catch (e) {
    if (e.name !== 'AbortError' && my === seq) { state.lens = null; renderLens(); }
  } finally {
    if (my === seq) state.lensFor = tokens;
  }
}

const layerName = (k) => (k === 0 ? 'embedding' : `layer ${k}`);

// The candidate the lens follows: the one peeked at (hover, long press), else the focused one.
function lensFollowed() {
  const i = peekAt >= 0 ? peekAt : state.focus;
  const c = state.cands[i] || state.cands[0];
  return c && state.lens ? state.lens.candidates.find((x) => x.id === c.id) || null : null;
}

// One sentence on the followed candidate's way through the layers (the grid's live summary).
function lensSentence(l, f) {
  const name = `“${visible(f.display ?? f.text)}”`;
  const firstTop = f.ranks.indexOf(1);
  const ranks = f.ranks.map((r, k) => `${layerName(k)} ${r}`).join(', ');
  const head = f.id === l.answer.id
    ? `${name} is the top guess from ${layerName(l.answer.first_layer)} on` +
      (l.answer.rank_before != null ? ` (rank ${l.answer.rank_before} before)` : '')
    : firstTop >= 0 ? `${name} is the top guess first at ${layerName(firstTop)}`
      : `${name} is never the top guess; its best rank is ${Math.min(...f.ranks)}`;
  return `${head}. Rank by layer: ${ranks}.`;
}

// The grid: a row per layer (the embedding first, the model's own answer last): the followed
// candidate's rank there, then the layer's LENS_K best tokens, the followed one marked.
function renderLens() {
  const table = $('lens'), l = state.lens;
  const cap = table.querySelector('caption');
  table.replaceChildren(cap);
  const f = lensFollowed();
  $('lens-box').dataset.for = f ? f.id : '';
  if (!l || !f) { $('lens-sum').textContent = ''; return; }
  const head = table.createTHead().insertRow();
  const th = (text, cls = '') => { const e = document.createElement('th'); e.scope = 'col'; e.className = cls; e.textContent = text; return e; };
  const followedHead = th('', 'lens-rank');
  followedHead.append('rank of ', pieceNode(f));
  head.append(th('', 'lens-layer'), followedHead, ...Array.from({ length: LENS_K }, (_, k) => th(String(k + 1))));
  const body = table.createTBody();
  l.layers.forEach((layer, k) => {
    const tr = body.insertRow();
    const rh = document.createElement('th');
    rh.scope = 'row';
    rh.className = 'lens-layer';
    rh.textContent = k === 0 ? 'emb' : String(k);
    rh.title = layerName(k);
    tr.appendChild(rh);
    const rank = tr.insertCell();
    rank.className = 'lens-rank' + (f.ranks[k] === 1 ? ' top' : '');
    rank.textContent = f.ranks[k];
    rank.title = `${pct(f.probs[k])} at ${layerName(k)}`;
    layer.top.forEach((t) => {
      const td = tr.insertCell();
      td.className = 'lens-tok' + (t.id === f.id ? ' followed' : '');
      td.dataset.id = t.id;
      td.title = `${shown(t.display ?? t.text)} ${pct(t.prob)}`;
      td.appendChild(pieceNode(t));
    });
  });
  $('lens-sum').textContent = lensSentence(l, f);
}

// ---- where it looks: attention (/v1/next-token's explain.attention) ------------------------

const attCache = new Map();  // "ids" of a prompt prefix -> its explain.attention
let attFor = -1;             // the prompt token whose attention is shown; -1: none
let attTimer = 0;

// Prompt token i's attention over tokens 0..i: a request for the prefix up to it (answered once
// per prefix; the page keeps it), shown after a short pause so that a sweeping pointer asks little.
function attentionOf(i) {
  clearTimeout(attTimer);
  attFor = i;
  const tokens = (state.tokens || []).slice(0, i + 1);
  const key = tokens.join(',');
  if (!tokens.length) return;
  if (attCache.has(key)) { renderAttention(); return; }
  attTimer = setTimeout(async () => {
    try {
      const j = await (await api('/v1/next-token', { tokens, top_k: 1, explain: { attention: true } })).json();
      const a = j.explain && j.explain.attention;
      if (!a) return;
      attCache.set(key, a);
      if (attCache.size > 100) attCache.delete(attCache.keys().next().value);
      if (attFor === i) renderAttention();
    } catch { /* the marks stay off; the page goes on */ }
  }, 120);
}

function attentionOff() {
  clearTimeout(attTimer);
  attFor = -1;
  renderAttention();
}

// The layer and head choices, once the model's shape is known (kept across answers).
function fillAttentionChoices(a) {
  const layer = $('att-layer'), head = $('att-head');
  if (layer.options.length !== a.layers) {
    layer.replaceChildren(...Array.from({ length: a.layers }, (_, l) => new Option(`${l + 1} of ${a.layers}`, String(l))));
    layer.value = String(a.layers - 1);
  }
  if (head.options.length !== a.heads + 1) {
    head.replaceChildren(new Option('all (mean)', 'mean'), ...Array.from({ length: a.heads }, (_, h) => new Option(String(h + 1), String(h))));
  }
}

// Marks, under each token up to the one pointed at, its share of that token's attention.
function renderAttention() {
  const toks = [...$('toks').querySelectorAll('.tok')];
  toks.forEach((t) => { t.classList.remove('att', 'att-from'); t.style.removeProperty('--att'); });
  const key = attFor >= 0 && state.tokens ? state.tokens.slice(0, attFor + 1).join(',') : '';
  const a = key && attCache.get(key);
  const sum = $('att-sum');
  if (!a || !toks[attFor]) {
    sum.replaceChildren(Object.assign(document.createElement('span'), { className: 'muted',
      textContent: 'Each token\'s attention over the tokens before it is marked under them.' }));
    delete sum.dataset.pos;
    return;
  }
  fillAttentionChoices(a);
  const l = Number($('att-layer').value), h = $('att-head').value;
  const w = h === 'mean' ? a.mean[l] : a.weights[l][Number(h)];
  const top = Math.max(...w);
  w.forEach((x, p) => {
    toks[p].classList.add('att');
    toks[p].style.setProperty('--att', String(top > 0 ? x / top : 0));
  });
  toks[attFor].classList.add('att-from');
  const best = w.map((x, p) => [x, p]).sort((x, y) => y[0] - x[0]).slice(0, ATT_TOP);
  const name = (p) => `“${visible((state.scores && state.scores[p] && state.scores[p].display) ?? toks[p].textContent)}”`;
  sum.textContent = `${name(attFor)} looks most at ` + best.map(([x, p]) => `${name(p)} ${pct(x)}`).join(', ') +
    ` (layer ${l + 1}, ${h === 'mean' ? 'mean of heads' : 'head ' + (Number(h) + 1)})`;
  sum.dataset.pos = attFor;
}
