// e2e.mjs — the official OpenAI Node SDK as a real client of llm170's HTTP API.
// Run by tests/test_openai_sdk.sh (real daemon + stories260K) and
// tests/test_gateway_sdk.sh (the HTTP layer over a fake backend).
// Prints "ok - name" / "not ok - name" / "skip - name: why" lines.
//
// env: BASE_URL (http://127.0.0.1:PORT), API_KEY, SDK_DIR (where node_modules/openai is),
//      GOLDEN (stories260K.golden.json: greedy text to compare with; absent → shape checks only),
//      MODEL (the served model name, "" = any), FAKE=1 (the fake backend's conventions)
import { createRequire } from 'node:module';
import { tcase as runCase, assert, finish } from '../sdk_cases.mjs';
import http from 'node:http';
import fs from 'node:fs';

const require = createRequire(process.env.SDK_DIR + '/package.json');
const OpenAIMod = require('openai');
const OpenAI = OpenAIMod.default || OpenAIMod;

const BASE = process.env.BASE_URL;
const KEY = process.env.API_KEY || 'none';
const FAKE = process.env.FAKE === '1';
const client = new OpenAI({ baseURL: BASE + '/v1', apiKey: KEY, maxRetries: 0, timeout: 60000 });
let MODEL = process.env.MODEL || '';

const tcase = (name, fn) => runCase("", name, fn);
function eq(a, b, msg) { if (a !== b) throw new Error(`${msg}: got ${JSON.stringify(a)}, want ${JSON.stringify(b)}`); }

// The greedy continuation of "Once upon a time" from the data's own golden file.
let goldenCont = null;
if (process.env.GOLDEN && fs.existsSync(process.env.GOLDEN)) {
  const g = JSON.parse(fs.readFileSync(process.env.GOLDEN, 'utf8'));
  const c = g.cases.find((x) => x.prompt === 'Once upon a time');
  if (c) goldenCont = c.text.slice('Once upon a time'.length);
}
const PROMPT = 'Once upon a time';

// raw HTTP for what an SDK will not send (bad JSON, bad UTF-8, huge bodies)
function raw(path, { method = 'POST', body = null, headers = {}, auth = true, bigBytes = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const u = new URL(BASE + path);
    const h = { 'Content-Type': 'application/json', ...headers };
    if (auth) h['Authorization'] = 'Bearer ' + KEY;
    if (bigBytes) h['Content-Length'] = String(bigBytes);
    else if (body !== null) h['Content-Length'] = String(Buffer.byteLength(body));
    const req = http.request({ host: u.hostname, port: u.port, path: u.pathname, method, headers: h }, (res) => {
      const chunks = [];
      res.on('data', (d) => chunks.push(d));
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8');
        let json = null;
        try { json = JSON.parse(text); } catch { /* not JSON */ }
        resolve({ status: res.statusCode, text, json, headers: res.headers });
      });
    });
    req.on('error', (e) => (bigBytes ? resolve({ status: -1, error: e }) : reject(e)));
    if (bigBytes) {
      // stream a huge body until the server answers (it should not read it all)
      const chunk = Buffer.alloc(1 << 20, 0x61);
      let sent = 0;
      const pump = () => {
        while (sent < bigBytes) {
          sent += chunk.length;
          if (!req.write(chunk)) return req.once('drain', pump);
        }
        req.end();
      };
      req.on('response', () => { sent = bigBytes; });
      pump();
    } else {
      if (body !== null) req.write(body);
      req.end();
    }
  });
}

function expectError(r, status, type, needle) {
  eq(r.status, status, `HTTP status (body ${r.text})`);
  assert(r.json && r.json.error, `no error object: ${r.text}`);
  assert(typeof r.json.error.message === 'string' && r.json.error.message.length > 0, 'error.message');
  if (type) eq(r.json.error.type, type, 'error.type');
  assert('code' in r.json.error, 'error.code missing');
  if (needle) assert(r.json.error.message.toLowerCase().includes(needle.toLowerCase()), `message "${r.json.error.message}" lacks "${needle}"`);
}

async function sdkError(fn) {
  try { await fn(); } catch (e) { return e; }
  throw new Error('the call succeeded; an error was expected');
}

async function metricValue(name) {
  const r = await raw('/metrics', { method: 'GET' });
  const m = r.text.match(new RegExp('^' + name + ' (\\S+)$', 'm'));
  return m ? Number(m[1]) : NaN;
}

await tcase('models_list', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert(ids.length >= 1, 'no models');
  if (!MODEL) MODEL = ids[0];
  eq(list.data[0].object, 'model', 'object');
  const one = await client.models.retrieve(MODEL);
  eq(one.id, MODEL, 'models.retrieve');
  const e = await sdkError(() => client.models.retrieve('no-such-model'));
  eq(e.status, 404, 'retrieve unknown');
});

let greedyCompletion = '';
await tcase('completion_greedy', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0 });
  eq(r.object, 'text_completion', 'object');
  assert(r.id && r.id.length > 4, 'id');
  assert(Number.isInteger(r.created), 'created');
  const c = r.choices[0];
  assert(typeof c.text === 'string' && c.text.length > 0, 'empty text');
  assert(['stop', 'length'].includes(c.finish_reason), 'finish_reason ' + c.finish_reason);
  eq(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'usage total');
  assert(r.usage.completion_tokens <= 24 && r.usage.completion_tokens > 0, 'completion_tokens ' + r.usage.completion_tokens);
  greedyCompletion = c.text;
  if (goldenCont) {
    assert(goldenCont.startsWith(c.text), `greedy text ${JSON.stringify(c.text)} is not a prefix of the golden ${JSON.stringify(goldenCont)}`);
    eq(c.finish_reason, 'length', 'finish_reason');
    eq(r.usage.completion_tokens, 24, 'completion_tokens');
  }
});
// the real model without its golden: the text above was not compared; say so as a case line
if (!FAKE && !goldenCont) console.log(`skip - completion_greedy_golden: no golden continuation in GOLDEN=${process.env.GOLDEN || '(unset)'}`);

await tcase('completion_stream_matches', async () => {
  const stream = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, n = 0;
  for await (const ch of stream) {
    n++;
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) { text += c.text || ''; if (c.finish_reason) finish = c.finish_reason; }
  }
  assert(n >= 2, 'too few chunks: ' + n);
  if (!FAKE) eq(text, greedyCompletion, 'streamed text vs non-streamed');
  assert(finish === 'length' || finish === 'stop', 'finish ' + finish);
  assert(usage && usage.completion_tokens > 0 && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens, 'usage chunk ' + JSON.stringify(usage));
});

await tcase('chat', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: [{ type: 'text', text: 'Tell me a story.' }] }], max_tokens: 16, temperature: 0 });
  eq(r.object, 'chat.completion', 'object');
  eq(r.choices[0].message.role, 'assistant', 'role');
  assert(typeof r.choices[0].message.content === 'string', 'content');
  assert(['stop', 'length'].includes(r.choices[0].finish_reason), 'finish_reason');
  assert(r.usage.prompt_tokens > 0, 'prompt_tokens');
});

await tcase('chat_tools_and_template_kwargs', async () => {
  // the whole chat request (tools, tool calls, tool results, template kwargs) reaches the template
  const r = await client.chat.completions.create({
    model: MODEL, max_tokens: 4, temperature: 0,
    tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: '22C' }],
    chat_template_kwargs: { enable_thinking: false },
  });
  eq(r.object, 'chat.completion', 'object');
  if (!FAKE) assert(r.usage.prompt_tokens > 10, 'prompt_tokens ' + r.usage.prompt_tokens);
});

// tool calls: the fake backend answers "TOOLCALL2" with text and two calls in Qwen's format;
// the SDK's own stream helper reassembles the delta.tool_calls pieces
const TOOLS = [
  { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string' } } } } }];
const callsOf = (m) => (m.tool_calls || []).map((c) => `${c.type}:${c.function.name}(${c.function.arguments})`).join(' ');
await tcase('tool_calls', async () => {
  if (!FAKE) return 'skip:needs a model whose calls are predictable (runs over the fake backend)';
  const want = 'function:get_weather({"city":"Paris"}) function:get_time({"tz":"CET"})';
  for (const tool_choice of ['auto', 'required']) {
    const r = await client.chat.completions.create({ model: MODEL, tools: TOOLS, tool_choice, messages: [{ role: 'user', content: 'TOOLCALL2' }] });
    eq(r.choices[0].finish_reason, 'tool_calls', 'finish_reason');
    eq(callsOf(r.choices[0].message), want, 'tool_calls (' + tool_choice + ')');
    eq(r.choices[0].message.content, 'I will check both.', 'content');
    assert(r.choices[0].message.tool_calls.every((c) => /^call_[A-Za-z0-9]{24}$/.test(c.id)), 'call ids');
  }
  const named = await client.chat.completions.create({ model: MODEL, tools: TOOLS, messages: [{ role: 'user', content: 'TOOLCALL' }],
    tool_choice: { type: 'function', function: { name: 'get_weather' } }, parallel_tool_calls: false });
  eq(callsOf(named.choices[0].message), 'function:get_weather({"city":"Paris"})', 'named');
  eq(named.choices[0].message.content, null, 'content of a reply that only calls');
  const stream = client.beta.chat.completions.stream({ model: MODEL, tools: TOOLS, tool_choice: 'required', messages: [{ role: 'user', content: 'TOOLCALL2' }] });
  const fin = await stream.finalChatCompletion();
  eq(fin.choices[0].finish_reason, 'tool_calls', 'streamed finish_reason');
  eq(callsOf(fin.choices[0].message), want, 'streamed tool_calls reassembled by the SDK');
  eq(fin.choices[0].message.content, 'I will check both.', 'streamed content');
});
await tcase('tool_choice_errors', async () => {
  const e = await sdkError(() => client.chat.completions.create({ model: MODEL, tools: TOOLS, messages: [{ role: 'user', content: 'x' }],
    tool_choice: { type: 'function', function: { name: 'launch' } } }));
  eq(e.status, 400, 'status');
  assert(/launch/.test(e.message), 'message ' + e.message);
  const r = await client.chat.completions.create({ model: MODEL, tools: TOOLS, tool_choice: 'required', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] });
  eq(r.object, 'chat.completion', 'required is accepted');
});

await tcase('chat_stream', async () => {
  const stream = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12, temperature: 0, stream: true });
  let text = '', role = null, finish = null;
  for await (const ch of stream) {
    eq(ch.object, 'chat.completion.chunk', 'object');
    const d = ch.choices[0]?.delta || {};
    if (d.role) role = d.role;
    if (d.content) text += d.content;
    if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
  }
  eq(role, 'assistant', 'role');
  assert(finish, 'no finish_reason');
  const again = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 12, temperature: 0 });
  if (!FAKE) eq(text, again.choices[0].message.content, 'stream vs non-stream (greedy)');
});

await tcase('n_2', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 12, temperature: 1.0, seed: 7, n: 2 });
  eq(r.choices.length, 2, 'choices');
  eq(r.choices[0].index, 0, 'index 0');
  eq(r.choices[1].index, 1, 'index 1');
  const s = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 8, n: 2, stream: true });
  const seen = new Set();
  for await (const ch of s) for (const c of ch.choices) if (c.finish_reason) seen.add(c.index);
  eq(seen.size, 2, 'both choices finished in the stream');
});

await tcase('seed_reproducible', async () => {
  const a = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 1.0, seed: 1234 });
  const b = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 1.0, seed: 1234 });
  eq(a.choices[0].text, b.choices[0].text, 'same seed, same text');
  const outs = new Set([a.choices[0].text]);
  for (const seed of [1, 2, 3, 4]) {
    const c = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 16, temperature: 1.5, seed });
    outs.add(c.choices[0].text);
  }
  assert(outs.size > 1, 'five seeds gave one text: the seed is not used');
});

await tcase('stop_strings', async () => {
  if (FAKE) return 'skip:needs the real model';
  // a word from the middle of the greedy text; the answer stops right before it
  const words = greedyCompletion.split(' ').filter((w) => w.length >= 3);
  assert(words.length >= 3, 'greedy text too short: ' + JSON.stringify(greedyCompletion));
  const stop = words[Math.floor(words.length / 2)];
  const cut = greedyCompletion.slice(0, greedyCompletion.indexOf(stop));
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, stop: [stop, 'zzzz'] });
  eq(r.choices[0].text, cut, `text with stop "${stop}"`);
  eq(r.choices[0].finish_reason, 'stop', 'finish_reason');
  const s = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 24, temperature: 0, stop, stream: true });
  let text = '';
  for await (const ch of s) text += ch.choices[0]?.text || '';
  eq(text, cut, 'streamed text with the stop string');
  assert(!text.includes(stop), 'the stop string leaked into the stream');
});

await tcase('logprobs', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs?.content;
  assert(Array.isArray(lp) && lp.length === r.usage.completion_tokens, 'one entry per token: ' + JSON.stringify(r.choices[0].logprobs));
  for (const e of lp) {
    assert(typeof e.token === 'string' && e.logprob <= 0, 'entry ' + JSON.stringify(e));
    eq(e.top_logprobs.length, 3, 'top_logprobs');
    for (let i = 1; i < 3; i++) assert(e.top_logprobs[i - 1].logprob >= e.top_logprobs[i].logprob, 'top_logprobs not descending');
    if (!FAKE) assert(Math.abs(e.top_logprobs[0].logprob - e.logprob) < 1e-4, 'greedy token is not the top alternative');
  }
  const c = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 4, temperature: 0, logprobs: 2 });
  const l = c.choices[0].logprobs;
  assert(l && l.tokens.length === l.token_logprobs.length && l.top_logprobs.length === l.tokens.length, 'legacy logprobs ' + JSON.stringify(l));
});

await tcase('logit_bias', async () => {
  if (FAKE) return 'skip:needs the real model';
  // ban the greedy first token (its id: the token after the prompt's in the whole text)
  const t1 = await raw('/tokenize', { body: JSON.stringify({ content: PROMPT }) });
  const t2 = await raw('/tokenize', { body: JSON.stringify({ content: PROMPT + greedyCompletion }) });
  assert(t1.status === 200 && t2.status === 200, 'tokenize: ' + t1.text + ' ' + t2.text);
  const first = t2.json.tokens[t1.json.tokens.length];
  assert(Number.isInteger(first), 'no first token');
  const r = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, logit_bias: { [first]: -100 } });
  assert(!greedyCompletion.startsWith(r.choices[0].text), `banned token ${first} still first: ${JSON.stringify(r.choices[0].text)}`);
  // the array form with a text key bans the same way (the text is tokenized)
  const piece = await raw('/detokenize', { body: JSON.stringify({ tokens: [first] }) });
  const r2 = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, logit_bias: [[piece.json.content, false]] });
  assert(!greedyCompletion.startsWith(r2.choices[0].text), `banned text ${JSON.stringify(piece.json.content)} still first`);
});

// response_format json_schema: at temperature 1 the sampler alone would write stories; the
// schema's grammar makes every seed's answer parse and hold to it
const RF_SCHEMA = {
  type: 'object',
  properties: {
    mood: { type: 'string', enum: ['happy', 'sad', 'brave'] },
    age: { type: 'integer' },
    flags: { type: 'array', items: { type: 'boolean' }, maxItems: 3 },
  },
  required: ['mood', 'age', 'flags'],
  additionalProperties: false,
};
function rfViolation(v) { // '' when v holds to RF_SCHEMA, else what is wrong
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return 'not an object';
  const keys = Object.keys(v).sort().join(',');
  if (keys !== 'age,flags,mood') return 'keys ' + keys;
  if (!RF_SCHEMA.properties.mood.enum.includes(v.mood)) return 'mood ' + JSON.stringify(v.mood);
  if (!Number.isInteger(v.age)) return 'age ' + JSON.stringify(v.age);
  if (!Array.isArray(v.flags) || v.flags.length > 3 || !v.flags.every((x) => typeof x === 'boolean')) return 'flags ' + JSON.stringify(v.flags);
  return '';
}
await tcase('response_format_json_schema', async () => {
  if (FAKE) return 'skip:needs the real model (the fake backend does not sample)';
  const rf = { type: 'json_schema', json_schema: { name: 'character', strict: true, schema: RF_SCHEMA } };
  const texts = new Set();
  for (const seed of [1, 2, 3, 4, 5]) {
    const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Describe a character.' }],
      max_tokens: 200, temperature: 1.0, seed, response_format: rf });
    const c = r.choices[0];
    let v;
    try { v = JSON.parse(c.message.content); } catch (e) { throw new Error(`seed ${seed}: not JSON: ${JSON.stringify(c.message.content)}`); }
    const bad = rfViolation(v);
    assert(!bad, `seed ${seed}: ${bad} in ${c.message.content}`);
    eq(c.finish_reason, 'stop', `seed ${seed}: finish_reason`);
    texts.add(c.message.content);
  }
  assert(texts.size > 1, 'five seeds at temperature 1 gave one answer: the seed is not used');
  // the check above can fail: the same request without the schema is not such an object
  const free = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Describe a character.' }],
    max_tokens: 40, temperature: 1.0, seed: 1 });
  let fv = null;
  try { fv = JSON.parse(free.choices[0].message.content); } catch { /* prose */ }
  assert(fv === null || rfViolation(fv), 'the model answers the schema unasked: ' + free.choices[0].message.content);
});
await tcase('response_format_unsupported_keyword', async () => {
  const schema = { type: 'object', properties: { name: { type: 'string' } }, minProperties: 1 };
  const e = await sdkError(() => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 't', schema } } }));
  assert(e instanceof OpenAI.BadRequestError, 'BadRequestError: ' + e);
  eq(e.status, 400, 'status');
  assert(/minProperties/.test(e.message), 'message does not name the keyword: ' + e.message);
  eq(e.param, 'response_format', 'param');
});

await tcase('tokenize_detokenize', async () => {
  const t = await raw('/tokenize', { body: JSON.stringify({ content: PROMPT }) });
  eq(t.status, 200, 'tokenize status');
  const d = await raw('/detokenize', { body: JSON.stringify({ tokens: t.json.tokens }) });
  eq(d.status, 200, 'detokenize status');
  if (!FAKE) eq(d.json.content.trim(), PROMPT, 'round trip');
});

// ---- bad input: the right status and message
await tcase('bad_json', async () => expectError(await raw('/v1/chat/completions', { body: '{"messages": [' }), 400, 'invalid_request_error', 'json'));
await tcase('wrong_types', async () => {
  const e = await sdkError(() => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }));
  eq(e.status, 400, 'SDK error status');
  assert(/temperature/.test(e.message), 'message: ' + e.message);
  expectError(await raw('/v1/completions', { body: JSON.stringify({ prompt: PROMPT, max_tokens: 'ten' }) }), 400, 'invalid_request_error', 'max_tokens');
  expectError(await raw('/v1/chat/completions', { body: JSON.stringify({ messages: 'hi' }) }), 400, 'invalid_request_error', 'messages');
});
await tcase('invalid_utf8', async () => {
  const body = Buffer.concat([Buffer.from('{"prompt":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]);
  expectError(await raw('/v1/completions', { body }), 400, 'invalid_request_error', 'utf-8');
});
await tcase('body_100mb', async () => {
  const r = await raw('/v1/completions', { bigBytes: 100 * 1024 * 1024 });
  if (r.status === -1) throw new Error('connection failed before a response: ' + r.error);
  expectError(r, 413, null, 'too large');
});
await tcase('embeddings', async () => {
  const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
  // the SDK asks for base64 unless told otherwise, and decodes it to floats
  const r = await client.embeddings.create({ model: MODEL, input: [PROMPT, 'The end.'] });
  eq(r.object, 'list', 'object');
  eq(r.data.length, 2, 'data length');
  eq(r.data[1].index, 1, 'index');
  eq(r.data[0].object, 'embedding', 'data object');
  assert(Array.isArray(r.data[0].embedding) && r.data[0].embedding.length > 0, 'embedding is not decoded to numbers');
  assert(Math.abs(norm(r.data[0].embedding) - 1) < 1e-5, 'not unit length: ' + norm(r.data[0].embedding));
  assert(r.usage.prompt_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens, 'usage ' + JSON.stringify(r.usage));
  const f = await client.embeddings.create({ model: MODEL, input: PROMPT, encoding_format: 'float' });
  eq(f.data.length, 1, 'one input');
  assert(f.data[0].embedding.every((x, i) => Math.fround(x) === r.data[0].embedding[i]), 'float and base64 differ');
  const d = await client.embeddings.create({ model: MODEL, input: PROMPT, dimensions: 4, encoding_format: 'float' });
  eq(d.data[0].embedding.length, 4, 'dimensions');
  assert(Math.abs(norm(d.data[0].embedding) - 1) < 1e-5, 'dimensions: not re-normalised');
  const e = await sdkError(() => client.embeddings.create({ model: MODEL, input: PROMPT, dimensions: 1 << 20 }));
  eq(e.status, 400, 'dimensions beyond the model');
  const e2 = await sdkError(() => client.embeddings.create({ model: MODEL, input: '' }));
  eq(e2.status, 400, 'empty input');
});
await tcase('prompt_longer_than_context', async () => {
  const long = 'Once upon a time there was a little girl. '.repeat(1200); // far beyond stories260K's context
  const r = await raw('/v1/completions', { body: JSON.stringify({ model: MODEL, prompt: long, max_tokens: 4 }) });
  expectError(r, 400, null, 'context');
  const e = await sdkError(() => client.completions.create({ model: MODEL, prompt: long, max_tokens: 4 }));
  eq(e.status, 400, 'SDK status');
});
await tcase('unknown_model', async () => {
  const e = await sdkError(() => client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }));
  eq(e.status, 404, 'status');
  expectError(await raw('/v1/chat/completions', { body: JSON.stringify({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }) }), 404, 'not_found_error', 'no-such-model');
});
await tcase('api_key', async () => {
  expectError(await raw('/v1/models', { method: 'GET', auth: false }), 401, 'authentication_error', 'api key');
  const bad = new OpenAI({ baseURL: BASE + '/v1', apiKey: 'wrong-key', maxRetries: 0 });
  const e = await sdkError(() => bad.completions.create({ model: MODEL, prompt: 'x', max_tokens: 1 }));
  eq(e.status, 401, 'wrong key status');
  assert(e instanceof OpenAI.AuthenticationError, 'AuthenticationError');
  eq((await raw('/health', { method: 'GET', auth: false })).status, 200, 'health needs no key');
});
await tcase('client_vanishes_mid_stream', async () => {
  const ac = new AbortController();
  const stream = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 400, temperature: 1.0, ignore_eos: true, stream: true }, { signal: ac.signal });
  let got = 0;
  try {
    for await (const ch of stream) { got++; if (got === 2) ac.abort(); }
  } catch (e) { /* the abort */ }
  assert(got >= 2, 'no chunks before the abort');
  // the slot comes back: nothing in flight shortly after
  let inflight = NaN;
  for (let i = 0; i < 50; i++) {
    inflight = await metricValue(FAKE ? 'llm170_requests_in_flight' : 'llm170_active_slots');
    if (inflight === 0) break;
    await new Promise((res) => setTimeout(res, 100));
  }
  eq(inflight, 0, 'requests still running 5 s after the client left');
});
await tcase('health_metrics', async () => {
  eq((await raw('/health', { method: 'GET' })).status, 200, 'health');
  const m = await raw('/metrics', { method: 'GET' });
  eq(m.status, 200, 'metrics');
  for (const s of ['llm170_http_requests_total', 'llm170_completion_tokens_total', 'llm170_time_to_first_token_seconds_bucket', 'llm170_inter_token_seconds_bucket', 'llm170_queue_depth', 'llm170_worker_memory_bytes'])
    assert(m.text.includes(s), 'metrics lack ' + s);
});

finish();
