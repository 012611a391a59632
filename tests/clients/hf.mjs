// hf.mjs — Hugging Face's @huggingface/inference against kogpt2d with `endpointUrl` set to the
// daemon (issue 29, item 4). Its textGeneration posts {model: the endpoint URL, prompt, max_tokens,
// ...parameters} to <endpointUrl>/v1/completions (a 404 model_not_found before kogpt2d took
// its own URL as the served model); textGenerationStream posts the same with stream: true and
// yields the SSE chunks as they come. The TGI routes themselves (/generate, /generate_stream,
// /info) are checked in tests/test_server_tgi_sagemaker.py; this is the client as users call it.
import { InferenceClient, textGeneration, textGenerationStream } from '@huggingface/inference';
import { expect, short } from './lib.mjs';

const INPUTS = '오늘 날씨는';

export async function run({ checks, key, daemonUrl }) {
  const check = (name, body) => checks.check(`hf: ${name}`, body);
  const args = { endpointUrl: daemonUrl, accessToken: key, inputs: INPUTS };

  await check('textGeneration (endpointUrl): generated_text, greedy and repeatable', async () => {
    const params = { max_new_tokens: 8, do_sample: false, temperature: 0 };
    const a = await textGeneration({ ...args, parameters: params });
    const b = await textGeneration({ ...args, parameters: params });
    expect(typeof a.generated_text === 'string' && a.generated_text.length > 0,
      'no generated_text', a);
    expect(a.generated_text === b.generated_text, 'greedy text differs between calls', [a, b]);
  });

  await check('InferenceClient.endpoint(url).textGeneration', async () => {
    const client = new InferenceClient(key).endpoint(daemonUrl);
    const r = await client.textGeneration({ inputs: INPUTS, parameters: { max_new_tokens: 4 } });
    expect(typeof r.generated_text === 'string' && r.generated_text.length > 0,
      'no generated_text', r);
  });

  await check('textGenerationStream (endpointUrl): chunks whose texts make the text', async () => {
    const params = { max_new_tokens: 8, temperature: 0 };
    const whole = await textGeneration({ ...args, parameters: params });
    const chunks = [];
    for await (const c of textGenerationStream({ ...args, parameters: params })) chunks.push(c);
    expect(chunks.length >= 2, 'fewer than 2 chunks', chunks);
    const text = chunks.map((c) => c.choices?.[0]?.text ?? '').join('');
    expect(text === whole.generated_text, `streamed ${short(text)} != ${short(whole.generated_text)}`,
      chunks.slice(-2));
  });

  await check('a bad parameter is the client\'s ProviderApiError: 422, the body naming it', async () => {
    let err = null;
    try {
      await textGeneration({ ...args, parameters: { max_new_tokens: 4, temperature: -1 } });
    } catch (e) {
      err = e;
    }
    const r = err?.httpResponse;
    expect(err?.name === 'ProviderApiError' && r?.status === 422, 'not a 422 ProviderApiError',
      String(err));
    expect(r.body?.error?.param === 'temperature', 'the body does not name temperature', r.body);
  });
}
