// api.js — talking to kogpt2d: fetch() with the picked model and the API key, failures turned
// into messages fit for people, and the Server-Sent Events of a streamed answer. Uses state.js.
'use strict';

class ApiError extends Error {
  constructor(message, status = 0, retryAfter = 0) {
    super(message);
    this.status = status;
    this.retryAfter = retryAfter;
  }
}

// A daemon started with --api-key wants "Authorization: Bearer <key>"; asked once per tab.
let apiKey = '';
try { apiKey = sessionStorage.getItem('kogpt2-api-key') || ''; } catch { /* storage off */ }

// fetch() that turns every failure into an ApiError with a message fit for people.
async function api(path, body, signal, retried = false) {
  const init = { signal, headers: { Accept: 'application/json' } };
  const sentKey = apiKey;
  if (sentKey) init.headers.Authorization = 'Bearer ' + sentKey;
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['Content-Type'] = 'application/json';
    // the picked model, unless the request names its own (the compare view's)
    init.body = JSON.stringify(state.model ? { model: state.model, ...body } : body);
  }
  let res;
  try {
    res = await fetch(path, init);
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError('Cannot reach the server. Is kogpt2d running? Check your connection and try again.');
  }
  if (res.ok) return res;
  if (res.status === 401 && !retried) {
    if (apiKey !== sentKey) return api(path, body, signal, true);  // entered meanwhile
    const key = window.prompt('This kogpt2d needs an API key:', '');
    if (key && key.trim()) {
      apiKey = key.trim();
      try { sessionStorage.setItem('kogpt2-api-key', apiKey); } catch { /* storage off */ }
      return api(path, body, signal, true);
    }
  }
  let detail = '';
  try {
    const j = await res.json();
    detail = (j && j.error && j.error.message) || '';
  } catch { /* not JSON: keep the generic message */ }
  // the server's "n_prompt_tokens (841) exceeds n_ctx (512)", in words
  const long = /n_prompt_tokens \(?((?:more than )?\d+)\)? exceeds n_ctx \(?(\d+)/.exec(detail);
  if (long) {
    detail = `The prompt is too long for this model: it is ${long[1]} tokens and the model reads at most ${long[2]}. ` +
      'Shorten it or Undo.';
  }
  const ra = Math.max(1, Math.ceil(parseFloat(res.headers.get('Retry-After')) || 1));
  const msg = {
    429: `The server is busy right now; please wait ${ra} s.`,
    503: 'The model is not ready yet (loading or restarting). Please try again shortly.',
    413: 'That prompt is too long for the server.',
    401: 'The server needs an API key (reload the page to enter it).',
  }[res.status];
  throw new ApiError([msg, detail].filter(Boolean).join(' ') || `Request failed (HTTP ${res.status}).`,
                     res.status, res.status === 429 ? ra : 0);
}

// Yields the JSON payload of each Server-Sent Event of a response body.
async function* sseEvents(body) {
  const reader = body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let m;
    while ((m = /\r\n\r\n|\n\n|\r\r/.exec(buf))) {
      const block = buf.slice(0, m.index);
      buf = buf.slice(m.index + m[0].length);
      const data = block.split(/\r\n|\n|\r/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data && data !== '[DONE]') yield JSON.parse(data);
    }
  }
}
