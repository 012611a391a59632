// langchain.mjs — LangChain's @langchain/openai against kogpt2d: the OpenAI (completions) LLM
// and the ChatOpenAI chat model, configured as a user of an OpenAI-compatible server would:
// configuration.baseURL, apiKey, model = the served id. Prints the bodies LangChain sends.
import { ChatOpenAI, OpenAI } from '@langchain/openai';
import { AIMessage, HumanMessage } from '@langchain/core/messages';
import { expect } from './lib.mjs';

export async function run({ checks, v1, model, key }) {
  const check = (name, body) => checks.check(`langchain: ${name}`, body);
  const seen = new Map(); // path -> the first body sent there, for the log
  const fetchTraced = (url, init) => {
    const p = new URL(String(url)).pathname + (/"stream":true/.test(init?.body || '') ? ' (stream)' : '');
    if (!seen.has(p) && typeof init?.body === 'string') {
      seen.set(p, init.body);
      console.log(`# LangChain sent POST ${p}: ${init.body}`);
    }
    return fetch(url, init);
  };
  const common = { model, apiKey: key, maxRetries: 0, timeout: 20000, temperature: 0, maxTokens: 12,
    configuration: { baseURL: v1, fetch: fetchTraced } };

  const llm = new OpenAI(common);
  await check('OpenAI (completions) .invoke() returns a string', async () => {
    const s = await llm.invoke('오늘은');
    expect(typeof s === 'string' && s.length > 0, 'not a non-empty string', s);
  });
  await check('OpenAI .generate([a, b]) returns one generation per prompt, in order', async () => {
    // echo (through modelKwargs) shows which prompt each generation belongs to
    const prompts = ['오늘은', '옛날 옛적에'];
    const r = await new OpenAI({ ...common, maxTokens: 4, modelKwargs: { echo: true } }).generate(prompts);
    expect(r.generations?.length === 2, 'not 2 generation lists', r.generations);
    prompts.forEach((p, i) => expect(r.generations[i]?.[0]?.text?.startsWith(p),
      `generation ${i} does not start with its prompt ${JSON.stringify(p)}`, r.generations[i]));
  });

  const chat = new ChatOpenAI(common);
  await check('ChatOpenAI .invoke([HumanMessage]) returns an AIMessage with string content', async () => {
    const m = await chat.invoke([new HumanMessage('오늘 날씨 어때요?')]);
    expect(AIMessage.isInstance(m), 'not an AIMessage', m?.constructor?.name);
    expect(typeof m.content === 'string', 'content is not a string', m.content);
  });
  await check('ChatOpenAI .stream() yields chunks with text, and usage_metadata', async () => {
    let n = 0, text = '', all = null;
    for await (const c of await chat.stream([new HumanMessage('안녕하세요?')])) {
      n++;
      expect(typeof c.content === 'string', 'a chunk content is not a string', c.content);
      text += c.content;
      all = all ? all.concat(c) : c;
    }
    expect(n > 0, 'no chunk');
    const finish = all.response_metadata?.finish_reason;
    expect(text.length > 0 || finish === 'stop', `no text in ${n} chunks, yet not stopped (${finish})`);
    expect(all.usage_metadata?.total_tokens > 0, 'no usage_metadata (stream_options.include_usage ignored?)',
      all.usage_metadata);
  });
}
