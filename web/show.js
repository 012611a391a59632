// show.js — how the Explorer writes what every view shows: a token's piece, a probability,
// a time, the error banner; $, the page's elements by id. Uses state.js.
'use strict';

const $ = (id) => document.getElementById(id);

function showError(msg) {
  const el = $('error');
  el.textContent = msg;
  el.hidden = !msg;
}

const ms = (x) => (x < 10 ? x.toFixed(1) : Math.round(x)) + ' ms';

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

const shown = (t) => String(t ?? '').replace(/\n/g, '↵').replace(/\t/g, '⇥');
const visible = (t) => shown(t).replace(/ /g, '__');  // a token in a sentence, spaces as the pieces show them
