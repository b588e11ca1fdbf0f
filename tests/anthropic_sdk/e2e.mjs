// e2e.mjs — the official Anthropic Node SDK as a real client of llm170's
// Messages API (POST /v1/messages, /v1/messages/count_tokens).
// Run by tests/test_anthropic_sdk.sh twice: over `llm170 serve` on stories260K
// (greedy replies compared between calls) and over the fake backend
// (tests/tools/fake_gateway: scripted Qwen tool calls for the tool_use cases).
// Prints "ok - name" / "not ok - name" / "skip - name: why" lines.
//
// env: BASE_URL (http://127.0.0.1:PORT), API_KEY, SDK_DIR (where node_modules/@anthropic-ai/sdk is),
//      FAKE=1 (the fake backend's conventions), TAG (a prefix for the case names)
import { createRequire } from 'node:module';
import { tcase as runCase, assert, finish } from '../sdk_cases.mjs';

const require = createRequire(process.env.SDK_DIR + '/package.json');
const Mod = require('@anthropic-ai/sdk');
const Anthropic = Mod.default || Mod.Anthropic || Mod;

const BASE = process.env.BASE_URL;
const KEY = process.env.API_KEY || 'none';
const FAKE = process.env.FAKE === '1';
const TAG = process.env.TAG || (FAKE ? 'anthropic_sdk_fake' : 'anthropic_sdk');
const client = new Anthropic({ baseURL: BASE, apiKey: KEY, maxRetries: 0, timeout: 60000 });

const tcase = (name, fn) => runCase(TAG, name, fn);
function eq(a, b, msg) {
  const ja = JSON.stringify(a), jb = JSON.stringify(b);
  if (ja !== jb) throw new Error(`${msg}: got ${ja}, want ${jb}`);
}
async function sdkError(fn) {
  try { await fn(); } catch (e) { return e; }
  throw new Error('the call succeeded; an error was expected');
}
const textOf = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

// the served model's name, as a client would find it (GET /v1/models answers OpenAI's list)
let MODEL = 'fake-model';
if (!FAKE) {
  const r = await fetch(BASE + '/v1/models', { headers: { 'x-api-key': KEY } });
  const j = await r.json();
  MODEL = j.data[0].id;
}
const SYSTEM = 'Tell a story.';
const MESSAGES = [{ role: 'user', content: [{ type: 'text', text: 'Once upon a time' }] }];
const MAXT = 16;

let whole = null;
await tcase('create', async () => {
  const m = await client.messages.create({ model: MODEL, max_tokens: MAXT, temperature: 0, system: SYSTEM, messages: MESSAGES,
    metadata: { user_id: 'u1' } });
  eq(m.type, 'message', 'type');
  eq(m.role, 'assistant', 'role');
  assert(/^msg_/.test(m.id), 'id ' + m.id);
  eq(m.model, MODEL, 'model');
  eq(m.content.length, 1, 'one block');
  eq(m.content[0].type, 'text', 'block type');
  assert(m.content[0].text.length > 0, 'empty text');
  assert(['max_tokens', 'end_turn'].includes(m.stop_reason), 'stop_reason ' + m.stop_reason);
  eq(m.stop_sequence, null, 'stop_sequence');
  assert(m.usage.input_tokens > 0, 'usage.input_tokens ' + m.usage.input_tokens);
  assert(m.usage.output_tokens > 0 && m.usage.output_tokens <= MAXT, 'usage.output_tokens ' + m.usage.output_tokens);
  eq(m.stop_reason === 'max_tokens', m.usage.output_tokens === MAXT, 'stop_reason max_tokens iff the limit was used up');
  whole = m;
});

await tcase('stream', async () => {
  assert(whole, 'no non-streamed reply to compare with');
  const stream = client.messages.stream({ model: MODEL, max_tokens: MAXT, temperature: 0, system: SYSTEM, messages: MESSAGES });
  const names = [];
  let deltas = '';
  stream.on('streamEvent', (ev) => names.push(ev.type));
  stream.on('text', (d) => { deltas += d; });
  const fin = await stream.finalMessage();
  // the event sequence: message_start, one text block, message_delta, message_stop
  eq(names[0], 'message_start', 'first event');
  eq(names[1], 'content_block_start', 'second event');
  eq(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop'], 'last events');
  const mid = names.slice(2, -3);
  assert(mid.length >= 1 && mid.every((n) => n === 'content_block_delta'), 'middle events ' + names.join(','));
  // the SDK's accumulated message equals the whole reply (greedy: same text)
  eq(fin.content, whole.content, 'finalMessage content vs messages.create');
  eq(textOf(fin), deltas, 'text events vs finalMessage');
  eq(fin.stop_reason, whole.stop_reason, 'stop_reason');
  eq(fin.stop_sequence, null, 'stop_sequence');
  eq(fin.usage.output_tokens, whole.usage.output_tokens, 'usage.output_tokens');
  eq(fin.usage.input_tokens, whole.usage.input_tokens, 'usage.input_tokens (from message_delta)');
  assert(/^msg_/.test(fin.id), 'id ' + fin.id);
});

await tcase('count_tokens', async () => {
  assert(whole, 'no reply to compare with');
  const c = await client.messages.countTokens({ model: MODEL, system: SYSTEM, messages: MESSAGES });
  eq(c, { input_tokens: whole.usage.input_tokens }, 'countTokens vs the reply usage.input_tokens');
});

await tcase('stop_sequences', async () => {
  if (FAKE) return 'skip:needs the real model';
  assert(whole, 'no reply to cut');
  // a stop sequence from the middle of the greedy reply: the text ends right before it
  const t = textOf(whole);
  const stop = t.slice(Math.floor(t.length / 2), Math.floor(t.length / 2) + 3);
  assert(stop.length === 3, 'reply too short: ' + JSON.stringify(t));
  const cut = t.slice(0, t.indexOf(stop));
  const m = await client.messages.create({ model: MODEL, max_tokens: MAXT, temperature: 0, system: SYSTEM, messages: MESSAGES,
    stop_sequences: ['@@never@@', stop] });
  eq(m.stop_reason, 'stop_sequence', 'stop_reason');
  eq(m.stop_sequence, stop, 'stop_sequence');
  eq(textOf(m), cut, `text with stop ${JSON.stringify(stop)}`);
  const fin = await client.messages.stream({ model: MODEL, max_tokens: MAXT, temperature: 0, system: SYSTEM, messages: MESSAGES,
    stop_sequences: [stop] }).finalMessage();
  eq(fin.stop_reason, 'stop_sequence', 'streamed stop_reason');
  eq(fin.stop_sequence, stop, 'streamed stop_sequence');
  eq(textOf(fin), cut, 'streamed text');
});

// tool use: the fake backend answers "TOOLCALL" with one call and "TOOLCALL2" with text and two,
// in Qwen's <tool_call> format
const TOOLS = [
  { name: 'get_weather', description: 'The weather in a city', input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } },
  { name: 'get_time', input_schema: { type: 'object', properties: { tz: { type: 'string' } } } }];
const uses = (m) => m.content.filter((b) => b.type === 'tool_use').map((b) => `${b.name}(${JSON.stringify(b.input)})`).join(' ');
await tcase('tool_use_round_trip', async () => {
  if (!FAKE) {
    // the real model does not call tools predictably: a hand-made call and its result are accepted
    const m = await client.messages.create({ model: MODEL, max_tokens: 4, temperature: 0, tools: TOOLS, messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: '22C' }] }] });
    eq(m.type, 'message', 'follow-up type');
    assert(m.usage.input_tokens > 10, 'follow-up input_tokens ' + m.usage.input_tokens);
    return;
  }
  const ask = { role: 'user', content: 'TOOLCALL' };
  const m = await client.messages.create({ model: MODEL, max_tokens: 64, tools: TOOLS, messages: [ask] });
  eq(m.stop_reason, 'tool_use', 'stop_reason');
  eq(m.content.length, 1, 'blocks ' + JSON.stringify(m.content));
  const tu = m.content[0];
  eq(tu.type, 'tool_use', 'block type');
  assert(/^toolu_/.test(tu.id), 'tool_use id ' + tu.id);
  eq(tu.name, 'get_weather', 'name');
  eq(tu.input, { city: 'Paris' }, 'input');
  // the follow-up: the assistant's content as it came, then the tool_result
  const r = await client.messages.create({ model: MODEL, max_tokens: 4, tools: TOOLS, messages: [
    ask, { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: [{ type: 'text', text: '22C and sunny' }] }] }] });
  eq(r.type, 'message', 'follow-up type');
  assert(['end_turn', 'max_tokens'].includes(r.stop_reason), 'follow-up stop_reason ' + r.stop_reason);
  assert(textOf(r).length > 0, 'follow-up text');
  // an error result is accepted too
  const r2 = await client.messages.create({ model: MODEL, max_tokens: 4, tools: TOOLS, messages: [
    ask, { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: tu.id, content: 'no network', is_error: true }] }] });
  eq(r2.type, 'message', 'is_error follow-up');
  // a tool_result naming no id is refused
  const e = await sdkError(() => client.messages.create({ model: MODEL, max_tokens: 4, messages: [
    ask, { role: 'user', content: [{ type: 'tool_result', content: 'x' }] }] }));
  assert(e instanceof Anthropic.BadRequestError, 'BadRequestError: ' + e);
  assert(/tool_use_id/.test(e.message), 'message ' + e.message);
});

await tcase('tool_use_two_calls_streamed', async () => {
  if (!FAKE) return 'skip:needs a model whose calls are predictable (runs over the fake backend)';
  const want = 'get_weather({"city":"Paris"}) get_time({"tz":"CET"})';
  const m = await client.messages.create({ model: MODEL, max_tokens: 64, tools: TOOLS, tool_choice: { type: 'any' },
    messages: [{ role: 'user', content: 'TOOLCALL2' }] });
  eq(m.stop_reason, 'tool_use', 'stop_reason');
  eq(m.content.map((b) => b.type), ['text', 'tool_use', 'tool_use'], 'block types');
  eq(textOf(m), 'I will check both.', 'text');
  eq(uses(m), want, 'tool_use blocks');
  // streamed: the SDK builds the inputs from input_json_delta
  const stream = client.messages.stream({ model: MODEL, max_tokens: 64, tools: TOOLS, messages: [{ role: 'user', content: 'TOOLCALL2' }] });
  const deltas = [];
  stream.on('streamEvent', (ev) => { if (ev.type === 'content_block_delta') deltas.push(ev.delta.type); });
  const fin = await stream.finalMessage();
  eq(fin.stop_reason, 'tool_use', 'streamed stop_reason');
  eq(fin.content.map((b) => b.type), ['text', 'tool_use', 'tool_use'], 'streamed block types');
  eq(textOf(fin), 'I will check both.', 'streamed text');
  eq(uses(fin), want, 'streamed tool_use inputs (from input_json_delta)');
  assert(deltas.includes('input_json_delta') && deltas.includes('text_delta'), 'delta types ' + deltas.join(','));
  // a named tool the request does not offer is refused
  const e = await sdkError(() => client.messages.create({ model: MODEL, max_tokens: 4, tools: TOOLS,
    tool_choice: { type: 'tool', name: 'launch' }, messages: [{ role: 'user', content: 'x' }] }));
  assert(e instanceof Anthropic.BadRequestError, 'BadRequestError: ' + e);
});

await tcase('authentication_error', async () => {
  const bad = new Anthropic({ baseURL: BASE, apiKey: 'wrong-key', maxRetries: 0 });
  const e = await sdkError(() => bad.messages.create({ model: MODEL, max_tokens: 2, messages: MESSAGES }));
  assert(e instanceof Anthropic.AuthenticationError, 'AuthenticationError: ' + e);
  eq(e.status, 401, 'status');
  eq(e.type, 'authentication_error', 'error.type');
  const e2 = await sdkError(() => bad.messages.countTokens({ model: MODEL, messages: MESSAGES }));
  assert(e2 instanceof Anthropic.AuthenticationError, 'countTokens: AuthenticationError: ' + e2);
});

await tcase('bad_request_errors', async () => {
  // an image block (not supported) → 400 invalid_request_error naming it
  const e = await sdkError(() => client.messages.create({ model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: [
    { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } }] }] }));
  assert(e instanceof Anthropic.BadRequestError, 'BadRequestError: ' + e);
  eq(e.status, 400, 'status');
  eq(e.type, 'invalid_request_error', 'error.type');
  assert(/image/.test(e.apiMessage || ''), 'message ' + e.apiMessage);
  // max_tokens 0 (the SDK's types allow any number)
  const e2 = await sdkError(() => client.messages.create({ model: MODEL, max_tokens: 0, messages: MESSAGES }));
  assert(e2 instanceof Anthropic.BadRequestError, 'max_tokens 0: BadRequestError: ' + e2);
  assert(/max_tokens/.test(e2.message), 'message ' + e2.message);
  // an unknown model → 404 not_found_error
  const e3 = await sdkError(() => client.messages.create({ model: 'no-such-model', max_tokens: 4, messages: MESSAGES }));
  assert(e3 instanceof Anthropic.NotFoundError, 'NotFoundError: ' + e3);
  eq(e3.type, 'not_found_error', 'error.type');
  assert(/no-such-model/.test(e3.message), 'message ' + e3.message);
  // streamed: the error comes before any event, as the SDK's exception
  const e4 = await sdkError(() => client.messages.stream({ model: 'no-such-model', max_tokens: 4, messages: MESSAGES }).finalMessage());
  assert(e4 instanceof Anthropic.NotFoundError, 'streamed NotFoundError: ' + e4);
});

finish();
