// Parley's OpenAI-compatible API driven by the official `openai` npm client, against a real
// `parley serve` whose model is the fake upstream of provider/llmtest (its deterministic demo
// brain: it calls a tool named "calculator" for arithmetic when one is offered, and otherwise
// echoes the question). cmd/parley's TestOpenAISDKInterop starts both and runs this with:
//
//   PARLEY_URL        the server, e.g. http://127.0.0.1:41234
//   PARLEY_KEY_ALICE  an API key of alice; PARLEY_KEY_BOB one of bob
//   PARLEY_MODEL      the default model ("openai/gpt-4o-mini")
//
// The server runs with --auth keys and a guest rate of 2 requests per hour, so that requests
// with a bad key reach the rate limit (429) after two 401s.
//
// Each step prints "ok <step>"; the first failed assertion exits non-zero.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const base = process.env.PARLEY_URL;
const model = process.env.PARLEY_MODEL;
const aliceKey = process.env.PARLEY_KEY_ALICE;
const bobKey = process.env.PARLEY_KEY_BOB;
assert.ok(base && model && aliceKey && bobKey, 'PARLEY_URL, PARLEY_MODEL, PARLEY_KEY_ALICE and PARLEY_KEY_BOB are required');

const client = (apiKey) => new OpenAI({ baseURL: `${base}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
const alice = client(aliceKey);
const bob = client(bobKey);

const steps = [];
const step = (name, fn) => steps.push([name, fn]);

// expectError runs fn and checks it throws the SDK's error class cls with status, and an
// OpenAI-shaped error object (type, code, param present).
async function expectError(cls, status, fn) {
  try {
    await fn();
  } catch (err) {
    assert.ok(err instanceof cls, `want ${cls.name}, got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, status);
    assert.ok(err.error && typeof err.error.message === 'string' && err.error.message.length > 0, 'error.message');
    assert.ok(typeof err.type === 'string' && err.type.length > 0, 'error.type');
    assert.ok('param' in err && 'code' in err, 'error.param and error.code');
    return err;
  }
  assert.fail(`want ${cls.name}, got success`);
}

// native calls Parley's own API as alice.
async function native(method, path, body) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { Authorization: `Bearer ${aliceKey}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  assert.ok(res.ok, `${method} ${path}: ${res.status}`);
  return res;
}

const calculator = {
  type: 'function',
  function: {
    name: 'calculator',
    description: 'Evaluates an arithmetic expression.',
    parameters: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
  },
};

// The caller's own calculator: + - * / and parentheses over integers.
function evaluate(expr) {
  assert.match(expr, /^[0-9+\-*/() .]+$/);
  return String(Function(`"use strict"; return (${expr});`)());
}

step('list models', async () => {
  const ids = [];
  for await (const m of alice.models.list()) {
    assert.equal(m.object, 'model');
    assert.equal(typeof m.owned_by, 'string');
    ids.push(m.id);
  }
  assert.ok(ids.includes(model), `models ${ids} lack ${model}`);
});

let wholeText;
step('non-streaming chat', async () => {
  const c = await alice.chat.completions.create({ model, messages: [{ role: 'user', content: 'Say something nice' }] });
  assert.equal(c.object, 'chat.completion');
  assert.match(c.id, /^chatcmpl-/);
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].finish_reason, 'stop');
  assert.equal(c.choices[0].message.role, 'assistant');
  assert.match(c.choices[0].message.content, /^You said: Say something nice/);
  assert.ok(c.usage.total_tokens > 0 && c.usage.total_tokens === c.usage.prompt_tokens + c.usage.completion_tokens);
  wholeText = c.choices[0].message.content;
});

step('streaming chat with usage', async () => {
  const stream = await alice.chat.completions.create({
    model, stream: true, stream_options: { include_usage: true },
    messages: [{ role: 'user', content: 'Say something nice' }],
  });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) {
      assert.equal(chunk.choices.length, 0, 'the usage chunk has no choices');
      usage = chunk.usage;
      continue;
    }
    assert.equal(usage, null, 'nothing after the usage chunk');
    const ch = chunk.choices[0];
    text += ch.delta.content ?? '';
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.ok(chunks > 3, `only ${chunks} chunks`);
  assert.equal(text, wholeText);
  assert.equal(finish, 'stop');
  assert.ok(usage && usage.total_tokens > 0);
  // The SDK's own stream helper assembles the same answer.
  const runner = alice.chat.completions.stream({ model, messages: [{ role: 'user', content: 'Say something nice' }] });
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, wholeText);
});

step('client-side tool call round trip', async () => {
  const messages = [{ role: 'user', content: 'What is 12*(3+4)?' }];
  const first = await alice.chat.completions.create({ model, messages, tools: [calculator] });
  assert.equal(first.choices[0].finish_reason, 'tool_calls');
  const msg = first.choices[0].message;
  assert.equal(msg.tool_calls.length, 1);
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'calculator');
  const { expression } = JSON.parse(call.function.arguments);
  assert.equal(expression, '12*(3+4)');
  messages.push(msg, { role: 'tool', tool_call_id: call.id, content: evaluate(expression) });
  const second = await alice.chat.completions.create({ model, messages, tools: [calculator] });
  assert.equal(second.choices[0].finish_reason, 'stop');
  assert.equal(second.choices[0].message.content, '12*(3+4) = 84.');

  // Streamed: the call arrives in deltas that assemble to the same call.
  const stream = await alice.chat.completions.create({ model, stream: true, messages: messages.slice(0, 1), tools: [calculator] });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    for (const ch of chunk.choices) {
      for (const d of ch.delta.tool_calls ?? []) {
        calls[d.index] ??= { id: '', name: '', arguments: '' };
        if (d.id) calls[d.index].id = d.id;
        if (d.function?.name) calls[d.index].name = d.function.name;
        calls[d.index].arguments += d.function?.arguments ?? '';
      }
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'calculator');
  assert.deepEqual(JSON.parse(calls[0].arguments), { expression: '12*(3+4)' });
});

step("Parley's own tools, with tool activity", async () => {
  const c = await alice.chat.completions.create({
    model, messages: [{ role: 'user', content: 'What is 2+3?' }],
    parley: { tool_activity: true },
  });
  assert.equal(c.choices[0].message.content, '2+3 = 5.');
  assert.equal(c.choices[0].finish_reason, 'stop');
  const act = c.parley.tool_activity;
  assert.equal(act.length, 2);
  assert.equal(act[0].type, 'tool_call');
  assert.equal(act[0].tool_call.function.name, 'calculator');
  assert.equal(act[1].type, 'tool_result');
  assert.equal(act[1].result.content, '5');
  assert.equal(act[1].result.success, true);
});

step('stateful session', async () => {
  const session = await (await native('POST', '/api/v1/sessions', { title: 'from the openai SDK' })).json();
  const { data: first, response } = await alice.chat.completions
    .create({ model, messages: [{ role: 'user', content: 'What is 6*7?' }] }, { headers: { 'X-Parley-Session': session.id } })
    .withResponse();
  assert.equal(response.headers.get('x-parley-session'), session.id);
  assert.equal(first.choices[0].message.content, '6*7 = 42.', 'Parley ran its calculator in the session');
  assert.equal(first.parley.session_id, session.id);

  // The second turn names the session in metadata, and streams.
  const stream = await alice.chat.completions.create({
    model, stream: true, metadata: { session_id: session.id },
    messages: [{ role: 'user', content: 'Thanks!' }],
  });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.match(text, /^You said: Thanks!/);

  // Both turns are the session's stored history, in OpenAI format.
  const { messages } = await (await native('GET', `/api/v1/sessions/${session.id}/messages`)).json();
  const said = messages.filter((m) => m.role === 'user').map((m) => m.content);
  assert.deepEqual(said, ['What is 6*7?', 'Thanks!']);
  assert.equal(messages.at(-1).role, 'assistant');
  assert.equal(messages.at(-1).content, text);
  assert.ok(messages.some((m) => m.role === 'tool' && m.content === '42'));

  // The turn is a run of the session: its events can be followed again from the session's stream.
  const res = await native('GET', `/api/v1/sessions/${session.id}/stream?after=0&until=done`);
  const sse = await res.text();
  assert.match(sse, /event: start/);
  assert.match(sse, /"content":"What is 6\*7\?"/);
  assert.match(sse, /event: tool_result/);
  assert.match(sse, /event: done/);

  // Another user's session: refused, nothing stored.
  await expectError(OpenAI.PermissionDeniedError, 403, () =>
    bob.chat.completions.create({ model, messages: [{ role: 'user', content: 'mine now' }] }, { headers: { 'X-Parley-Session': session.id } }));
  const after = await (await native('GET', `/api/v1/sessions/${session.id}/messages`)).json();
  assert.equal(after.messages.length, messages.length);
});

step('error classes: 400, 401, 404, 429', async () => {
  const bad = await expectError(OpenAI.BadRequestError, 400, () => alice.chat.completions.create({ model, messages: [] }));
  assert.equal(bad.param, 'messages');
  assert.equal(bad.type, 'invalid_request_error');

  await expectError(OpenAI.NotFoundError, 404, () =>
    alice.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] },
      { headers: { 'X-Parley-Session': '01a20c00-54bf-765c-ae10-6aa60fb30b61' } }));

  // A bad key: 401 until the guest rate (2 per hour by address) is spent, then 429.
  const stranger = client('pk_not_a_key');
  const auth = await expectError(OpenAI.AuthenticationError, 401, () => stranger.models.list());
  assert.equal(auth.code, 'invalid_api_key');
  let limited;
  for (let i = 0; i < 3 && !limited; i++) {
    try {
      await stranger.models.list();
    } catch (err) {
      if (err instanceof OpenAI.RateLimitError) limited = err;
      else assert.ok(err instanceof OpenAI.AuthenticationError, `${err?.constructor?.name}: ${err?.message}`);
    }
  }
  assert.ok(limited, 'no RateLimitError within the guest rate');
  assert.equal(limited.status, 429);
  assert.equal(limited.code, 'rate_limit_exceeded');
  assert.ok(Number(limited.headers.get('retry-after')) > 0, 'Retry-After');
});

let failed = false;
for (const [name, fn] of steps) {
  try {
    await fn();
    console.log(`ok ${name}`);
  } catch (err) {
    failed = true;
    console.log(`FAIL ${name}: ${err?.stack ?? err}`);
    break;
  }
}
process.exit(failed ? 1 : 0);
