// generate.js — the Generate panel: a streamed generation with the form's sampling
// parameters (Server-Sent Events over fetch + ReadableStream, since EventSource can't POST),
// Stop, and Append to prompt. Uses state.js, show.js, api.js and prompt.js (setPrompt).
'use strict';

let gen = null;        // {ctl, base: {text, tokens}, ids, text} of the generation panel

function num(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

async function generate(ev) {
  ev.preventDefault();
  if (gen && gen.ctl) return;
  const base = { text: state.text, tokens: state.tokens };
  const body = Object.assign(promptBody(base), {
    stream: true, max_tokens: num('max_tokens'), temperature: num('temperature'),
    top_k: num('top_k'), top_p: num('top_p'), seed: num('seed'),
    repetition_penalty: num('repetition_penalty'), presence_penalty: num('presence_penalty'),
    frequency_penalty: num('frequency_penalty'), ignore_eos: $('ignore_eos').checked,
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
  state.undo.push(snapshot());
  const b = gen.base;
  const exact = b.tokens && gen.exact && gen.ids.length;  // else tokenize the text anew
  const tokens = exact ? b.tokens.concat(gen.ids) : null;
  setPrompt(b.text + gen.text, tokens, [], exact ? { text: b.text + gen.text, tokens } : null);
  $('adopt').disabled = true;
}
