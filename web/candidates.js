// candidates.js — the next-token list: the candidates with their bars and shortcuts, the
// figures of the whole distribution at the view temperature (the mass of the ten shown, the
// entropy), and the peek at a candidate's own next tokens (a next-token request that
// speculation has already answered). Uses state.js, show.js, api.js and explain.js (the lens
// follows the candidate peeked at).
'use strict';

const PEEK_K = 5;     // a candidate's own next tokens

// The list of state.cands: a button each (its key, piece, bar, probability), the keyboard
// focus kept; then the peek and the lens, which follow it.
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

// ---- peeking one step further -----------------------------------------------------------

const peekCache = new Map();  // "ids" -> {cands, cached}
let peekFor = '';

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
