// app.js — the KoGPT-2 Explorer's wiring: every event handler, then the start. Plain JS, no
// build step, no network beyond kogpt2d. Loaded last; web/index.html loads the page's files in
// this order, each using only those before it:
//   state.js      the state and the prompt as a token path
//   show.js       a token's piece, a probability, a time, the error banner
//   api.js        requests to kogpt2d and their errors; Server-Sent Events
//   explain.js    the layer-by-layer grid and the attention marks
//   scores.js     how surprising each prompt token was (colours, tooltip, histogram)
//   candidates.js the next-token list, the distribution's figures, the peek
//   tree.js       the tree of choices
//   url.js        the state in the link and back
//   status.js     the served model(s) and whether the server answers
//   prompt.js     the prompt's changes and the requests they start
//   generate.js   the Generate panel
//   compare.js    the compare view
//
// Type Korean text; after a short pause the top-10 next tokens appear with their
// probabilities. Click one (or press 1–9 / 0, or arrows + Enter) to append it; Undo.
//
// Issue 17: the prompt's tokens coloured by rank, a candidate's own next tokens on hover or
// focus, the choices as a tree of paths, the mass of the ten shown and the entropy at a view
// temperature. Issue 26: the entropy is the server's, exact over the whole vocabulary; a choice
// applies to the list it was made on, once (a double-click or a held key adds nothing more
// while the next answer loads); typing waits for an IME composition to end; the peek follows
// the list; the prompt is a token path; GLTR's tooltip and histogram. On a phone the
// candidates come before the token colours (on the first screen), and pressing and holding a
// candidate peeks at it (a tap still chooses). Issue 36: how the model reached its guess
// (explain.js); a link ending in pending bytes reloads to the same state.
'use strict';

const HOLD_MS = 450;  // a touch held this long on a candidate peeks instead of choosing
const DEBOUNCE_MS = 250;

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
checkModel(askAgain);
loadFromUrl();
