// status.js — the header's model status: which model is served (or the picker, when several
// are), and whether the server answers; an unreachable or loading server is polled every 3 s.
// Uses state.js, show.js and api.js. onBack is what the page does once the server answers
// (prompt.js's askAgain): handed down, so that this file never calls up into the prompt's
// requests.
'use strict';

// The served models into the picker and the compare view's selects; both stay hidden while
// the daemon serves one model (the requests then name none, as before).
function listModels(data) {
  const ids = data.map((m) => m.id);
  const several = ids.length > 1;
  if (several && !ids.includes(state.model)) state.model = ids[0];
  const fill = (sel, pick) => {
    if (sel.options.length === ids.length && [...sel.options].every((o, i) => o.value === ids[i])) return;
    sel.replaceChildren(...ids.map((id) => new Option(id, id)));
    sel.value = pick;
  };
  fill($('model-pick'), state.model);
  fill($('cmp-a'), ids[0]);
  fill($('cmp-b'), ids[1] ?? ids[0]);
  $('model-pick').hidden = !several;
  $('model-name').hidden = several;
  $('compare').hidden = !several;
}

async function checkModel(onBack) {
  const el = $('model');
  try {
    const j = await (await api('/v1/models')).json();
    const m = (j.data && j.data[0]) || {};
    $('model-name').textContent = m.id || 'model loaded';
    listModels(j.data || []);
    if (m.n_ctx > 0) $('max_tokens').max = m.n_ctx;  // the daemon refuses more
    el.className = 'model ok';
    onBack();
  } catch (e) {
    $('model-name').textContent = e.status === 503 ? 'model loading…' : 'server unreachable';
    el.className = 'model bad';
    setTimeout(() => checkModel(onBack), 3000);
  }
}

// A request found no server: the status says so until checkModel reaches it again.
function serverDown(onBack) {
  if ($('model').classList.contains('bad')) return;  // already polling
  $('model-name').textContent = 'server unreachable';
  $('model').className = 'model bad';
  setTimeout(() => checkModel(onBack), 3000);
}
