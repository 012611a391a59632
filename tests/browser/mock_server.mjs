// mock_server.mjs — a DEV/TEST AID ONLY: a fake kogpt2d for working on the Explorer (web/)
// without a model. It serves web/ at GET / and answers the daemon's API with made-up but
// self-consistent data (a toy word-level "tokenizer" and pseudo-random probabilities).
// It is not the daemon and proves nothing about it; the browser test runs against the real
// kogpt2d when KG_SERVER_URL (or KG_DAEMON + KG_MODEL_DIR) is given.
//
//   node tests/browser/mock_server.mjs [port]      # then open http://127.0.0.1:port/
//
// Node standard library only.
import http from 'node:http';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const WEB = path.resolve(HERE, '../../web');
const MODEL = 'mock-kogpt2';
const EOS = 1;

// The toy vocabulary: ids for pieces, interned on first sight (id 1 is </s>).
const pieces = ['<unk>', '</s>'];
const ids = new Map(pieces.map((p, i) => [p, i]));
const intern = (p) => (ids.has(p) ? ids.get(p) : (ids.set(p, pieces.length), pieces.push(p) - 1));
const NEXT = ['▁여러분', '▁올해', '는', '▁새해', '▁복', '▁많이', '▁받으세요', '.', '▁그리고', '▁감사합니다',
  '▁모두', '▁건강', '하세요', '▁행복', '한', '▁한', '▁해', '가', '▁되', '시길', '▁바랍니다', ',', '!', '▁우리'];
NEXT.forEach(intern);

// "Tokenize": a space becomes ▁ on the word after it; words split into chunks of 2 chars.
function tokenize(text) {
  const out = [];
  for (const m of text.matchAll(/(\s*)(\S+)/gu)) {
    const chars = [...m[2]];
    for (let i = 0; i < chars.length; i += 2) {
      out.push(intern((i === 0 && m[1] ? '▁' : '') + chars.slice(i, i + 2).join('')));
    }
  }
  return out;
}
const pieceText = (id) => (id === EOS ? '' : pieces[id].replace(/▁/g, ' '));
const detokenize = (toks) => toks.map(pieceText).join('');

// A deterministic distribution over NEXT (+ </s>) for a prompt.
function distribution(toks) {
  let h = 2166136261;
  for (const t of toks) h = Math.imul(h ^ t, 16777619) >>> 0;
  const cand = [...NEXT.map((p) => ids.get(p)), EOS];
  const logits = cand.map((_, i) => {
    h = Math.imul(h ^ (i + 1), 2654435761) >>> 0;
    return (h % 1000) / 160 - (i === cand.length - 1 ? 3 : 0);
  });
  const mx = Math.max(...logits);
  const z = logits.reduce((s, l) => s + Math.exp(l - mx), 0);
  return cand.map((id, i) => ({ id, prob: Math.exp(logits[i] - mx) / z }))
    .sort((a, b) => b.prob - a.prob);
}

function sendJson(res, status, obj, headers = {}) {
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', ...headers });
  res.end(JSON.stringify(obj));
}
const fail = (res, status, type, message, param = null, headers) =>
  sendJson(res, status, { error: { code: status, type, message, param } }, headers);

// The prompt of a request, or an error already sent (returns null).
function prompt(res, body) {
  if (body.tokens !== undefined && body.text !== undefined) {
    fail(res, 400, 'invalid_request_error', 'give text or tokens, not both', 'text');
    return null;
  }
  if (body.tokens !== undefined) {
    if (!Array.isArray(body.tokens) || !body.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < pieces.length)) {
      fail(res, 400, 'invalid_request_error', 'tokens must be an array of valid token ids', 'tokens');
      return null;
    }
    if (!body.tokens.length) { fail(res, 422, 'invalid_request_error', 'the prompt is empty', 'tokens'); return null; }
    return body.tokens;
  }
  if (typeof body.text !== 'string') { fail(res, 400, 'invalid_request_error', 'text must be a string', 'text'); return null; }
  const t = tokenize(body.text);
  if (!t.length) { fail(res, 422, 'invalid_request_error', 'the prompt is empty', 'text'); return null; }
  return t;
}

let lastPrompt = [];
function cachedPrefix(toks) {
  let n = 0;
  while (n < toks.length && n < lastPrompt.length && toks[n] === lastPrompt[n]) n++;
  lastPrompt = toks;
  return n;
}

function mulberry32(a) {
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

async function generate(req, res, body) {
  const toks = prompt(res, body);
  if (!toks) return;
  const t0 = performance.now();
  const max = body.max_tokens ?? 16;
  const rnd = mulberry32(body.seed ?? (Math.random() * 2 ** 32) >>> 0);
  const out = [];
  let finish = 'length', text = '', closed = false;
  res.on('close', () => { closed = true; });  // the client went away (or we finished)
  if (body.stream) res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  while (out.length < max && !closed) {
    const d = distribution(toks.concat(out));
    let r = rnd(), pick = d[d.length - 1];
    for (const c of d) { if ((r -= c.prob) <= 0) { pick = c; break; } }
    if (pick.id === EOS) { finish = 'eos'; break; }
    out.push(pick.id);
    text += pieceText(pick.id);
    if (body.stream) {
      // one event per token: the token object itself, as kogpt2d's server/routes.c sends it
      res.write(`data: ${JSON.stringify({ id: pick.id, text: pieceText(pick.id), logprob: Math.log(pick.prob) })}\n\n`);
      await new Promise((ok) => setTimeout(ok, 25));
    }
  }
  const done = { done: true, finish_reason: finish, text, tokens: out, prompt_tokens: toks.length,
    cached_tokens: 0, generated_tokens: out.length, timings: { total_ms: performance.now() - t0 } };
  if (body.stream) res.end(`data: ${JSON.stringify(done)}\n\n`);
  else { delete done.done; sendJson(res, 200, { model: MODEL, ...done }); }
}

function api(req, res, body) {
  switch (req.url) {
    case '/v1/next-token': {
      const toks = prompt(res, body);
      if (!toks) return;
      const k = body.top_k ?? 10;
      if (!Number.isInteger(k) || k < 1) return fail(res, 400, 'invalid_request_error', 'top_k must be a positive integer', 'top_k');
      const dist = distribution(toks);
      const cands = dist.slice(0, k).map((c) => ({
        id: c.id, piece: pieces[c.id], text: pieceText(c.id), prob: c.prob, logprob: Math.log(c.prob) }));
      const entropy = -dist.reduce((h, c) => h + (c.prob > 0 ? c.prob * Math.log2(c.prob) : 0), 0);
      return sendJson(res, 200, { model: MODEL, tokens: toks, candidates: cands, entropy_bits: entropy,
        candidates_mass: cands.reduce((m, c) => m + c.prob, 0), prompt_tokens: toks.length,
        cached_tokens: cachedPrefix(toks), timings: { total_ms: 1 + Math.random() * 2 } });
    }
    case '/v1/generate': return generate(req, res, body);
    case '/v1/tokenize': {
      if (typeof body.text !== 'string') return fail(res, 400, 'invalid_request_error', 'text must be a string', 'text');
      const t = tokenize(body.text);
      return sendJson(res, 200, { tokens: t, pieces: t.map((i) => pieces[i]) });
    }
    case '/v1/detokenize': {
      if (!Array.isArray(body.tokens)) return fail(res, 400, 'invalid_request_error', 'tokens must be an array', 'tokens');
      return sendJson(res, 200, { text: detokenize(body.tokens.filter((t) => t < pieces.length)) });
    }
    default: return fail(res, 404, 'not_found_error', `no route ${req.url}`);
  }
}

// The same policy as kogpt2d's server/static.c, so a page that breaks it fails here too.
const CSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; object-src 'none'; " +
  "base-uri 'none'; frame-ancestors 'none'";
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.ico': 'image/x-icon' };

function handle(req, res) {
  const url = new URL(req.url, 'http://x');
  if (req.method === 'GET') {
    if (url.pathname === '/healthz' || url.pathname === '/readyz') return sendJson(res, 200, { status: 'ok' });
    if (url.pathname === '/v1/models') return sendJson(res, 200, { object: 'list', data: [{ id: MODEL, object: 'model' }] });
    const file = path.join(WEB, url.pathname === '/' ? 'index.html' : path.normalize(url.pathname));
    if (!file.startsWith(WEB) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
      return fail(res, 404, 'not_found_error', `no route ${url.pathname}`);
    }
    res.writeHead(200, { 'Content-Type': TYPES[path.extname(file)] || 'application/octet-stream',
      'Cache-Control': 'no-cache', 'Content-Security-Policy': CSP });
    return fs.createReadStream(file).pipe(res);
  }
  if (req.method !== 'POST') return fail(res, 405, 'invalid_request_error', 'method not allowed');
  let raw = '';
  req.setEncoding('utf8');
  req.on('data', (c) => { raw += c; });
  req.on('end', () => {
    let body;
    try { body = JSON.parse(raw); } catch { return fail(res, 400, 'invalid_request_error', 'malformed JSON'); }
    if (!body || typeof body !== 'object' || Array.isArray(body)) return fail(res, 400, 'invalid_request_error', 'the body must be a JSON object');
    api(req, res, body);
  });
}

// Starts the mock on 127.0.0.1 (port 0: any free one); resolves to {url, close}.
export function startMock(port = 0) {
  const server = http.createServer(handle);
  return new Promise((ok) => server.listen(port, '127.0.0.1', () => ok({
    url: `http://127.0.0.1:${server.address().port}`,
    close: () => new Promise((done) => { server.closeAllConnections?.(); server.close(done); }),
  })));
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const { url } = await startMock(Number(process.argv[2] || 8088));
  console.log(`mock kogpt2d (dev aid) serving web/ at ${url}/`);
}
