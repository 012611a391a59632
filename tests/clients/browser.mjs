// browser.mjs — the official openai SDK in Debian's Chromium (playwright-core, headless): a
// page on one origin (the suite's static server, which also serves the SDK's own .mjs files
// from node_modules/openai/) calls kogpt2d on another, started with --cors-origin <the page's
// origin>. The SDK sends its x-stainless-* headers, so each call is preflighted.
import fs from 'node:fs';
import { expect, short } from './lib.mjs';

// Headers a preflight never asks for: CORS-safelisted ones and those the browser sets itself.
// (Content-Type is safelisted only for form and text/plain bodies; application/json is asked.)
const SAFELISTED = new Set(['accept', 'accept-language', 'content-language', 'user-agent', 'referer',
  'origin', 'sec-ch-ua', 'sec-ch-ua-mobile', 'sec-ch-ua-platform']);

// Runs in the page: the SDK from /openai/index.mjs, one completion and one streamed chat.
async function inPage({ v1, key, model }) {
  const out = {};
  let OpenAI;
  try {
    ({ default: OpenAI } = await import('/openai/index.mjs'));
    out.imported = true;
  } catch (e) {
    out.imported = `${e.name}: ${e.message}`;
    return out;
  }
  const why = (e) => `${e?.constructor?.name}: ${e?.message}${e?.cause ? ` (cause: ${e.cause})` : ''}`;
  const client = new OpenAI({ baseURL: v1, apiKey: key, dangerouslyAllowBrowser: true, maxRetries: 0, timeout: 20000 });
  try {
    const r = await client.completions.create({ model, prompt: '오늘은', max_tokens: 8, temperature: 0 });
    out.completion = { ok: true, text: r.choices?.[0]?.text, usage: r.usage };
  } catch (e) {
    out.completion = { ok: false, error: why(e) };
  }
  try {
    const stream = await client.chat.completions.create({ model, max_tokens: 8, temperature: 0, stream: true,
      stream_options: { include_usage: true }, messages: [{ role: 'user', content: '안녕하세요?' }] });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    out.chat = { ok: true, role: chunks[0]?.choices?.[0]?.delta?.role,
      text: chunks.map((c) => c.choices?.[0]?.delta?.content || '').join(''), usage: chunks.at(-1)?.usage };
  } catch (e) {
    out.chat = { ok: false, error: why(e) };
  }
  try {
    const wrong = new OpenAI({ baseURL: v1, apiKey: key + '-wrong', dangerouslyAllowBrowser: true, maxRetries: 0 });
    await wrong.models.list();
    out.wrongKey = { ok: false, error: 'a wrong key got the model list' };
  } catch (e) {
    out.wrongKey = { ok: e?.status === 401 && e?.constructor?.name === 'AuthenticationError', error: why(e) };
  }
  return out;
}

export async function run({ checks, v1, model, key, pageUrl, chromiumPath, setCleanup }) {
  const check = (name, body) => checks.check(`browser: ${name}`, body);
  const origin = new URL(pageUrl).origin;

  // No browser needed to see the CORS headers of a normal reply.
  await check('a reply to the page origin exposes Retry-After (Access-Control-Expose-Headers)', async () => {
    const r = await fetch(`${v1}/models`, { headers: { Origin: origin, Authorization: `Bearer ${key}` } });
    expect(r.headers.get('access-control-allow-origin') === origin, `Access-Control-Allow-Origin is not ${origin}`,
      r.headers.get('access-control-allow-origin'));
    const exposed = (r.headers.get('access-control-expose-headers') || '').toLowerCase().split(/\s*,\s*/);
    expect(exposed.includes('retry-after'), 'Retry-After is not exposed', r.headers.get('access-control-expose-headers'));
  });

  if (!fs.existsSync(chromiumPath)) {
    checks.skip('browser: the openai SDK in Chromium', `no Chromium at ${chromiumPath} (apt-get install chromium)`);
    return;
  }
  const { chromium } = await import('playwright-core');
  const browser = await chromium.launch({ executablePath: chromiumPath, headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync'] });
  setCleanup(() => browser.close());
  try {
    const page = await browser.newPage();
    const sent = [];
    page.on('request', (r) => { if (r.url().startsWith(v1)) sent.push({ method: r.method(), headers: r.headers() }); });
    const pageErrors = [];
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await page.goto(pageUrl);
    const out = await page.evaluate(inPage, { v1, key, model });

    await check('the SDK loads in the page (its .mjs files, no bundler)', async () => {
      expect(out.imported === true, 'import of /openai/index.mjs failed', out.imported);
      expect(pageErrors.length === 0, 'errors in the page', pageErrors);
    });
    if (out.imported !== true) return;

    const asked = [...new Set(sent.filter((s) => s.method === 'POST')
      .flatMap((s) => Object.keys(s.headers)).filter((h) => !SAFELISTED.has(h)))].sort();
    console.log(`# the SDK in Chromium sends these non-safelisted headers: ${asked.join(', ')}`);
    await check('the preflight allows every header the SDK sends', async () => {
      expect(asked.length > 0, 'no SDK request was seen');
      const r = await fetch(`${v1}/completions`, { method: 'OPTIONS', headers: { Origin: origin,
        'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': asked.join(',') } });
      expect(r.status === 200 || r.status === 204, 'the preflight is not 200/204', r.status);
      const allowed = (r.headers.get('access-control-allow-headers') || '').toLowerCase().split(/\s*,\s*/);
      const missing = asked.filter((h) => !allowed.includes(h) && !allowed.includes('*'));
      expect(missing.length === 0, `Access-Control-Allow-Headers lacks ${missing.join(', ')}`,
        r.headers.get('access-control-allow-headers'));
    });
    await check('completions.create from the page (dangerouslyAllowBrowser)', async () => {
      expect(out.completion?.ok, 'the completion failed', out.completion?.error);
      expect(typeof out.completion.text === 'string', 'no choices[0].text', out.completion);
    });
    await check('a streamed chat completion from the page, with its usage chunk', async () => {
      expect(out.chat?.ok, 'the streamed chat failed', out.chat?.error);
      expect(out.chat.role === 'assistant', "the first delta's role is not 'assistant'", out.chat);
      expect(out.chat.usage?.total_tokens > 0, 'no usage in the last chunk', short(out.chat));
    });
    await check('a 401 reaches the page as AuthenticationError (error replies carry CORS headers)', async () => {
      expect(out.wrongKey?.ok, 'not an AuthenticationError (401)', out.wrongKey?.error);
    });
  } finally {
    await browser.close();
  }
}
