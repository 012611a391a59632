// aisdk.mjs — the Vercel AI SDK (`ai` + `@ai-sdk/openai`) against kogpt2d, through its default
// provider call: createOpenAI({baseURL}) then openai(model), which speaks OpenAI's Responses API
// (POST /v1/responses). generateText and streamText, with a system prompt, a token limit, and
// the chat form openai.chat(model) with no limit (OpenAI's default: until the model stops).
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, streamText } from 'ai';
import { expect } from './lib.mjs';

const PROMPT = '오늘 날씨 어때요?';

export async function run({ checks, v1, model, key }) {
  const sent = [];
  const tracingFetch = (url, init) => {
    sent.push({ url: String(url), body: init?.body ? JSON.parse(init.body) : null });
    return fetch(url, init);
  };
  const openai = createOpenAI({ baseURL: v1, apiKey: key, fetch: tracingFetch });
  const check = (name, body) => checks.check(`aisdk: ${name}`, body);

  await check('generateText({model: openai(id)}) posts /v1/responses and gets the text', async () => {
    const r = await generateText({ model: openai(model), prompt: PROMPT, temperature: 0, maxRetries: 0 });
    expect(sent.at(-1)?.url.endsWith('/v1/responses'), 'the call did not go to /v1/responses', sent.at(-1));
    expect(typeof r.text === 'string' && r.text.trim().length > 0, 'the text is empty', r.text);
    expect(r.finishReason === 'stop', "finishReason is not 'stop'", r.finishReason);
    expect(r.usage?.inputTokens > 0 && r.usage.outputTokens > 0, 'usage has no token counts', r.usage);
  });
  console.log(`# the AI SDK sends: ${JSON.stringify(sent.at(-1)?.body)}`);

  await check('generateText with system and maxOutputTokens: cut at the limit (length)', async () => {
    const r = await generateText({ model: openai(model), system: '짧게 대답하세요.', prompt: PROMPT, maxOutputTokens: 3,
      temperature: 0, maxRetries: 0, providerOptions: {} });
    const body = sent.at(-1)?.body;
    expect(body?.max_output_tokens === 3, 'max_output_tokens was not sent', body);
    expect(r.finishReason === 'length' || (r.finishReason === 'stop' && r.usage?.outputTokens < 3),
      "finishReason is not 'length' at the limit", { finishReason: r.finishReason, usage: r.usage });
    expect(r.usage?.outputTokens <= 3, 'more output tokens than maxOutputTokens', r.usage);
  });

  await check('streamText: text deltas that make the text, a finish with usage', async () => {
    const r = streamText({ model: openai(model), prompt: PROMPT, temperature: 0, maxRetries: 0 });
    let text = '';
    let deltas = 0;
    for await (const d of r.textStream) {
      text += d;
      deltas++;
    }
    expect(deltas > 0 && text.trim().length > 0, 'no text streamed', text);
    expect(text === (await r.text), 'the deltas are not the text', text);
    expect((await r.finishReason) === 'stop', "finishReason is not 'stop'", await r.finishReason);
    const u = await r.usage;
    expect(u?.inputTokens > 0 && u.outputTokens > 0, 'usage has no token counts', u);
  });

  await check('openai.chat(id) without maxOutputTokens: a non-empty reply ending at the stop', async () => {
    const r = await generateText({ model: openai.chat(model), prompt: PROMPT, temperature: 0, maxRetries: 0 });
    const body = sent.at(-1)?.body;
    expect(sent.at(-1)?.url.endsWith('/v1/chat/completions') && body?.max_tokens == null,
      'not a chat call without max_tokens', sent.at(-1));
    expect(r.text.trim().length > 0 && r.finishReason === 'stop', 'an empty or cut reply',
      { text: r.text, finishReason: r.finishReason });
  });
}
