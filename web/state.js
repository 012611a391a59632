// state.js — the Explorer's state: what the page shows and the prompt as a token path.
// Loaded first (web/index.html's order); it calls nothing in the other files.
//
// The client keeps the token ids: after a click the next request sends {"tokens": [...]}, so
// the prompt is never re-tokenized (no drift). The prompt is a token path: a clicked candidate
// adds its bytes (from the server), a character cut short stays pending until it completes,
// and the anchor keeps the ids up to the last clicked byte or special token, so that an edit
// tokenizes only the text typed after it.
'use strict';

const TOP_K = 10;      // candidates shown

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
// the candidate under the pointer or the keyboard focus (the peek and the lens follow it); -1: none
let peekAt = -1;

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

// The path as it is now, for Undo.
const snapshot = () => ({ text: state.text, tokens: state.tokens, pend: state.pend, anchor: state.anchor });

// The view temperature as the slider and the link keep it: 0.1..3, two decimals.
function clampTemp(t) { return Math.max(0.1, Math.min(3, Math.round(t * 100) / 100)); }
