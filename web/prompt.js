// prompt.js — the prompt's changes and the requests they start: typing (debounced), a chosen
// candidate, Undo, a jump in the tree, a link, another model. Each change bumps seq, so that a
// stale answer is dropped, and asks for the next-token candidates, then the scores and the
// lens. Uses every file before it in web/index.html's order.
'use strict';

let inflight = null;   // AbortController of the next-token request
let timer = 0;         // debounce / retry timer
let composing = false; // an IME composition is under way: its half-typed syllables wait

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
    if (!e.status) serverDown(askAgain);
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

// Back after an outage: the list that went stale is asked again, unless the user is mid-syllable.
function askAgain() {
  if ($('cands').classList.contains('stale') && !composing) schedule(0);
}

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

function treeJump(p, k) {
  const tr = state.tree, path = tr.paths[p];
  if (!tr.root || !path) return;
  state.undo.push(snapshot());
  tr.at = [p, k];
  const q = addSteps(tr.root, path.slice(0, k));
  setPrompt(q.text, q.tokens, q.pend, q.anchor);
}

async function loadFromUrl() {
  const p = await promptFromUrl();
  setPrompt(p.text, p.tokens, p.pend, p.anchor);
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
