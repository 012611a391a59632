// scores.js — how surprising each prompt token was (POST /v1/score, one request, mostly
// answered from the server's caches): the tokens coloured by the rank the model gave each (as
// GLTR did), a token's tooltip with the model's five most likely tokens there, and the
// histogram of the prompt's ranks (top 10 / 100 / 1000 / beyond). Uses state.js, show.js,
// api.js and explain.js (the attention marks sit on these tokens).
'use strict';

const ALT_K = 5;      // a prompt token's alternatives in its tooltip (GLTR's five)

// GLTR's buckets, the histogram's own: the colour of a token is the bar it counts in
const HIST_BUCKETS = [['10', 10], ['100', 100], ['1000', 1000], ['beyond', Infinity]];
const RANK_CLASS = (r) => 'r' + (r == null ? 'x' : HIST_BUCKETS.find(([, upto]) => r <= upto)[0].replace('beyond', 'x'));
const RANK_WORD = (r) => `rank ${r}`;  // exact over the whole vocabulary

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
