// compare.js — the compare view, shown when the daemon serves several models. Uses state.js,
// show.js and api.js.
'use strict';

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
