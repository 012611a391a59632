// metrics.mjs — /metrics after mixed traffic (a completion, a streamed one, a chat, a streamed
// chat, a 422): `promtool check metrics` (Debian's prometheus package) finds no problem, and the
// families issue 15 asks for are there with the right type and values that moved.
import fs from 'node:fs';
import { spawnSync } from 'node:child_process';
import { expect } from './lib.mjs';

// name -> [type, what a sample must satisfy]. Token counters carry endpoint="<path>", the
// label kogpt2_requests_total uses.
const NOW = () => Date.now() / 1000;
export const EXPECTED = {
  kogpt2_time_to_first_token_seconds: ['histogram', 'count > 0'],
  kogpt2_time_per_output_token_seconds: ['histogram', 'count > 0'],
  kogpt2_prompt_tokens_total: ['counter', 'endpoint="/v1/completions" and endpoint="/v1/chat/completions" > 0'],
  kogpt2_generated_tokens_total: ['counter', 'endpoint="/v1/completions" and endpoint="/v1/chat/completions" > 0'],
  process_resident_memory_bytes: ['gauge', '> 1 MB'],
  process_cpu_seconds_total: ['counter', '> 0'],
  process_open_fds: ['gauge', '> 0'],
  process_start_time_seconds: ['gauge', 'unix time within the last hour'],
};

// Prometheus text -> {types: name -> type, samples: [{name, labels, value}]}.
export function parseMetrics(text) {
  const types = {}, samples = [];
  for (const line of text.split('\n')) {
    let m = line.match(/^# TYPE (\S+) (\S+)/);
    if (m) { types[m[1]] = m[2]; continue; }
    if (!line || line.startsWith('#')) continue;
    m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    samples.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return { types, samples };
}

function checkFamily(name, [type], { types, samples }) {
  expect(types[name] === type, `# TYPE ${name} ${type} missing`, types[name] ?? 'no such family');
  const of = (n) => samples.filter((s) => s.name === n);
  if (type === 'histogram') {
    const count = of(name + '_count').reduce((a, s) => a + s.value, 0);
    expect(count > 0, `${name}_count is 0 after traffic`, of(name + '_count'));
    expect(of(name + '_bucket').some((s) => s.labels.le === '+Inf'), `${name} has no le="+Inf" bucket`);
    return;
  }
  const ss = of(name);
  expect(ss.length > 0, `${name} has no sample`);
  if (name.endsWith('_tokens_total')) {
    for (const ep of ['/v1/completions', '/v1/chat/completions']) {
      const v = ss.filter((s) => s.labels.endpoint === ep).reduce((a, s) => a + s.value, 0);
      expect(v > 0, `${name}{endpoint="${ep}"} is not > 0`, ss);
    }
  } else if (name === 'process_start_time_seconds') {
    expect(ss[0].value > NOW() - 3600 && ss[0].value <= NOW() + 5, 'not a unix time of the last hour', ss[0].value);
  } else if (name === 'process_resident_memory_bytes') {
    expect(ss[0].value > 1e6, 'not > 1 MB', ss[0].value);
  } else {
    expect(ss[0].value > 0, 'not > 0', ss[0].value);
  }
}

async function traffic(v1, key) {
  const post = (path, body) => fetch(`${v1}${path}`, { method: 'POST', body: JSON.stringify(body),
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` } }).then((r) => r.text());
  const msgs = [{ role: 'user', content: '안녕하세요?' }];
  await post('/completions', { prompt: '오늘은', max_tokens: 6 });
  await post('/completions', { prompt: '오늘은', max_tokens: 6, stream: true });
  await post('/chat/completions', { messages: msgs, max_tokens: 6 });
  await post('/chat/completions', { messages: msgs, max_tokens: 6, stream: true });
  await post('/completions', { prompt: '오늘은', max_tokens: 6, temperature: -1 }); // a 422
}

export async function run({ checks, v1, daemonUrl, key, promtool }) {
  const check = (name, body) => checks.check(`metrics: ${name}`, body);
  await traffic(v1, key);
  const text = await (await fetch(`${daemonUrl}/metrics`)).text();

  if (!promtool || !fs.existsSync(promtool)) {
    checks.skip('metrics: promtool check metrics', 'no promtool (apt-get install prometheus)');
  } else {
    await check('promtool check metrics finds no problem', async () => {
      const r = spawnSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8', timeout: 20000 });
      const said = `${r.stdout || ''}${r.stderr || ''}`.trim();
      expect(r.status === 0 && said === '', `promtool exited ${r.status ?? r.signal}: ${said || r.error}`);
    });
  }
  const parsed = parseMetrics(text);
  for (const [name, spec] of Object.entries(EXPECTED))
    await check(`${name} (${spec[0]}, ${spec[1]})`, async () => checkFamily(name, spec, parsed));
  const missing = Object.keys(EXPECTED).filter((n) => !parsed.types[n]);
  if (missing.length) console.log(`# metric families missing: ${missing.join(', ')}`);
}
