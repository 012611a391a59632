// sdk.mjs — the official openai Node SDK against kogpt2d: completions (plain, streamed with
// include_usage, prompt arrays, n > 1), chat completions (plain and streamed; without
// max_tokens), responses.create (plain, instructions + input_text parts, streamed), models
// list/retrieve, typed errors, the API key, and penalties that act.
import OpenAI from 'openai';
import { expect, short } from './lib.mjs';

const PROMPT = '오늘은'; // greedy on the default model loops: " 오늘은 오늘은 오늘은 ..."
const MESSAGES = [
  { role: 'system', content: '당신은 친절한 도우미입니다.' },
  { role: 'user', content: '오늘 날씨 어때요?' },
];

async function collect(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return chunks;
}

// A chat reply may end at once (the model's first token is end-of-text): zeroOk.
function expectUsage(u, what, zeroOk = false) {
  expect(u && typeof u === 'object', `${what}: usage missing`, u);
  for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens'])
    expect(Number.isInteger(u[k]) && u[k] >= 0, `${what}: usage.${k} is not a count`, u);
  expect(u.prompt_tokens > 0 && (zeroOk || u.completion_tokens > 0), `${what}: usage counts zero tokens`, u);
  expect(u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: total_tokens != prompt + completion`, u);
}

// The final usage chunk of OpenAI's include_usage: the last chunk, choices [], usage set.
function expectUsageChunk(chunks, what, zeroOk = false) {
  expect(chunks.length >= 2, `${what}: fewer than 2 chunks`, chunks);
  const last = chunks[chunks.length - 1];
  expect(Array.isArray(last.choices) && last.choices.length === 0,
    `${what}: the last chunk is not the usage chunk (choices: [])`, last);
  expectUsage(last.usage, `${what}: last chunk`, zeroOk);
  for (const c of chunks.slice(0, -1))
    expect(c.usage == null, `${what}: usage on a chunk before the last`, c);
}

// The error a call throws, or a failure when it succeeds.
async function thrown(call, what) {
  let r;
  try {
    r = await call();
  } catch (e) {
    return e;
  }
  throw new Error(`${what}: succeeded, expected an error; got ${short(r)}`);
}
const describe = (e) => `${e?.constructor?.name} status=${e?.status} type=${short(e?.type)} code=${short(e?.code)} ` +
  `param=${short(e?.param)} message=${short(e?.message)}`;

export async function run({ checks, v1, model, key, daemonUrl }) {
  const sent = [];
  const tracingFetch = (url, init) => {
    sent.push({ url: String(url), headers: Object.fromEntries(new Headers(init?.headers).entries()) });
    return fetch(url, init);
  };
  const client = new OpenAI({ baseURL: v1, apiKey: key, maxRetries: 0, timeout: 20000, fetch: tracingFetch });
  const check = (name, body) => checks.check(`sdk: ${name}`, body);

  await check('completions.create: text, index, finish_reason, usage', async () => {
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 8, temperature: 0 });
    expect(r.object === 'text_completion', 'object is not text_completion', r.object);
    expect(r.model === model, `model is not ${model}`, r.model);
    expect(r.choices?.length === 1, 'not one choice', r.choices);
    const c = r.choices[0];
    expect(typeof c.text === 'string' && c.text.length > 0, 'choices[0].text is not a non-empty string', c);
    expect(c.index === 0, 'choices[0].index is not 0', c);
    expect(['stop', 'length'].includes(c.finish_reason), 'finish_reason is not stop or length', c);
    expectUsage(r.usage, 'completion');
    expect(r.usage.completion_tokens <= 8, 'more completion tokens than max_tokens', r.usage);
  });
  const headers = sent.at(-1)?.headers || {};
  console.log(`# the SDK sends these headers: ${Object.keys(headers).sort().join(', ')}`);

  await check('completions stream with stream_options.include_usage: text chunks, then a usage chunk', async () => {
    const chunks = await collect(await client.completions.create({
      model, prompt: PROMPT, max_tokens: 8, temperature: 0, stream: true, stream_options: { include_usage: true } }));
    const text = chunks.filter((c) => c.choices?.length).map((c) => c.choices[0].text).join('');
    expect(text.length > 0, 'no text in the chunks', chunks);
    expect(chunks.some((c) => ['stop', 'length'].includes(c.choices?.[0]?.finish_reason)),
      'no chunk has a finish_reason', chunks);
    expectUsageChunk(chunks, 'completion stream');
  });

  await check('completions stream without stream_options: no usage chunk, every chunk has a choice', async () => {
    const chunks = await collect(await client.completions.create({ model, prompt: PROMPT, max_tokens: 4, stream: true }));
    expect(chunks.length > 0 && chunks.every((c) => c.choices?.length === 1 && c.usage == null),
      'a chunk without a choice or with usage (OpenAI sends usage only when asked)', chunks);
  });

  await check('model may be omitted', async () => {
    const r = await client.completions.create({ prompt: PROMPT, max_tokens: 2 });
    expect(r.choices?.length === 1, 'not one choice', r);
  });

  await check('logprobs.text_offset counts characters (text.slice(offset) finds each token)', async () => {
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 6, temperature: 0, logprobs: 1 });
    const { text, logprobs: lp } = r.choices[0];
    expect(lp?.tokens?.length === lp?.text_offset?.length && lp.tokens.length > 0, 'no tokens/text_offset', lp);
    const bad = lp.tokens.map((t, i) => [t, lp.text_offset[i]])
      .filter(([t, off]) => text.slice(off, off + t.length) !== t);
    expect(bad.length === 0, `tokens not at their text_offset in ${short(text)}: ${short(bad)}`, lp.text_offset);
  });

  await check('completions with prompt: [a, b]: one choice per prompt, index in order', async () => {
    const prompts = ['오늘은', '옛날 옛적에'];
    const r = await client.completions.create({ model, prompt: prompts, max_tokens: 4, temperature: 0, echo: true });
    expect(r.choices?.length === 2, 'not 2 choices', r.choices);
    // in index order too: LangChain's OpenAI pairs choices with prompts by position, not index
    expect(r.choices[0].index === 0 && r.choices[1].index === 1, 'choices are not in index order 0, 1', r.choices);
    for (const c of r.choices)
      expect(typeof c.text === 'string' && c.text.startsWith(prompts[c.index]),
        `choice ${c.index} (echo) does not start with its prompt ${short(prompts[c.index])}`, c);
    expectUsage(r.usage, 'prompt array');
  });

  await check('completions with n: 2, temperature 1: two choices, index 0 and 1, each its own sample', async () => {
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 12, temperature: 1, seed: 7, n: 2 });
    expect(r.choices?.length === 2, 'not 2 choices', r.choices);
    expect(short(r.choices.map((c) => c.index).sort()) === '[0,1]', 'indexes are not 0 and 1', r.choices);
    expect(r.choices.every((c) => typeof c.text === 'string'), 'a choice has no text', r.choices);
    expect(r.choices[0].text !== r.choices[1].text,
      'the two samples are the same text (one seed stream for both?)', r.choices);
  });

  await check('chat.completions.create [system, user]: an assistant message', async () => {
    const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 12, temperature: 0 });
    expect(r.object === 'chat.completion', 'object is not chat.completion', r.object);
    expect(r.choices?.length === 1, 'not one choice', r.choices);
    const c = r.choices[0];
    expect(c.message?.role === 'assistant', "message.role is not 'assistant'", c);
    expect(typeof c.message.content === 'string', 'message.content is not a string', c);
    expect(['stop', 'length'].includes(c.finish_reason), 'finish_reason is not stop or length', c);
    expectUsage(r.usage, 'chat', true);
    expect(c.message.content.length > 0 || c.finish_reason === 'stop', 'no content, yet not stopped', c);
  });

  await check('chat max_completion_tokens (the SDK\'s newer name for max_tokens) is honoured', async () => {
    // ignore_eos (kogpt2's own field): the default model's greedy reply may end at once
    const r = await client.chat.completions.create({ model, messages: MESSAGES, max_completion_tokens: 3, temperature: 0, ignore_eos: true });
    expect(r.usage?.completion_tokens === 3 && r.choices[0].finish_reason === 'length', 'completion_tokens is not 3 (length)', r);
  });

  await check('chat.completions stream with include_usage: role first, content deltas, usage chunk', async () => {
    const chunks = await collect(await client.chat.completions.create({
      model, messages: MESSAGES, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true } }));
    expect(chunks.length > 0 && chunks.every((c) => c.object === 'chat.completion.chunk'),
      'not all chunks are chat.completion.chunk', chunks);
    expect(chunks[0].choices?.[0]?.delta?.role === 'assistant', "the first delta's role is not 'assistant'", chunks[0]);
    const deltas = chunks.filter((c) => c.choices?.length).map((c) => c.choices[0].delta);
    expect(deltas.every((d) => d.content == null || typeof d.content === 'string'),
      'a content delta is not a string', deltas);
    const finish = chunks.map((c) => c.choices?.[0]?.finish_reason).find((f) => f);
    expect(['stop', 'length'].includes(finish), 'no chunk has finish_reason stop or length', chunks);
    expect(deltas.some((d) => d.content) || finish === 'stop', 'no content delta, yet not stopped', deltas);
    expectUsageChunk(chunks, 'chat stream', true);
  });

  await check('chat without max_tokens: a non-empty reply that ends at the model\'s stop (not at 16 tokens)', async () => {
    const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: '오늘 날씨 어때요?' }], temperature: 0 });
    const c = r.choices?.[0];
    expect(c?.message?.content?.trim().length > 0, 'the reply is empty', r);
    expect(c.finish_reason === 'stop', 'finish_reason is not stop', r);
  });

  await check('responses.create: a string input, a response object with its message and usage', async () => {
    const r = await client.responses.create({ model, input: '오늘 날씨 어때요?', temperature: 0 });
    expect(r.object === 'response' && r.id?.startsWith('resp_') && r.status === 'completed', 'not a completed response', r);
    expect(r.output?.length === 1 && r.output[0].type === 'message' && r.output[0].role === 'assistant' &&
      r.output[0].id?.startsWith('msg_'), 'output is not one assistant message', r.output);
    const part = r.output[0].content?.[0];
    expect(part?.type === 'output_text' && Array.isArray(part.annotations), 'content[0] is not output_text', r.output[0]);
    expect(r.output_text === part.text && part.text.trim().length > 0, "the SDK's output_text is not the non-empty text", r);
    const u = r.usage;
    expect(u?.input_tokens > 0 && u.output_tokens > 0 && u.total_tokens === u.input_tokens + u.output_tokens,
      'usage is not {input_tokens, output_tokens, total_tokens}', u);
  });

  await check('responses.create with instructions, messages of input_text parts and max_output_tokens: incomplete', async () => {
    const r = await client.responses.create({ model, instructions: '짧게 대답하세요.', max_output_tokens: 3, temperature: 0,
      input: [{ role: 'user', content: [{ type: 'input_text', text: '배고파' }] }], ignore_eos: true });
    expect(r.status === 'incomplete' && r.incomplete_details?.reason === 'max_output_tokens', 'not incomplete (max_output_tokens)', r);
    expect(r.usage?.output_tokens === 3 && r.instructions === '짧게 대답하세요.' && r.max_output_tokens === 3,
      'usage.output_tokens, instructions or max_output_tokens not as asked', r);
  });

  await check('responses.create stream: OpenAI\'s events in order, deltas that make the text', async () => {
    const events = await collect(await client.responses.create({ model, input: '오늘 날씨 어때요?', temperature: 0, stream: true }));
    const types = events.map((e) => e.type);
    const deltas = types.filter((t) => t === 'response.output_text.delta').length;
    const want = ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added',
      ...Array(deltas).fill('response.output_text.delta'), 'response.output_text.done', 'response.content_part.done',
      'response.output_item.done', 'response.completed'];
    expect(deltas > 0 && JSON.stringify(types) === JSON.stringify(want), 'the events are not in order', types);
    expect(events.every((e, i) => e.sequence_number === i), 'sequence_number is not 0, 1, 2, ...', events.map((e) => e.sequence_number));
    const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
    const done = events.at(-1).response;
    expect(text.length > 0 && text === events.find((e) => e.type === 'response.output_text.done').text &&
      done.output[0].content[0].text === text, 'the deltas are not the text', { text, done });
    expect(done.usage?.output_tokens > 0, 'no usage in response.completed', done);
  });

  await check('responses.create with tools is refused by name (a 4xx)', async () => {
    const e = await thrown(() => client.responses.create({ model, input: 'a',
      tools: [{ type: 'function', name: 'f', parameters: { type: 'object', properties: {} } }] }), 'tools');
    expect(e?.status >= 400 && e.status < 500 && /tools/.test(e.message), 'not a 4xx naming tools', describe(e));
  });

  await check('models.list() contains the served id', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids.includes(model), `${model} is not listed`, ids);
  });

  await check('models.retrieve(id)', async () => {
    const m = await client.models.retrieve(model);
    expect(m.id === model && m.object === 'model', `not the model object of ${model}`, m);
  });

  await check("models.retrieve('nope') throws NotFoundError", async () => {
    const e = await thrown(() => client.models.retrieve('nope'), "retrieve('nope')");
    expect(e instanceof OpenAI.NotFoundError && e.status === 404, 'not a NotFoundError (404)', describe(e));
  });

  const errs = {};
  await check('temperature: -1 throws an APIError (400 or 422) whose message names temperature', async () => {
    const e = await thrown(() => client.completions.create({ model, prompt: PROMPT, max_tokens: 4, temperature: -1 }),
      'temperature -1');
    errs.bad_param = e;
    expect(e instanceof OpenAI.APIError && [400, 422].includes(e.status),
      'not an APIError with status 400 or 422', describe(e));
    expect(/temperature/.test(e.message), 'the message does not name temperature', describe(e));
  });

  await check('a wrong model on completions throws NotFoundError (404) with an error type', async () => {
    const e = await thrown(() => client.completions.create({ model: 'no-such-model', prompt: PROMPT, max_tokens: 4 }),
      'wrong model');
    errs.wrong_model = e;
    expect(e instanceof OpenAI.NotFoundError && e.status === 404, 'not a NotFoundError (404)', describe(e));
    expect(typeof e.type === 'string' && e.type.length > 0, 'err.type is not a non-empty string', describe(e));
  });

  await check('an unsupported field (suffix) is a 4xx that names it', async () => {
    const e = await thrown(() => client.completions.create({ model, prompt: PROMPT, max_tokens: 4, suffix: '다.' }),
      'suffix');
    expect(e instanceof OpenAI.APIError && e.status >= 400 && e.status < 500, 'not a 4xx APIError', describe(e));
    expect(/suffix/.test(e.message), 'the message does not name suffix', describe(e));
  });

  await check('a wrong API key throws AuthenticationError (401); the right one works', async () => {
    const wrong = new OpenAI({ baseURL: v1, apiKey: key + '-wrong', maxRetries: 0, timeout: 20000 });
    const e = await thrown(() => wrong.completions.create({ model, prompt: PROMPT, max_tokens: 4 }), 'wrong key');
    errs.wrong_key = e;
    expect(e instanceof OpenAI.AuthenticationError && e.status === 401, 'not an AuthenticationError (401)', describe(e));
    const r = await client.completions.create({ model, prompt: PROMPT, max_tokens: 2 });
    expect(r.choices?.length === 1, 'the right key did not get a completion', r);
  });

  await check("error types are OpenAI's strings (invalid_request_error, ...)", async () => {
    const want = { bad_param: ['invalid_request_error'], wrong_model: ['invalid_request_error'],
      wrong_key: ['invalid_request_error', 'authentication_error'] };
    const bad = Object.entries(want).filter(([k, ok]) => !ok.includes(errs[k]?.type))
      .map(([k, ok]) => `${k}: type ${short(errs[k]?.type)} (want ${ok.join(' or ')})`);
    expect(bad.length === 0, bad.join('; '));
  });

  // Penalties: greedy decoding loops on this prompt; each penalty must change that.
  const greedy = { model, prompt: PROMPT, max_tokens: 16, temperature: 0 };
  let base = null;
  await check('greedy baseline for the penalty checks repeats a token', async () => {
    const r = await client.completions.create({ ...greedy, logprobs: 1 });
    base = r.choices[0];
    const toks = base.logprobs?.tokens || [];
    expect(new Set(toks).size < toks.length,
      'the greedy baseline does not repeat (the penalty checks would prove nothing)', base.text);
  });
  const penalty = (name, extra) => check(`${name} is accepted and changes a looping greedy output`, async () => {
    const r = await client.completions.create({ ...greedy, ...extra });
    expect(typeof r.choices?.[0]?.text === 'string', 'no text', r);
    expect(base, 'no greedy baseline to compare with');
    expect(r.choices[0].text !== base.text, `${name} did not change the greedy output`, r.choices[0].text);
  });
  await penalty('presence_penalty', { presence_penalty: 2 });
  await penalty('frequency_penalty', { frequency_penalty: 2 });
  await penalty('repetition_penalty (an extra body field)', { repetition_penalty: 1.5 });

  await check('logit_bias {id: -100} bans the greedy top token', async () => {
    // the top token's id from kogpt2d's own next-token endpoint
    const nt = await fetch(`${daemonUrl}/v1/next-token`, { method: 'POST',
      headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
      body: JSON.stringify({ text: PROMPT, top_k: 1 }) }).then((r) => r.json());
    const top = nt.candidates?.[0];
    expect(top && Number.isInteger(top.id), '/v1/next-token gave no top candidate', nt);
    const r = await client.completions.create({ ...greedy, logprobs: 1, logit_bias: { [top.id]: -100 } });
    const toks = r.choices?.[0]?.logprobs?.tokens || [];
    expect(toks.length > 0, 'no logprobs tokens', r.choices?.[0]);
    expect(!toks.includes(top.text), `the banned token ${short(top.text)} (id ${top.id}) was generated`, toks);
  });

  await check('chat accepts presence/frequency/repetition penalties and logit_bias', async () => {
    const r = await client.chat.completions.create({ model, messages: MESSAGES, max_tokens: 8, temperature: 0,
      presence_penalty: 1, frequency_penalty: 1, logit_bias: { 5: -100 }, repetition_penalty: 1.3 });
    expect(r.choices?.[0]?.message?.role === 'assistant', 'no assistant message', r);
  });
}
