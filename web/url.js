// url.js — the link: the state into the address bar and back, so that a link reproduces it:
//   ?t=<comma-separated token ids>&text=<the prompt as shown>&vt=<view temperature>
//   &root=N&paths=a.b~c.d&at=P.K (the tree of choices: the root's length, each path's ids,
//   the path shown and how far along it)
// Uses state.js, show.js and api.js.
'use strict';

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

// The prompt a link describes, its view temperature and tree restored on the way.
async function promptFromUrl() {
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
  return { text, tokens, pend, anchor };
}
