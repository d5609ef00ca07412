// Parley behind the Vercel AI SDK: tests written against the real `ai` package (the version
// package.json pins). cmd/parley TestAISDKInterop runs them on a parley serve process with API
// keys and a scripted fake model:
//
//   PARLEY_URL          the server
//   PARLEY_KEY          alice's API key; PARLEY_KEY_BOB bob's
//   PARLEY_CONTROL_URL  the fake model's script: POST /enqueue [turns], /hold?at=N, /release
//
// Each case prints "ok - <name>" or "not ok - <name>" and the script exits non-zero on a failure.
import assert from 'node:assert/strict'
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  readUIMessageStream,
  uiMessageChunkSchema,
  validateUIMessages,
} from 'ai'

const URL_ = process.env.PARLEY_URL
const KEY = process.env.PARLEY_KEY
const KEY_BOB = process.env.PARLEY_KEY_BOB
const CONTROL = process.env.PARLEY_CONTROL_URL
if (!URL_ || !KEY || !KEY_BOB || !CONTROL) {
  console.error('PARLEY_URL, PARLEY_KEY, PARLEY_KEY_BOB and PARLEY_CONTROL_URL must be set')
  process.exit(2)
}
const API = URL_ + '/api/v1/ui/chat'

let n = 0
const newChatId = () => `interop${Date.now().toString(36)}${n++}`

async function control(path, body) {
  const r = await fetch(CONTROL + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  assert.ok(r.ok, `control ${path}: ${r.status} ${await r.text()}`)
}

const usage = (p, c) => ({ prompt_tokens: p, completion_tokens: c, total_tokens: p + c })
const toolTurns = [
  {
    Reasoning: 'The user wants a product; I will use the calculator.',
    ToolCalls: [{ id: 'call_i1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"6*7"}' } }],
    Usage: usage(11, 7),
  },
  { Content: '6*7 = 42.', Usage: usage(30, 5) },
]

// The transport exactly as docs/clients.md sets it up for useChat.
const transport = (key = KEY, extra = {}) =>
  new DefaultChatTransport({ api: API, headers: { Authorization: `Bearer ${key}` }, ...extra })

// A Chat as useChat keeps one (@ai-sdk/react's Chat is AbstractChat over React state).
class TestChat extends AbstractChat {
  constructor({ messages = [], ...init }) {
    const state = {
      status: 'ready',
      error: undefined,
      messages,
      pushMessage(m) { this.messages = this.messages.concat(m) },
      popMessage() { this.messages = this.messages.slice(0, -1) },
      replaceMessage(i, m) { this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)] },
      snapshot: (x) => structuredClone(x),
    }
    super({ ...init, state })
    this.errors = []
    this.onErrorHook = (e) => this.errors.push(e)
  }
}

// waitReady waits for the chat's automatic request (sendAutomaticallyWhen) to be made and end.
async function waitReady(chat) {
  for (let i = 0; i < 500 && (chat.status !== 'ready' || chat.messages.at(-1).parts.every((p) => p.state !== 'output-available' && p.state !== 'output-denied')); i++) {
    await new Promise((r) => setTimeout(r, 20))
  }
  assert.equal(chat.status, 'ready', String(chat.error))
}

const plain = (x) => JSON.parse(JSON.stringify(x)) // drops undefined fields, as JSON does

async function stored(chatId, key = KEY) {
  const r = await fetch(`${API}/${chatId}/messages`, { headers: { Authorization: `Bearer ${key}` } })
  assert.equal(r.status, 200, `GET messages: ${r.status}`)
  const msgs = await r.json()
  if (msgs.length > 0) await validateUIMessages({ messages: msgs }) // the package's own UIMessage schema
  return msgs
}

// readChunks reads a UI message stream response: checks the SSE framing (data-only events, [DONE]
// last), validates every chunk with the package's uiMessageChunkSchema, and returns the chunks.
async function readChunks(resp) {
  assert.equal(resp.status, 200)
  assert.equal(resp.headers.get('x-vercel-ai-ui-message-stream'), 'v1')
  assert.match(resp.headers.get('content-type'), /^text\/event-stream/)
  const text = await resp.text()
  const events = text.split('\n\n')
  assert.equal(events.pop(), '', 'the stream ends with a blank line')
  assert.equal(events.pop(), 'data: [DONE]', 'the last event is [DONE]')
  const schema = uiMessageChunkSchema()
  const chunks = []
  for (const ev of events) {
    if (ev.startsWith(':')) continue // a keep-alive comment
    assert.ok(ev.startsWith('data: ') && !ev.includes('\n'), `a data-only event: ${JSON.stringify(ev)}`)
    const chunk = JSON.parse(ev.slice(6))
    const res = await schema.validate(chunk)
    assert.ok(res.success, `chunk ${ev} does not match uiMessageChunkSchema: ${res.error}`)
    chunks.push(res.value)
  }
  return chunks
}

// assemble runs chunks through the package's readUIMessageStream and returns the last message.
async function assemble(chunks, onError) {
  const stream = new ReadableStream({
    start(c) {
      for (const x of chunks) c.enqueue(x)
      c.close()
    },
  })
  let last
  for await (const m of readUIMessageStream({ stream, onError })) last = m
  return last
}

async function post(body, key = KEY) {
  return fetch(API, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  })
}

const userMessage = (text, id = 'u' + n++) => ({ id, role: 'user', parts: [{ type: 'text', text }] })

const cases = [
  ['readUIMessageStream assembles the stored answer: reasoning, a tool call, two steps', async () => {
    await control('/enqueue', toolTurns)
    const id = newChatId()
    const chunks = await readChunks(await post({ id, messages: [userMessage('What is 6*7?')], trigger: 'submit-message' }))
    const types = chunks.map((c) => c.type)
    for (const t of ['start', 'start-step', 'reasoning-start', 'reasoning-delta', 'reasoning-end', 'tool-input-start',
      'tool-input-delta', 'tool-input-available', 'tool-output-available', 'finish-step', 'text-start', 'text-delta', 'text-end', 'finish']) {
      assert.ok(types.includes(t), `a ${t} chunk in ${types}`)
    }
    assert.equal(types.filter((t) => t === 'start-step').length, 2)
    const msg = await assemble(chunks)
    const history = await stored(id)
    assert.equal(history.length, 2)
    assert.deepEqual(plain(history[1]), plain(msg))
    assert.equal(msg.id, chunks[0].messageId)
    assert.deepEqual(history[0].parts, [{ type: 'text', text: 'What is 6*7?' }])
    const tool = msg.parts.find((p) => p.type === 'tool-calculator')
    assert.equal(tool.state, 'output-available')
    assert.deepEqual(tool.input, { expression: '6*7' })
    assert.equal(tool.output, '42')
    assert.equal(msg.parts.at(-1).text, '6*7 = 42.')
    assert.deepEqual(msg.metadata.usage, usage(41, 12))
  }],

  ['a failing tool and a failing model call: tool-output-error, error, finish', async () => {
    await control('/enqueue', [
      { ToolCalls: [{ id: 'call_bad', type: 'function', function: { name: 'calculator', arguments: '{"expression":"2+"}' } }] },
      { Status: 500, ErrorMessage: 'The server had an error while processing your request.' },
    ])
    const id = newChatId()
    const chunks = await readChunks(await post({ id, messages: [userMessage('What is 2+?')], trigger: 'submit-message' }))
    const errors = []
    const msg = await assemble(chunks, (e) => errors.push(e))
    assert.equal(errors.length, 1, 'one error chunk')
    assert.equal(chunks.at(-1).type, 'finish')
    assert.equal(chunks.at(-1).finishReason, 'error')
    const tool = msg.parts.find((p) => p.type === 'tool-calculator')
    assert.equal(tool.state, 'output-error')
    assert.match(tool.errorText, /unexpected end of expression/)
    assert.deepEqual(plain((await stored(id))[1]), plain(msg))
  }],

  ['DefaultChatTransport: sendMessage, then regenerate, as useChat does (sending only the last message)', async () => {
    const id = newChatId()
    const sent = []
    // docs/clients.md's optional setting: Parley reads only the last message, so send only it.
    const chat = new TestChat({
      id,
      transport: transport(KEY, {
        prepareSendMessagesRequest: ({ id, messages, trigger, messageId }) => {
          sent.push(messages.length)
          return { body: { id, messages: messages.slice(-1), trigger, messageId } }
        },
      }),
    })
    await control('/enqueue', [{ Content: 'First answer.', Usage: usage(5, 2) }])
    await chat.sendMessage({ text: 'Say something' })
    assert.equal(chat.status, 'ready', String(chat.error))
    assert.equal(chat.messages.length, 2)
    let history = await stored(id)
    assert.deepEqual(plain(history[1]), plain(chat.messages[1]))
    assert.equal(history[0].parts[0].text, 'Say something')
    const firstId = chat.messages[1].id

    await control('/enqueue', [{ Content: 'Second answer.', Usage: usage(9, 2) }])
    await chat.regenerate()
    assert.equal(chat.status, 'ready', String(chat.error))
    assert.equal(chat.messages.length, 2)
    assert.notEqual(chat.messages[1].id, firstId)
    assert.equal(chat.messages[1].parts.at(-1).text, 'Second answer.')
    // Parley keeps every answer: the new one is a sibling of the old, on the active branch.
    history = await stored(id)
    assert.equal(history.length, 2)
    assert.equal(history[0].parts[0].text, 'Say something')
    assert.deepEqual(plain(history[1]), plain(chat.messages[1]))

    // Regenerating a failed answer retries it: nothing new stored but the answer.
    await control('/enqueue', [{ Status: 500, ErrorMessage: 'The server had an error while processing your request.' }])
    await chat.sendMessage({ text: 'And now?' })
    assert.equal(chat.status, 'error')
    await control('/enqueue', [{ Content: 'Now it works.' }])
    await chat.regenerate()
    assert.equal(chat.status, 'ready', String(chat.error))
    history = await stored(id)
    assert.equal(history.length, 5) // … question, failed answer, retried answer
    assert.equal(history[2].parts[0].text, 'And now?')
    assert.deepEqual(plain(history[4]), plain(chat.messages.at(-1)))
    assert.deepEqual(sent, [1, 1, 3, 3], 'useChat had the whole chat to send each time')
  }],

  ['DefaultChatTransport: resumeStream replays the run in progress; 204 when none', async () => {
    const id = newChatId()
    // Nothing to resume: reconnectToStream gives null, resumeStream leaves the chat as it is.
    assert.equal(await transport().reconnectToStream({ chatId: id }), null)
    const idle = new TestChat({ id, transport: transport() })
    await idle.resumeStream()
    assert.equal(idle.status, 'ready')
    assert.equal(idle.messages.length, 0)

    // A run held by the model after its first chunk, its POST left behind (a reload).
    await control('/enqueue', [{ Content: 'A long answer that keeps coming.', Usage: usage(4, 6) }])
    await control('/hold?at=2')
    const first = new TestChat({ id, transport: transport() })
    const sending = first.sendMessage({ text: 'Tell me more' })
    for (const deadline = Date.now() + 30_000; first.messages.length < 2;) {
      if (Date.now() > deadline) throw new Error('the held run streamed nothing within 30s')
      await new Promise((r) => setTimeout(r, 20))
    }
    first.stop() // the client leaves; the run goes on in Parley
    await sending

    // The page again: the stored history, then resume (useChat's resume: true).
    const reloaded = new TestChat({
      id,
      messages: await stored(id),
      transport: transport(KEY, {
        fetch: async (url, init) => {
          const r = await fetch(url, init)
          if (init?.method === 'GET') await control('/release') // the resumed stream is open
          return r
        },
      }),
    })
    assert.equal(reloaded.messages.length, 1, 'only the question is stored while the run is held')
    await reloaded.resumeStream()
    assert.equal(reloaded.status, 'ready', String(reloaded.error))
    const history = await stored(id)
    assert.equal(history.length, 2)
    assert.deepEqual(plain(reloaded.messages), plain(history))
    assert.equal(history[1].parts.at(-1).text, 'A long answer that keeps coming.')
  }],

  ['tool approval: tool-approval-request, addToolApprovalResponse, and the run goes on in the next request', async () => {
    // The server runs with --tool-policy get_current_time=ask (cmd/parley TestAISDKInterop).
    const ask = (id) => ({ ToolCalls: [{ id, type: 'function', function: { name: 'get_current_time', arguments: '{}' } }] })
    await control('/enqueue', [ask('call_t1'), { Content: 'It is now.' }, ask('call_t2'), { Content: 'Fine, I will not.' }])
    const id = newChatId()
    const chat = new TestChat({ id, transport: transport(), sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses })
    await chat.sendMessage({ text: 'What time is it?' })
    assert.equal(chat.status, 'ready', String(chat.error))
    let tool = chat.messages[1].parts.find((p) => p.type === 'tool-get_current_time')
    assert.equal(tool.state, 'approval-requested')
    assert.equal(tool.approval.id, 'call_t1')
    // A page reloaded while the call waits: the stored history holds the same waiting part, and
    // a chat made from it answers it the same way.
    const waiting = await stored(id)
    assert.deepEqual(plain(waiting[1].parts.find((p) => p.type === 'tool-get_current_time')), plain(tool))
    const reloaded = new TestChat({ id, messages: waiting, transport: transport(), sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses })
    await reloaded.addToolApprovalResponse({ id: 'call_t1', approved: true })
    await waitReady(reloaded)
    assert.equal(reloaded.messages.length, 2, 'the answer continues the same assistant message')
    tool = reloaded.messages[1].parts.find((p) => p.type === 'tool-get_current_time')
    assert.equal(tool.state, 'output-available', JSON.stringify(reloaded.messages[1].parts))
    assert.equal(reloaded.messages[1].parts.at(-1).text, 'It is now.')
    assert.deepEqual(plain((await stored(id))[1].parts), plain(reloaded.messages[1].parts))

    // Denied with a reason: tool-output-denied, and the model's answer to the refusal.
    await reloaded.sendMessage({ text: 'And again?' })
    await reloaded.addToolApprovalResponse({ id: 'call_t2', approved: false, reason: 'not twice' })
    await waitReady(reloaded)
    tool = reloaded.messages[3].parts.find((p) => p.type === 'tool-get_current_time')
    assert.equal(tool.state, 'output-denied', JSON.stringify(reloaded.messages[3].parts))
    assert.equal(reloaded.messages[3].parts.at(-1).text, 'Fine, I will not.')
    assert.deepEqual(plain((await stored(id))[3].parts), plain(reloaded.messages[3].parts))
  }],

  ['errors: 400 with its reason, 401 without a key, and chat ids are per user', async () => {
    await assert.rejects(
      transport().sendMessages({ chatId: newChatId(), messages: [], trigger: 'submit-message', messageId: undefined }),
      /messages: must hold/)
    await assert.rejects(
      transport('pk_not_a_key').sendMessages({ chatId: newChatId(), messages: [userMessage('hi')], trigger: 'submit-message' }),
      /invalid or revoked|unauthorized|authentication/i)
    // bob's chat with alice's chat id is his own, empty one.
    const id = newChatId()
    await control('/enqueue', [{ Content: 'For alice.' }])
    const chat = new TestChat({ id, transport: transport() })
    await chat.sendMessage({ text: 'alice asks' })
    assert.equal((await stored(id)).length, 2)
    assert.deepEqual(await stored(id, KEY_BOB), [])
  }],
]

let failed = 0
for (const [name, fn] of cases) {
  try {
    await fn()
    console.log(`ok - ${name}`)
  } catch (e) {
    failed++
    console.log(`not ok - ${name}\n${e?.stack ?? e}`)
  }
}
console.log(failed ? `${failed} of ${cases.length} failed` : `all ${cases.length} passed`)
process.exit(failed ? 1 : 0)
