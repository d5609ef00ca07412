// The browser suite: Playwright (playwright-core) driving Debian's Chromium against a real Parley
// started by cmd/parley's TestWebUIInABrowser, which passes:
//   PARLEY_URL          a server in single-user mode (auth off on loopback)
//   PARLEY_AUTH_URL     a server with --auth keys --guests
//   PARLEY_CONTROL_URL  scripts the fake model: POST /enqueue [Turn…], POST /reset, GET /requests;
//                       POST /crash-restart SIGKILLs the PARLEY_CRASH_URL server and starts it again
//   PARLEY_CRASH_URL    a server in a process of its own (same database, port and instance id after
//                       a restart, so that it takes over the run the killed process left)
//   PARLEY_CHROMIUM     the browser binary
//   PARLEY_SCREENSHOTS  where the README's screenshots are written
//   PARLEY_E2E_ONLY     optional: run only the cases whose name contains it
//   PARLEY_E2E_SHARD    optional, K/N: run only the cases whose index i has i % N === K (the Go test
//                       runs N shards at once, each against servers of its own)
// Every case runs in a fresh browser context. A case fails on any page error or CSP violation.

import { chromium } from 'playwright-core'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const BASE = process.env.PARLEY_URL
const AUTH = process.env.PARLEY_AUTH_URL
const CONTROL = process.env.PARLEY_CONTROL_URL
const CRASH = process.env.PARLEY_CRASH_URL
const SHOTS = process.env.PARLEY_SCREENSHOTS
const ONLY = process.env.PARLEY_E2E_ONLY ?? ''
const [SHARD, SHARDS] = (process.env.PARLEY_E2E_SHARD ?? '0/1').split('/').map(Number)
if (!(Number.isInteger(SHARD) && Number.isInteger(SHARDS) && SHARD >= 0 && SHARD < SHARDS)) {
  console.error(`PARLEY_E2E_SHARD must be K/N with 0 <= K < N: ${process.env.PARLEY_E2E_SHARD}`)
  process.exit(2)
}
if (!BASE || !CONTROL) {
  console.error('PARLEY_URL and PARLEY_CONTROL_URL are required (run through go test ./cmd/parley -run TestWebUIInABrowser)')
  process.exit(2)
}
const axeSource = fs.readFileSync(path.join(here, '..', 'node_modules', 'axe-core', 'axe.min.js'), 'utf8')
const T = 30_000 // generous: the machine is shared and busy

// ---- helpers ----------------------------------------------------------------------------------

function assert(cond, msg) {
  if (!cond) throw new Error('assertion failed: ' + msg)
}

async function control(method, p, body) {
  const r = await fetch(CONTROL + p, { method, body: body && JSON.stringify(body) })
  if (!r.ok) throw new Error(`control ${p}: ${r.status} ${await r.text()}`)
  return r.status === 204 ? null : r.json()
}
const enqueue = (...turns) => control('POST', '/enqueue', turns)
const ms = (n) => n * 1e6 // Turn.Delay is a Go duration in nanoseconds

async function api(method, p, body, base = BASE) {
  const r = await fetch(base + p, { method, headers: body ? { 'Content-Type': 'application/json' } : {}, body: body && JSON.stringify(body) })
  const text = await r.text()
  return { status: r.status, body: text ? JSON.parse(text) : null }
}

let browser
const contexts = []
async function newPage(opts = {}) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: 'light', ...opts })
  contexts.push(ctx)
  const page = await ctx.newPage()
  page.problems = []
  page.on('pageerror', (e) => page.problems.push('page error: ' + e.message))
  page.on('console', (m) => {
    if (m.type() === 'error' && !/Failed to load resource|WebSocket connection/.test(m.text())) page.problems.push('console error: ' + m.text())
  })
  return page
}

async function send(page, text) {
  await page.locator('#prompt').fill(text)
  await page.locator('#prompt').press('Enter')
}

// idle: the run ended (the Send button is back).
async function idle(page) {
  await page.locator('.composer button[type=submit]').waitFor({ timeout: T })
}

async function lastAnswer(page) {
  return page.locator('[data-testid=assistant-message] .md').last().innerText()
}

function count(haystack, needle) {
  return haystack.split(needle).length - 1
}

async function axeCheck(page, label) {
  await page.evaluate(axeSource)
  const res = await page.evaluate(async () => {
    const r = await window.axe.run(document, { resultTypes: ['violations'] })
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.slice(0, 3).map((n) => n.target.join(' ')) }))
  })
  const bad = res.filter((v) => v.impact === 'serious' || v.impact === 'critical')
  for (const v of res) console.log(`    axe ${label}: ${v.impact} ${v.id} (${v.help}) ${JSON.stringify(v.nodes)}`)
  assert(bad.length === 0, `${label}: ${bad.length} serious or critical axe violations: ${bad.map((v) => v.id).join(', ')}`)
}

const MD = [
  'Here is a **summary** of the trip:',
  '',
  '| City | Days | Budget |',
  '|---|---:|---:|',
  '| Lisbon | 3 | €420 |',
  '| Porto | 2 | €260 |',
  '',
  'And the helper that adds it up:',
  '',
  '```go',
  'func total(days []int) (sum int) {',
  '\tfor _, d := range days {',
  '\t\tsum += d // one day at a time',
  '\t}',
  '\treturn sum',
  '}',
  '```',
  '',
].join('\n')

const words = (n, p = 'w') => Array.from({ length: n }, (_, i) => `${p}${i}`).join(' ')

const shared = {}

// ---- the cases --------------------------------------------------------------------------------

const cases = [
  [
    'send and stream (Markdown table, highlighted code, copy, reasoning, usage)',
    async () => {
      await enqueue({ Reasoning: 'The person wants a table and some Go. ', Content: MD, Delay: ms(12) })
      const page = await newPage()
      await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: BASE })
      await page.goto(BASE + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'Plan a trip with a table and Go code')
      // The answer streams: a draft appears and grows before the stored message replaces it.
      await page.locator('[data-testid=draft-message] .md').waitFor({ timeout: T })
      await idle(page)
      assert(/\/s\/[0-9a-f-]{36}$/.test(page.url()), 'the URL names the new session: ' + page.url())
      const msg = page.locator('[data-testid=assistant-message]').last()
      assert((await msg.locator('table td').first().innerText()) === 'Lisbon', 'the table is rendered')
      assert((await msg.locator('.code-block .hljs-keyword').count()) > 0, 'the code is highlighted')
      await msg.locator('button.copy').click()
      await msg.locator('button.copy', { hasText: 'Copied' }).waitFor({ timeout: T })
      const clip = await page.evaluate(() => navigator.clipboard.readText())
      assert(clip.includes('sum += d'), 'copy puts the code on the clipboard: ' + clip)
      const summary = await msg.locator('[data-testid=reasoning] summary').innerText()
      assert(/^Thought for \d+ s$/.test(summary), 'reasoning panel says how long: ' + summary)
      assert(!(await msg.locator('[data-testid=reasoning]').evaluate((d) => d.open)), 'reasoning is collapsed once done')
      const usage = await msg.locator('[data-testid=answer-usage]').innerText()
      assert(usage.includes('oa/gpt-4o') && /tokens/.test(usage) && usage.includes('$'), 'per-answer usage and cost: ' + usage)
      await page.locator('[data-testid=session-usage]').waitFor({ timeout: T })
      assert(/tokens/.test(await page.locator('[data-testid=session-usage]').innerText()), 'session usage')
      await page.getByRole('link', { name: 'Plan a trip with a table and Go code' }).waitFor({ timeout: T })
      shared.mdSession = page.url()
      return page
    },
  ],
  [
    'a tool card (name, MCP server, arguments, status, duration, result)',
    async () => {
      await enqueue(
        { ToolCalls: [{ id: 'call_e2e1', type: 'function', function: { name: 't__echo', arguments: '{"text":"hello card"}' } }] },
        { Content: 'The echo said hello card.' },
      )
      const page = await newPage()
      await page.goto(BASE + '/')
      await send(page, 'Echo hello card')
      await idle(page)
      await page.getByText('The echo said hello card.').waitFor({ timeout: T })
      const card = page.locator('[data-testid=tool-card]').first()
      const head = await card.locator('summary').innerText()
      assert(head.includes('t__echo') && /\bt\b/.test(head) && head.includes('done') && /\d+ ms/.test(head), 'card head: ' + head)
      await card.locator('summary').click()
      const body = await card.locator('.tool-body').innerText()
      assert(body.includes('"text": "hello card"') && body.includes('echo: hello card'), 'card body: ' + body)
      shared.toolSession = page.url()
      return page
    },
  ],
  [
    'stop (Esc) keeps what streamed, and the next message works',
    async () => {
      const long = words(300, 'stop')
      await enqueue({ Content: long, Delay: ms(30) })
      const page = await newPage()
      await page.goto(BASE + '/')
      await send(page, 'Say many words')
      await page.locator('[data-testid=draft-message]', { hasText: 'stop5' }).waitFor({ timeout: T })
      await page.keyboard.press('Escape')
      await idle(page)
      const text = await lastAnswer(page)
      assert(text.startsWith('stop0 stop1') && !text.includes('stop299'), 'partial answer kept: ' + text.slice(-40))
      const id = page.url().split('/s/')[1]
      const stored = (await api('GET', `/api/v1/sessions/${id}/messages`)).body.messages
      const last = stored[stored.length - 1]
      assert(last.role === 'assistant' && last.content.trim() === text.trim(), 'the page shows what was stored')
      assert(count(await page.locator('.messages').innerText(), 'stop1 ') === 1, 'no text twice')
      await enqueue({ Content: 'After the stop.' })
      await send(page, 'Again')
      await page.getByText('After the stop.').waitFor({ timeout: T })
      return page
    },
  ],
  [
    'pause and resume',
    async () => {
      await enqueue(
        {
          Reasoning: 'thinking '.repeat(30),
          ToolCalls: [{ id: 'call_p1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"2+2"}' } }],
          Delay: ms(40),
        },
        { Content: 'Resumed: 4.' },
      )
      const page = await newPage()
      await page.goto(BASE + '/')
      await send(page, 'Add with a pause')
      await page.locator('[data-testid=draft-message] [data-testid=reasoning]').waitFor({ timeout: T })
      await page.getByRole('button', { name: 'Pause', exact: true }).click()
      await page.getByRole('button', { name: 'Resume', exact: true }).waitFor({ timeout: T })
      await page.locator('.conn', { hasText: 'Paused' }).waitFor({ timeout: T })
      // The model's tool call is stored, and waits.
      await page.locator('[data-testid=tool-card]', { hasText: 'waiting' }).waitFor({ timeout: T })
      await page.getByRole('button', { name: 'Resume', exact: true }).click()
      await page.getByText('Resumed: 4.').waitFor({ timeout: T })
      await idle(page)
      return page
    },
  ],
  [
    'reload mid-stream resumes with no duplicated text',
    async () => {
      const text = words(100)
      await enqueue({ Reasoning: 'Counting the words. ', Content: text, Delay: ms(30) })
      const page = await newPage()
      await page.goto(BASE + '/')
      await send(page, 'Count to 100')
      await page.locator('[data-testid=draft-message]', { hasText: 'w10 ' }).waitFor({ timeout: T })
      await page.reload()
      await page.locator('[data-testid=assistant-message]', { hasText: 'w99' }).waitFor({ timeout: T })
      await idle(page)
      assert((await lastAnswer(page)).trim() === text, 'the answer is the streamed text exactly once')
      const all = await page.locator('.messages').innerText()
      assert(count(all, 'w5 ') === 1 && count(all, 'w99') === 1, 'no text twice')
      assert(count(all, 'Count to 100') === 1, 'the question once')
      return page
    },
  ],
  [
    'a network drop shows "reconnecting" and resumes from the last seq',
    async () => {
      const text = words(100, 'n')
      await enqueue({ Content: text, Delay: ms(30) })
      const page = await newPage()
      const urls = []
      page.on('websocket', (ws) => urls.push(ws.url()))
      await page.goto(BASE + '/')
      await send(page, 'Count with a drop')
      await page.locator('[data-testid=draft-message]', { hasText: 'n10 ' }).waitFor({ timeout: T })
      await page.evaluate(() => {
        window.__sawReconnecting = false
        const el = document.querySelector('.conn')
        new MutationObserver(() => {
          if (el.textContent.includes('Reconnecting')) window.__sawReconnecting = true
        }).observe(el, { childList: true, characterData: true, subtree: true })
        window.__parleyConn.drop()
      })
      await page.locator('[data-testid=assistant-message]', { hasText: 'n99' }).waitFor({ timeout: T })
      assert(await page.evaluate(() => window.__sawReconnecting), 'the page showed that it was reconnecting')
      assert(urls.some((u) => /after=\d+/.test(u)), 'it reconnected with after=<seq>: ' + urls.join(' '))
      assert((await lastAnswer(page)).trim() === text, 'the answer exactly once')
      // A message sent while the connection is down goes out once it is back up.
      await enqueue({ Content: 'Sent after the drop.' })
      await page.evaluate(() => window.__parleyConn.drop())
      await send(page, 'While reconnecting')
      await page.getByText('Sent after the drop.').waitFor({ timeout: T })
      assert(count(await page.locator('.messages').innerText(), 'While reconnecting') === 1, 'the message was sent once')
      return page
    },
  ],
  [
    'no layout jumps while an answer streams (layout-shift, positions of earlier messages)',
    async () => {
      // A first exchange that fills the viewport, so that the page scrolls from the start.
      const first = 'A first answer. ' + Array.from({ length: 8 }, (_, i) => words(40, `f${i}x`)).join('\n\n')
      await enqueue({ Content: first })
      const page = await newPage()
      // Count layout shifts from the start (hadRecentInput false only: typing and Enter are input).
      await page.addInitScript(() => {
        window.__shifts = []
        new PerformanceObserver((l) => {
          for (const e of l.getEntries()) if (!e.hadRecentInput) window.__shifts.push({ t: e.startTime, v: e.value })
        }).observe({ type: 'layout-shift', buffered: true })
      })
      await page.goto(BASE + '/')
      await send(page, 'First, something long')
      await page.locator('[data-testid=assistant-message]', { hasText: 'f7x39' }).waitFor({ timeout: T })
      await idle(page)
      // The answer: a tool card, then reasoning, then many chunks of Markdown (paragraphs, a list,
      // code), slowly, so that it grows past the viewport while the page follows the end.
      const long = Array.from({ length: 14 }, (_, i) => `Paragraph ${i}: ` + words(18, `p${i}x`) + (i % 4 === 3 ? '\n\n- one\n- two\n\n```go\nfmt.Println("x")\n```' : '')).join('\n\n')
      await enqueue(
        { ToolCalls: [{ id: 'call_cls1', type: 'function', function: { name: 't__echo', arguments: '{"text":"steady"}' } }] },
        { Reasoning: 'Thinking about a steady page. '.repeat(4), Content: long, Delay: ms(6) },
      )
      // Sample, every frame, where the earlier messages sit in the scrolled content (the page
      // follows the end as the answer grows: positions are measured relative to the scroll
      // container's content, not the viewport).
      await page.evaluate(() => {
        const s = (window.__stab = { t0: performance.now(), moves: [], frames: 0, base: new Map(), view: new Map(), done: false, followed: 0 })
        const pos = (el) => {
          const sc = document.querySelector('.messages')
          return Math.round(el.getBoundingClientRect().top - sc.getBoundingClientRect().top + sc.scrollTop)
        }
        const tick = () => {
          if (s.done) return
          s.frames++
          const sc = document.querySelector('.messages')
          if (sc.scrollHeight - sc.scrollTop - sc.clientHeight < 2) s.followed++
          const els = [...document.querySelectorAll('[data-testid=user-message], [data-testid=assistant-message]')]
          for (const el of els) {
            const key = el.innerText.slice(0, 40)
            const y = pos(el)
            if (!s.base.has(key)) s.base.set(key, y)
            else if (Math.abs(s.base.get(key) - y) > 1) s.moves.push(`${key}: ${s.base.get(key)} → ${y} in the content`)
            // On screen, following a growing answer moves earlier messages up, never down: a
            // move down is content above the end shrinking (a panel collapsing, a row remeasured).
            const top = Math.round(el.getBoundingClientRect().top)
            if (s.view.has(key) && top > s.view.get(key) + 1) s.moves.push(`${key}: down from ${s.view.get(key)} to ${top} on screen`)
            s.view.set(key, top)
          }
          requestAnimationFrame(tick)
        }
        requestAnimationFrame(tick)
      })
      await send(page, 'Now a long answer, please')
      await page.locator('[data-testid=draft-message]', { hasText: 'p2x5' }).waitFor({ timeout: T })
      await page.locator('[data-testid=assistant-message]', { hasText: 'p13x17' }).waitFor({ timeout: T })
      await idle(page)
      // A few frames more: the stored message has replaced the draft and been measured.
      await page.evaluate(() => new Promise((r) => setTimeout(r, 500)))
      const res = await page.evaluate(() => {
        const s = window.__stab
        s.done = true
        const cls = window.__shifts.filter((e) => e.t >= s.t0).reduce((a, e) => a + e.v, 0)
        return { cls, moves: s.moves, frames: s.frames, followed: s.followed, tracked: [...s.base.keys()] }
      })
      console.log(`    CLS while streaming ${res.cls.toFixed(4)}, ${res.frames} frames sampled, at the end in ${res.followed}`)
      assert(res.tracked.some((k) => k.startsWith('First, something long')) && res.tracked.some((k) => k.startsWith('Now a long answer')), 'both questions were tracked: ' + res.tracked.join(' | '))
      assert(res.frames > 30, 'sampled while streaming: ' + res.frames + ' frames')
      assert((await page.locator('[data-testid=tool-card]').count()) > 0, 'the answer has its tool card')
      assert(res.moves.length === 0, `earlier messages moved while the answer streamed (${res.moves.length}): ${res.moves.slice(0, 6).join('; ')}`)
      assert(res.cls < 0.05, 'cumulative layout shift while streaming: ' + res.cls)
      const box = await page.locator('.messages').evaluate((sc) => sc.scrollHeight - sc.scrollTop - sc.clientHeight)
      assert(box < 2, 'the page followed the end of the answer: ' + box + ' px left below')
      return page
    },
  ],
  [
    'a run taken over after its server is killed shows its text once (recovered)',
    async () => {
      assert(CRASH, 'PARLEY_CRASH_URL is set')
      const text = words(150, 'rc')
      // The first process streams the answer slowly and is killed mid-answer; the process that
      // takes the run over asks the model again, which answers the same text (faster).
      await enqueue({ Content: text, Delay: ms(40) }, { Content: text, Delay: ms(10) })
      const page = await newPage()
      const frames = []
      page.on('websocket', (ws) => ws.on('framereceived', (f) => typeof f.payload === 'string' && frames.push(f.payload)))
      await page.goto(CRASH + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'Count through a crash')
      await page.locator('[data-testid=draft-message]', { hasText: 'rc20 ' }).waitFor({ timeout: T })
      // From here on, every frame: what the draft shows (it must always be the start of the
      // answer: never its beginning twice).
      await page.evaluate(() => {
        const s = (window.__drafts = { seen: [], done: false })
        const tick = () => {
          if (s.done) return
          const d = document.querySelector('[data-testid=draft-message] .md')
          if (d) s.seen.push(d.innerText.replace(/\s+/g, ' ').trim())
          requestAnimationFrame(tick)
        }
        requestAnimationFrame(tick)
      })
      await control('POST', '/crash-restart') // SIGKILL, then the same server again
      await page.locator('[data-testid=assistant-message]', { hasText: 'rc149' }).waitFor({ timeout: T })
      await idle(page)
      const seen = await page.evaluate(() => {
        window.__drafts.done = true
        return window.__drafts.seen
      })
      const recovered = frames.filter((f) => /"type":"status"/.test(f) && /"state":"recovered"/.test(f))
      assert(recovered.length === 1, 'the page received the run\'s recovered status once: ' + recovered.length)
      const at = frames.indexOf(recovered[0])
      assert(frames.slice(0, at).some((f) => f.includes('"llm_chunk"')), 'the killed process had streamed part of the answer')
      assert(frames.slice(at).filter((f) => f.includes('"llm_chunk"')).length > 10, 'the new process streamed the regenerated answer')
      const bad = seen.filter((d) => !text.startsWith(d))
      assert(bad.length === 0, `the draft showed text twice (${bad.length} frames of ${seen.length}), e.g. ${JSON.stringify(bad[0]?.slice(0, 160))}`)
      assert(seen.some((d) => d.length > 0), 'the draft was sampled after the takeover: ' + seen.length)
      const id = page.url().split('/s/')[1]
      const stored = (await api('GET', `/api/v1/sessions/${id}/messages`, undefined, CRASH)).body.messages.filter((m) => m.role === 'assistant')
      assert(stored.length === 1 && stored[0].content.trim() === text, 'one stored answer, the whole text: ' + JSON.stringify(stored.map((m) => m.content.slice(0, 40))))
      assert((await lastAnswer(page)).trim() === text, 'the page shows the stored answer')
      const all = await page.locator('.messages').innerText()
      assert(count(all, 'rc5 ') === 1 && count(all, 'rc149') === 1, 'no text twice')
      assert(count(all, 'Count through a crash') === 1, 'the question once')
      return page
    },
  ],
  [
    'an approval outlives its server: the card is there after a SIGKILL and restart, and Approve runs the call once',
    async () => {
      assert(CRASH, 'PARLEY_CRASH_URL is set')
      // The crashable server asks before every calculator call (--tool-policy calculator=ask).
      await enqueue({ ToolCalls: [{ id: 'call_crash1', type: 'function', function: { name: 'calculator', arguments: '{"expression":"6*7"}' } }] }, { Content: 'It is 42.' })
      const page = await newPage()
      const frames = []
      page.on('websocket', (ws) => ws.on('framereceived', (f) => typeof f.payload === 'string' && frames.push(f.payload)))
      await page.goto(CRASH + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'What is 6*7?')
      const card = page.locator('[data-testid=approval-card]')
      await card.waitFor({ timeout: T })
      await page.locator('.conn', { hasText: 'Waiting for approval' }).waitFor({ timeout: T })
      const before = frames.length
      await control('POST', '/crash-restart') // SIGKILL, then the same server again
      // The page reconnects; the new process takes the run over and waits for the same call again.
      for (const t0 = Date.now(); !frames.slice(before).some((f) => /"state":"awaiting_approval"/.test(f)); ) {
        assert(Date.now() - t0 < T, 'the run taken over waits again: ' + frames.slice(before).join('\n').slice(0, 1500))
        await new Promise((r) => setTimeout(r, 100))
      }
      const after = frames.slice(before)
      assert(after.some((f) => /"state":"recovered"/.test(f)), 'the new process took the run over')
      await page.locator('.conn', { hasText: 'Waiting for approval' }).waitFor({ timeout: T })
      assert((await card.count()) === 1, 'one card after the restart')
      await card.getByRole('button', { name: 'Approve' }).click()
      await page.locator('[data-testid=approval-note]', { hasText: 'Approved calculator' }).waitFor({ timeout: T })
      await page.getByText('It is 42.').waitFor({ timeout: T })
      await idle(page)
      const id = page.url().split('/s/')[1]
      const stored = (await api('GET', `/api/v1/sessions/${id}/messages`, undefined, CRASH)).body.messages
      const results = stored.filter((m) => m.role === 'tool' && m.tool_call_id === 'call_crash1')
      assert(results.length === 1 && results[0].content.includes('42'), 'the call ran once, after the approval: ' + JSON.stringify(results.map((m) => m.content)))
      assert((await api('GET', `/api/v1/sessions/${id}/approvals`, undefined, CRASH)).body.approvals.length === 0, 'nothing left pending')
      return page
    },
  ],
  [
    'two pages on one session see the same run',
    async () => {
      await enqueue({ Content: 'First answer.' })
      const a = await newPage()
      await a.goto(BASE + '/')
      await send(a, 'First question')
      await a.getByText('First answer.').waitFor({ timeout: T })
      await idle(a)
      const b = await newPage()
      await b.goto(a.url())
      await b.getByText('First answer.').waitFor({ timeout: T })
      const text = words(80, 'two')
      await enqueue({ Content: text, Delay: ms(20) })
      await send(a, 'Second question')
      // b sees the question and the answer streaming live, then the stored answer.
      await b.locator('[data-testid=user-message]', { hasText: 'Second question' }).waitFor({ timeout: T })
      await b.locator('[data-testid=draft-message]', { hasText: 'two3' }).waitFor({ timeout: T })
      for (const p of [a, b]) {
        await p.locator('[data-testid=assistant-message]', { hasText: 'two79' }).waitFor({ timeout: T })
        assert((await lastAnswer(p)).trim() === text, 'both pages show the answer once')
      }
      await b.close()
      return a
    },
  ],
  [
    'an upstream error shows with Retry, and Retry works',
    async () => {
      await enqueue({ Status: 500, ErrorMessage: 'the model server broke' })
      const page = await newPage()
      await page.goto(BASE + '/')
      await send(page, 'Please fail once')
      const err = page.locator('[data-testid=error-message]')
      await err.waitFor({ timeout: T })
      await idle(page)
      assert((await err.getAttribute('role')) === 'alert', 'the error is announced')
      await enqueue({ Content: 'Recovered answer.' })
      await err.getByRole('button', { name: 'Retry' }).click()
      await page.getByText('Recovered answer.').waitFor({ timeout: T })
      const reqs = await control('GET', '/requests')
      assert(reqs[reqs.length - 1].last === 'Please fail once', 'retry sent the question again')
      const id = page.url().split('/s/')[1]
      const stored = (await api('GET', `/api/v1/sessions/${id}/messages`)).body.messages
      const users = stored.filter((m) => m.role === 'user')
      assert(users.length === 1, 'a retry stores no second user message: ' + users.length)
      assert(stored[stored.length - 1].content === 'Recovered answer.' && !stored[stored.length - 1].error, 'the retry answered')
      assert(count(await page.locator('.messages').innerText(), 'Please fail once') === 1, 'the question is shown once')
      return page
    },
  ],
  [
    'a narrow viewport (375 px)',
    async () => {
      await enqueue({ Content: MD })
      const page = await newPage({ viewport: { width: 375, height: 740 } })
      await page.goto(BASE + '/')
      assert(!(await page.locator('nav.sidebar').isVisible()), 'the sidebar is hidden')
      await page.getByRole('button', { name: 'Conversations' }).click()
      await page.locator('nav.sidebar').waitFor({ state: 'visible', timeout: T })
      await page.getByRole('button', { name: 'Close the list' }).click()
      await page.locator('nav.sidebar').waitFor({ state: 'hidden', timeout: T })
      await send(page, 'A table on a phone')
      await page.locator('[data-testid=assistant-message] table').waitFor({ timeout: T })
      await idle(page)
      const width = await page.evaluate(() => document.documentElement.scrollWidth)
      assert(width <= 375, 'no horizontal scrolling of the page: ' + width)
      await axeCheck(page, 'narrow')
      if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'chat-mobile.png') })
      return page
    },
  ],
  [
    'files: uploaded by button, paste and drop, previewed, sent by fileIds and shown',
    async () => {
      const png = Buffer.from(
        'iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEklEQVR4nGP4z8CAFWEXHbQSACj/P8Fu7N9hAAAAAElFTkSuQmCC',
        'base64',
      )
      const page = await newPage()
      await page.goto(BASE + '/')
      await page.locator('input[type=file]').setInputFiles({ name: 'button.png', mimeType: 'image/png', buffer: png })
      await page.getByRole('img', { name: 'button.png' }).waitFor({ timeout: T })
      const b64 = png.toString('base64')
      await page.evaluate((b64) => {
        const file = (name) => new File([Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))], name, { type: 'image/png' })
        const paste = new DataTransfer()
        paste.items.add(file('pasted.png'))
        document.querySelector('#prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: paste, bubbles: true, cancelable: true }))
        const drop = new DataTransfer()
        drop.items.add(file('dropped.png'))
        drop.items.add(new File(['hello from a text file'], 'notes.txt', { type: 'text/plain' }))
        document.querySelector('.composer').dispatchEvent(new DragEvent('drop', { dataTransfer: drop, bubbles: true, cancelable: true }))
      }, b64)
      await page.getByRole('img', { name: 'pasted.png' }).waitFor({ timeout: T })
      await page.getByRole('img', { name: 'dropped.png' }).waitFor({ timeout: T })
      await page.locator('.attachments .file-name').filter({ hasText: 'notes.txt' }).waitFor({ timeout: T })
      await page.getByRole('button', { name: 'Remove dropped.png' }).click()
      await page.getByRole('img', { name: 'dropped.png' }).waitFor({ state: 'detached', timeout: T })
      await page.locator('.attachments li.pending').first().waitFor({ state: 'detached', timeout: T }) // all uploaded
      await enqueue({ Content: 'Two small squares and a note.' })
      await send(page, 'What are these?')
      await page.getByText('Two small squares and a note.').waitFor({ timeout: T })
      const shown = page.locator('[data-testid=user-message] img.inline-image')
      await shown.nth(1).waitFor({ timeout: T })
      assert((await shown.count()) === 2, 'both images shown in the message: ' + (await shown.count()))
      assert((await shown.first().getAttribute('src')).startsWith('blob:'), 'image read from the files API')
      await page.locator('[data-testid=user-message] .file-chip').filter({ hasText: 'notes.txt' }).waitFor({ timeout: T })
      assert((await page.locator('.attachments').count()) === 0, 'previews cleared after sending')
      const reqs = await control('GET', '/requests')
      const last = reqs[reqs.length - 1]
      assert(last.images.length === 2 && last.images.every((u) => u === 'data:image/png;base64,' + b64), 'the model got both images: ' + last.images.length)
      assert(last.last.includes('hello from a text file') && last.last.includes('notes.txt'), 'the model got the text file: ' + last.last)
      await page.reload()
      await page.locator('[data-testid=user-message] img.inline-image').nth(1).waitFor({ timeout: T })
      // An edit of the message keeps its attachments (issue 23): the model gets them again.
      await enqueue({ Content: 'Still two squares and a note.' })
      await page.locator('[data-testid=user-message]').getByRole('button', { name: 'Edit message' }).click()
      const editor = page.getByTestId('user-editor')
      await editor.getByLabel('Edit message').fill('What are these, briefly?')
      await editor.getByRole('button', { name: 'Send edit' }).click()
      await page.getByText('Still two squares and a note.').waitFor({ timeout: T })
      const edited = (await control('GET', '/requests')).at(-1)
      assert(edited.last.includes('What are these, briefly?') && edited.last.includes('hello from a text file') && edited.images.length === 2, 'the edit kept the files: ' + JSON.stringify(edited).slice(0, 300))
      await page.locator('[data-testid=user-message] .file-chip').filter({ hasText: 'notes.txt' }).waitFor({ timeout: T })
      return page
    },
  ],
  [
    'sidebar: paging, title search, rename, delete',
    async () => {
      const tag = 'e2e' + Date.now().toString(36)
      for (let i = 0; i < 32; i++) await api('POST', '/api/v1/sessions', { title: `Page ${tag} ${i}` })
      const ids = {}
      for (const t of ['Alpha trip', 'Beta notes', 'Gamma trip']) ids[t] = (await api('POST', '/api/v1/sessions', { title: `${t} ${tag}` })).body.id
      const page = await newPage()
      page.on('dialog', (d) => d.accept())
      await page.goto(BASE + '/')
      const links = page.locator('.sessions .session-link')
      await page.getByRole('searchbox', { name: 'Search conversations by title' }).fill(`Page ${tag}`)
      // The list before the search also has 30 rows: wait for 30 rows of the search itself.
      const rowsOf = (n, tag) =>
        page.waitForFunction(
          ([n, tag]) => {
            const rows = [...document.querySelectorAll('.sessions .session-link')]
            return rows.length === n && rows.every((a) => a.textContent.includes(`Page ${tag}`))
          },
          [n, tag],
          { timeout: T },
        )
      await rowsOf(30, tag)
      await page.getByRole('button', { name: 'Load more' }).click()
      await rowsOf(32, tag)
      await page.getByRole('searchbox', { name: 'Search conversations by title' }).fill(`trip ${tag}`)
      await page.waitForFunction(
        () => [...document.querySelectorAll('.sessions .session-link')].map((a) => a.textContent).join('|').match(/^Gamma trip \S+\|Alpha trip \S+$/),
        null,
        { timeout: T },
      )
      await page.getByRole('button', { name: `Rename Gamma trip ${tag}` }).click()
      await page.getByRole('textbox', { name: 'New title' }).fill(`Gamma voyage ${tag}`)
      await page.getByRole('textbox', { name: 'New title' }).press('Enter')
      await page.getByRole('link', { name: `Gamma voyage ${tag}` }).waitFor({ timeout: T })
      assert((await api('GET', '/api/v1/sessions/' + ids['Gamma trip'])).body.title === `Gamma voyage ${tag}`, 'renamed on the server')
      await page.getByRole('button', { name: `Delete Alpha trip ${tag}` }).click()
      await page.getByRole('link', { name: `Alpha trip ${tag}` }).waitFor({ state: 'detached', timeout: T })
      assert((await api('GET', '/api/v1/sessions/' + ids['Alpha trip'])).status === 404, 'deleted on the server')
      assert((await links.count()) >= 1, 'the list still shows the rest')
      return page
    },
  ],
  [
    'todos: a live list on every tab',
    async () => {
      const todo = (items) => ({
        ToolCalls: [{ id: 'call_todo' + Math.random().toString(36).slice(2, 8), type: 'function', function: { name: 'todo_write', arguments: JSON.stringify({ todos: items }) } }],
      })
      await enqueue(
        todo([
          { id: '1', content: 'Read the brief', status: 'in_progress' },
          { id: '2', content: 'Write the code', status: 'pending' },
        ]),
        { Content: 'Planned.' },
      )
      const a = await newPage()
      await a.goto(BASE + '/')
      await send(a, 'Plan the work')
      await a.getByText('Planned.').waitFor({ timeout: T })
      const list = a.getByRole('region', { name: 'Todo list' })
      await list.getByText('Write the code').waitFor({ timeout: T })
      assert((await list.locator('[data-status=in_progress]').innerText()).includes('Read the brief'), 'the first item is in progress')
      // A second tab on the conversation loads the list, then follows it live.
      const b = await newPage()
      await b.goto(a.url())
      const listB = b.getByRole('region', { name: 'Todo list' })
      await listB.getByText('Read the brief').waitFor({ timeout: T })
      await enqueue(
        todo([
          { id: '1', content: 'Read the brief', status: 'completed' },
          { id: '2', content: 'Write the code', status: 'in_progress' },
          { id: '3', content: 'Ship it', status: 'pending' },
        ]),
        { Content: 'Working on it.' },
      )
      await send(a, 'Go on')
      for (const page of [a, b]) {
        const l = page.getByRole('region', { name: 'Todo list' })
        await l.getByText('Ship it').waitFor({ timeout: T })
        await l.locator('[data-status=completed]', { hasText: 'Read the brief' }).waitFor({ timeout: T })
        assert((await l.locator('summary').innerText()).includes('1 of 3 done'), 'the count on each tab')
      }
      await axeCheck(b, 'todos')
      assert(b.problems.length === 0, b.problems.join('\n'))
      return a
    },
  ],
  [
    'projects: memory in the sidebar reaches a new chat of the project',
    async () => {
      const tag = 'e2e' + Date.now().toString(36)
      const page = await newPage()
      page.on('dialog', (d) => d.accept())
      await page.goto(BASE + '/')
      await page.getByRole('button', { name: '+ New project' }).click()
      await page.getByRole('textbox', { name: 'Project name' }).fill(`Garden ${tag}`)
      await page.getByRole('button', { name: 'Create' }).click()
      const item = page.locator('[data-testid=project]', { hasText: `Garden ${tag}` })
      await item.locator('summary').click()
      await item.getByRole('textbox', { name: `A fact for Garden ${tag}` }).fill(`The soil is clay ${tag}.`)
      await item.getByRole('button', { name: 'Save' }).click()
      await item.locator('[data-testid=memory-entry]', { hasText: `The soil is clay ${tag}.` }).waitFor({ timeout: T })
      await item.getByRole('button', { name: `New chat in Garden ${tag}` }).click()
      await page.getByRole('heading', { name: `New chat in Garden ${tag}` }).waitFor({ timeout: T })
      await enqueue(
        { ToolCalls: [{ id: 'call_mem1', type: 'function', function: { name: 'memory_save', arguments: JSON.stringify({ content: `The beds face south ${tag}.` }) } }] },
        { Content: 'Clay, as you told me.' },
      )
      await send(page, 'What soil do I have?')
      await page.getByText('Clay, as you told me.').waitFor({ timeout: T })
      const reqs = await control('GET', '/requests')
      const sys = reqs[reqs.length - 2].system
      assert(sys.includes(`The soil is clay ${tag}.`) && sys.includes(`Garden ${tag}`), 'the model got the project memory: ' + sys)
      assert(reqs[reqs.length - 1].system.includes(`The beds face south ${tag}.`), 'the fact it saved reaches its next call')
      // The fact the model saved shows in the sidebar without a reload.
      await item.locator('[data-testid=memory-entry]', { hasText: `The beds face south ${tag}.` }).waitFor({ timeout: T })
      // The conversation is listed under its project, and the header's picker names it.
      await item.locator('.project-sessions .session-link', { hasText: 'What soil do I have?' }).waitFor({ timeout: T })
      const picker = page.getByRole('combobox', { name: 'Project' })
      await page.waitForFunction(() => {
        const s = document.querySelector('select.project-picker')
        return s && s.selectedOptions[0]?.textContent !== 'No project'
      }, null, { timeout: T })
      assert((await picker.locator('option:checked').innerText()) === `Garden ${tag}`, 'the picker names the project')
      // Taken out of the project, the next answer is sent no project prompt.
      await picker.selectOption('')
      const id = page.url().split('/s/')[1]
      const deadline = Date.now() + T
      while (Date.now() < deadline && (await api('GET', '/api/v1/sessions/' + id)).body.project_id) await page.waitForTimeout(100)
      assert(!(await api('GET', '/api/v1/sessions/' + id)).body.project_id, 'the session left the project')
      await enqueue({ Content: 'No idea.' })
      await send(page, 'And now?')
      await page.getByText('No idea.').waitFor({ timeout: T })
      const after = await control('GET', '/requests')
      assert(!after[after.length - 1].system.includes('clay'), 'outside the project, no memory')
      // Forget the fact, then delete the project.
      await item.getByRole('button', { name: `Forget The soil is clay ${tag}.` }).click()
      await item.locator('[data-testid=memory-entry]', { hasText: 'The soil is clay' }).waitFor({ state: 'detached', timeout: T })
      await item.getByRole('button', { name: 'Delete project' }).click()
      await item.waitFor({ state: 'detached', timeout: T })
      await axeCheck(page, 'projects')
      return page
    },
  ],
  [
    'model and tool pickers',
    async () => {
      await control('POST', '/reset')
      const page = await newPage()
      await page.goto(BASE + '/')
      const select = page.getByRole('combobox', { name: 'Model' })
      await page.waitForFunction(() => document.querySelectorAll('select option').length >= 3, null, { timeout: T })
      const options = await select.locator('option').allInnerTexts()
      assert(options.includes('oa/gpt-4o') && options.includes('oa/gpt-4o-mini'), 'models listed: ' + options)
      await select.selectOption('oa/gpt-4o-mini')
      await page.getByRole('button', { name: 'All tools' }).click()
      const list = page.locator('#tool-list')
      await list.getByLabel('All tools').uncheck()
      await page.getByRole('button', { name: 'No tools' }).waitFor({ timeout: T })
      await list.getByText('t__echo').waitFor({ timeout: T })
      assert((await list.innerText()).includes('t'), 'MCP tools show their server')
      await list.getByLabel('calculator').check()
      await page.getByRole('button', { name: '1 tool' }).click()
      await enqueue({ Content: 'Picked.' })
      await send(page, 'Which model and tools?')
      await page.getByText('Picked.').waitFor({ timeout: T })
      const reqs = await control('GET', '/requests')
      const last = reqs[reqs.length - 1]
      assert(last.model === 'gpt-4o-mini', 'the chosen model was asked: ' + last.model)
      assert(JSON.stringify(last.tools) === '["calculator"]', 'only the chosen tool was offered: ' + JSON.stringify(last.tools))
      assert((await page.locator('[data-testid=answer-usage]').last().innerText()).includes('oa/gpt-4o-mini'), 'the answer names its model')
      // A provider whose breaker is open says so in the picker (the list as /api/v1/models gives it).
      const other = await newPage()
      await other.route('**/api/v1/models', (r) =>
        r.fulfill({
          contentType: 'application/json',
          body: JSON.stringify({ models: [{ id: 'oa/gpt-4o', provider: 'oa', kind: 'openai', default: true, breaker: 'closed' }, { id: 'gm/flash', provider: 'gm', kind: 'gemini', breaker: 'open' }] }),
        }),
      )
      await other.goto(BASE + '/')
      await other.waitForFunction(() => [...document.querySelectorAll('select option')].some((o) => o.textContent.includes('breaker open')), null, { timeout: T })
      return page
    },
  ],
  [
    'sign in: a bad key is refused, a guest gets a working chat',
    async () => {
      if (!AUTH) throw new Error('PARLEY_AUTH_URL is not set')
      const page = await newPage()
      await page.goto(AUTH + '/')
      await page.getByRole('heading', { name: 'Sign in to Parley' }).waitFor({ timeout: T })
      await axeCheck(page, 'sign-in')
      await page.getByLabel('API key').fill('pk_not_a_real_key')
      await page.getByRole('button', { name: 'Sign in' }).click()
      await page.getByRole('alert').filter({ hasText: 'not accepted' }).waitFor({ timeout: T })
      await page.getByRole('button', { name: 'Continue as guest' }).click()
      await page.locator('#prompt').waitFor({ timeout: T })
      assert(/Signed in as guest-/.test(await page.locator('.sidebar-foot').innerText()), 'signed in as a guest')
      await enqueue({ Content: 'Hello, guest.' })
      await send(page, 'Hi from a guest')
      await page.getByText('Hello, guest.').waitFor({ timeout: T })
      await page.reload()
      await page.getByText('Hello, guest.').waitFor({ timeout: T }) // the token is kept
      return page
    },
  ],
  [
    'a 5,000-message session loads and scrolls, virtualized',
    async () => {
      const id = process.env.PARLEY_BIG_SESSION
      if (!id) throw new Error('PARLEY_BIG_SESSION is not set')
      const page = await newPage()
      const t0 = Date.now()
      await page.goto(BASE + '/s/' + id)
      await page.locator('[data-testid=user-message]', { hasText: 'Question 4999:' }).waitFor({ timeout: T })
      const loadMs = Date.now() - t0
      const rows = await page.locator('.messages .row').count()
      assert(rows < 80, 'only the visible rows are in the page: ' + rows)
      // Scroll from the end to the start in steps, one per frame, and time the frames.
      const frames = await page.locator('.messages').evaluate(async (el) => {
        const times = []
        let last = performance.now()
        const step = el.scrollHeight / 120
        for (let i = 0; i < 120; i++) {
          el.scrollTop = el.scrollHeight - (i + 1) * step
          await new Promise((r) => requestAnimationFrame(r))
          const now = performance.now()
          times.push(now - last)
          last = now
        }
        el.scrollTop = 0
        return times.sort((a, b) => a - b)
      })
      await page.locator('[data-testid=user-message]', { hasText: 'Question 1:' }).waitFor({ timeout: T })
      const p = (q) => frames[Math.floor(q * (frames.length - 1))].toFixed(1)
      console.log(`    5,000 messages: loaded and shown in ${loadMs} ms; ${rows} rows in the page; scroll frames p50 ${p(0.5)} ms, p95 ${p(0.95)} ms, max ${p(1)} ms`)
      assert((await page.locator('.messages .row').count()) < 80, 'still virtualized at the top')
      return page
    },
  ],
  [
    'accessibility (axe-core, light and dark) and screenshots',
    async () => {
      // A guest of its own on the server with keys, so the sidebar shows only this case's chats.
      if (!AUTH) throw new Error('PARLEY_AUTH_URL is not set')
      const g = await fetch(AUTH + '/api/v1/auth/guest', { method: 'POST' }).then((r) => r.json())
      const withKey = (p) => p.context().addInitScript((k) => localStorage.setItem('parley.key', k), g.token)
      for (const title of ['Go generics question', 'Weekend in Lisbon']) {
        await fetch(AUTH + '/api/v1/sessions', {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + g.token },
          body: JSON.stringify({ title }),
        })
      }
      await enqueue(
        { Reasoning: 'Check the budget first, then lay it out. ', ToolCalls: [{ id: 'call_shot', type: 'function', function: { name: 't__echo', arguments: '{"text":"budget: 680"}' } }] },
        { Content: MD, Delay: ms(5) },
      )
      const maker = await newPage()
      await withKey(maker)
      await maker.goto(AUTH + '/')
      await send(maker, 'Plan three days in Lisbon and two in Porto, with the budget')
      await maker.locator('[data-testid=assistant-message] table').waitFor({ timeout: T })
      await idle(maker)
      const url = maker.url()
      for (const scheme of ['light', 'dark']) {
        const page = await newPage({ colorScheme: scheme })
        await withKey(page)
        await page.goto(url)
        await page.locator('[data-testid=assistant-message] table').waitFor({ timeout: T })
        await page.locator('[data-testid=tool-card] summary').first().click()
        await page.locator('[data-testid=reasoning] summary').first().click()
        await axeCheck(page, scheme)
        await page.locator('.messages').evaluate((el) => el.scrollTo(0, 0))
        if (SHOTS) await page.screenshot({ path: path.join(SHOTS, `chat-${scheme}.png`) })
        assert(page.problems.length === 0, page.problems.join('\n'))
      }
      return maker
    },
  ],
  [
    'an artifact page is sandboxed: no cookies, no storage, no API',
    async () => {
      // What the page tries, and writes into #out for the test to read.
      const probe = `<pre id="out">pending</pre>
<script>
(async () => {
  const r = { origin: String(self.origin) }
  try { r.cookie = document.cookie } catch (e) { r.cookie = 'blocked: ' + e.name }
  try { r.local = localStorage.getItem('parley.key') } catch (e) { r.local = 'blocked: ' + e.name }
  try { r.session = sessionStorage.getItem('x') } catch (e) { r.session = 'blocked: ' + e.name }
  try {
    const x = await fetch('/api/v1/sessions', { credentials: 'include', headers: { Authorization: 'Bearer ' + r.local } })
    r.api = 'status ' + x.status + ' ' + (await x.text()).slice(0, 300)
  } catch (e) { r.api = 'blocked: ' + e.name }
  document.getElementById('out').textContent = JSON.stringify(r)
})()
</script>`
      await enqueue(
        { ToolCalls: [{ id: 'call_art1', type: 'function', function: { name: 'create_artifact', arguments: JSON.stringify({ type: 'html', title: 'Probe', content: probe }) } }] },
        { Content: 'Made the probe.' },
      )
      const chat = await api('POST', '/api/v1/chat', { message: 'Make the probe artifact' })
      assert(chat.status === 200, 'chat: ' + JSON.stringify(chat.body))
      const list = await api('GET', `/api/v1/sessions/${chat.body.session_id}/artifacts`)
      assert(list.status === 200 && list.body.artifacts.length === 1, 'artifacts: ' + JSON.stringify(list.body))
      const page = await newPage()
      // Parley's origin holds a cookie and the UI's stored key, as a signed-in browser would.
      await page.goto(BASE + '/')
      await page.evaluate(() => {
        document.cookie = 'parley_secret=cookie-s3cret; path=/'
        localStorage.setItem('parley.key', 'sk-local-s3cret')
      })
      const resp = await page.goto(BASE + list.body.artifacts[0].render_url)
      const csp = resp.headers()['content-security-policy']
      await page.waitForFunction(() => document.getElementById('out')?.textContent !== 'pending', null, { timeout: T })
      const raw = await page.locator('#out').innerText()
      const r = JSON.parse(raw)
      assert(r.origin === 'null', 'the page runs in an opaque origin: ' + raw)
      assert(!raw.includes('s3cret'), 'the page read a secret of Parley\'s origin: ' + raw)
      assert(r.local.startsWith('blocked') && r.session.startsWith('blocked'), 'storage is refused: ' + raw)
      assert(r.api.startsWith('blocked'), 'the API cannot be called: ' + raw)
      assert(r.cookie === '' || r.cookie.startsWith('blocked'), 'no cookie: ' + raw)
      assert(csp.startsWith('sandbox allow-scripts;') && !csp.includes('allow-same-origin'), 'CSP: ' + csp)
      // Back on Parley's own origin, both are still there: the page did not touch them.
      await page.goto(BASE + '/')
      assert((await page.evaluate(() => localStorage.getItem('parley.key'))) === 'sk-local-s3cret', 'the stored key is intact')
    },
  ],
  [
    'artifacts panel (a React artifact runs in its sandboxed frame) and search source cards',
    async () => {
      const component = "import { useState } from 'react'\nexport default function Counter() {\n  const [n, setN] = useState(0)\n  return <button onClick={() => setN(n + 1)}>clicked {n}</button>\n}\n"
      await enqueue(
        {
          ToolCalls: [
            { id: 'call_ra1', type: 'function', function: { name: 'create_artifact', arguments: JSON.stringify({ type: 'react', title: 'Counter', content: component }) } },
            { id: 'call_ws1', type: 'function', function: { name: 'web_search', arguments: JSON.stringify({ query: 'parley', count: 2 }) } },
          ],
        },
        { Content: 'Here is a counter, and what the web says.' },
      )
      const page = await newPage()
      await page.goto(BASE + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'Make a counter and search for parley')
      await idle(page)
      const frame = page.locator('[data-testid=artifact-frame]')
      await frame.waitFor({ timeout: T })
      assert((await frame.getAttribute('sandbox')) === 'allow-scripts', 'the frame is sandboxed without same-origin')
      const button = page.frameLocator('[data-testid=artifact-frame]').getByRole('button')
      await button.filter({ hasText: 'clicked 0' }).waitFor({ timeout: T })
      await button.click()
      await button.filter({ hasText: 'clicked 1' }).waitFor({ timeout: T })
      if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'artifacts-light.png') })
      await page.getByRole('button', { name: 'Code', exact: true }).click()
      assert((await page.locator('[data-testid=artifact-code]').innerText()).includes('useState(0)'), 'the code view shows the source')
      const cards = page.locator('[data-testid=search-sources] .source-card')
      await cards.first().waitFor({ timeout: T })
      assert((await cards.count()) === 2, 'two source cards')
      assert((await cards.first().locator('a').getAttribute('href')) === 'https://github.com/parleyhq/parley', 'the card links its URL')
      // An update is a new version: the panel shows it, lists both versions, shows the older one
      // on request, and downloads the version shown.
      const sid = /\/s\/([0-9a-fA-F-]+)/.exec(page.url())[1]
      const art = (await api('GET', `/api/v1/sessions/${sid}/artifacts`)).body.artifacts[0]
      await enqueue(
        { ToolCalls: [{ id: 'call_ra2', type: 'function', function: { name: 'update_artifact', arguments: JSON.stringify({ id: art.id, content: component.replace('clicked', 'pressed') }) } }] },
        { Content: 'Updated the counter.' },
      )
      await send(page, 'Say pressed instead')
      await page.getByText('Updated the counter.').waitFor({ timeout: T })
      const codeView = page.locator('[data-testid=artifact-code]')
      await page.waitForFunction(() => document.querySelector('[data-testid=artifact-code]')?.textContent?.includes('pressed {n}'), null, { timeout: T })
      const versions = page.getByRole('combobox', { name: 'Version' })
      assert((await versions.locator('option').allInnerTexts()).join('|') === 'v2 (latest)|v1', 'both versions are listed, newest first')
      await versions.selectOption('1')
      await page.waitForFunction(() => document.querySelector('[data-testid=artifact-code]')?.textContent?.includes('clicked {n}'), null, { timeout: T })
      const [dl] = await Promise.all([page.waitForEvent('download', { timeout: T }), page.getByRole('button', { name: 'Download' }).click()])
      assert(dl.suggestedFilename() === 'Counter-v1.jsx', `download name ${dl.suggestedFilename()}`)
      const saved = fs.readFileSync(await dl.path(), 'utf8')
      assert(saved === component, 'the download holds the version shown')
      assert((await codeView.innerText()).includes('clicked {n}'), 'the older version stays shown')
      // After a reload both are still there (the panel reads the API, the cards the stored result).
      await page.reload()
      await page.locator('[data-testid=search-sources] .source-card').first().waitFor({ timeout: T })
      await page.locator('[data-testid=artifacts]').waitFor({ timeout: T })
      return page
    },
  ],
  [
    'a generated image is shown from its signed URL, also after a reload',
    async () => {
      await enqueue(
        { ToolCalls: [{ id: 'call_img1', type: 'function', function: { name: 'generate_image', arguments: JSON.stringify({ prompt: 'a small red square' }) } }] },
        { Content: 'Here is your square.' },
      )
      const page = await newPage()
      await page.goto(BASE + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'Draw a red square')
      await idle(page)
      for (let round = 0; round < 2; round++) {
        const img = page.locator('[data-testid=generated-images] img')
        await img.first().waitFor({ timeout: T })
        const src = await img.first().getAttribute('src')
        assert(src && src.startsWith('/api/v1/images/') && src.includes('sig='), 'the image comes from its signed URL: ' + src)
        await page.waitForFunction(() => {
          const el = document.querySelector('[data-testid=generated-images] img')
          return el instanceof HTMLImageElement && el.complete && el.naturalWidth === 40
        }, null, { timeout: T })
        if (round === 0) await page.reload()
      }
      return page
    },
  ],
  [
    'tool approval: a card with editable arguments, a schema error, approve, deny with a reason, always allow; a page opened late sees it',
    async () => {
      // t__erase asks by its MCP destructiveHint, t__write by the harness's --tool-policy.
      const call = (tool, id, key) => ({ ToolCalls: [{ id, type: 'function', function: { name: tool, arguments: JSON.stringify({ key }) } }] })
      const erase = (id, key) => call('t__erase', id, key)
      await enqueue(erase('call_ap1', 'alpha'), { Content: 'Erased it.' })
      const page = await newPage()
      await page.goto(BASE + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await send(page, 'Erase alpha')
      const card = page.locator('[data-testid=approval-card]')
      await card.waitFor({ timeout: T })
      const head = await card.innerText()
      assert(head.includes('t__erase') && /\bt\b/.test(head), 'the card names the tool and its MCP server: ' + head)
      assert((await card.locator('textarea').inputValue()).includes('"key": "alpha"'), 'the card shows the arguments the model sent')
      await page.locator('.conn', { hasText: 'Waiting for approval' }).waitFor({ timeout: T })
      assert((await page.locator('[data-testid=tool-card] .tool-status').first().innerText()) === 'needs approval', 'the tool card says it waits')
      if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'approval-light.png') })
      await axeCheck(page, 'approval card')
      // A page that opens the session now shows the same pending card (GET …/approvals, and the
      // run's events replayed from its start).
      const late = await newPage({ colorScheme: 'dark' })
      await late.goto(page.url())
      await late.locator('[data-testid=approval-card]').waitFor({ timeout: T })
      await axeCheck(late, 'approval card, dark')
      // Arguments that break the tool's schema are refused with the server's reason; the call stays pending.
      await card.locator('textarea').fill('{"key": 5}')
      await card.getByRole('button', { name: 'Approve' }).click()
      const alert = card.getByRole('alert')
      await alert.waitFor({ timeout: T })
      assert((await alert.innerText()).length > 0, 'the refusal says why')
      assert((await card.count()) === 1, 'still pending after the refusal')
      // Not JSON at all: refused in the page, nothing sent.
      await card.locator('textarea').fill('{"key": ')
      await card.getByRole('button', { name: 'Approve' }).click()
      await card.getByRole('alert', { hasText: 'not valid JSON' }).waitFor({ timeout: T })
      // Edited arguments that fit run: both pages turn the card into a note.
      await card.locator('textarea').fill('{"key": "beta"}')
      await card.getByRole('button', { name: 'Approve' }).click()
      for (const p of [page, late]) {
        await p.locator('[data-testid=approval-note]', { hasText: 'Approved t__erase with edited arguments' }).waitFor({ timeout: T })
        await p.getByText('Erased it.').waitFor({ timeout: T })
        assert((await p.locator('[data-testid=approval-card]').count()) === 0, 'no card left')
      }
      await idle(page)
      const tc = page.locator('[data-testid=tool-card]').first()
      await tc.locator('summary').click()
      assert((await tc.locator('.tool-body').innerText()).includes('erased beta'), 'the call ran with the edited arguments')
      // Deny with a reason: the model gets a result that says so, and why.
      await enqueue(call('t__write', 'call_ap2', 'gamma'), { Content: 'Left gamma alone.' })
      await send(page, 'Write gamma')
      await card.waitFor({ timeout: T })
      await card.getByLabel(/Reason, if you deny it/).fill('gamma is still needed')
      await card.getByRole('button', { name: 'Deny' }).click()
      for (const p of [page, late]) await p.locator('[data-testid=approval-note]', { hasText: 'Denied t__write: gamma is still needed' }).waitFor({ timeout: T })
      await page.getByText('Left gamma alone.').waitFor({ timeout: T })
      await idle(page)
      const reqs = await control('GET', '/requests')
      const afterDeny = reqs[reqs.length - 1].last
      assert(afterDeny.includes('gamma is still needed'), 'the model read the denial and its reason: ' + afterDeny)
      // Always allow: this call runs, and the next call of the tool in the session asks no more.
      // Two calls of the tool wait at once: "Always allow" on one approves the other too.
      const twoCalls = { ToolCalls: [...erase('call_ap3', 'delta').ToolCalls, ...erase('call_ap3b', 'delta2').ToolCalls] }
      await enqueue(twoCalls, { Content: 'Erased delta.' }, erase('call_ap4', 'epsilon'), { Content: 'Erased epsilon.' })
      await send(page, 'Erase delta and delta2')
      await card.nth(1).waitFor({ timeout: T })
      assert((await card.count()) === 2, 'a card for each call')
      await card.first().getByRole('button', { name: 'Always allow' }).click()
      await page.locator('[data-testid=approval-note]', { hasText: 'Always allowed t__erase in this session' }).first().waitFor({ timeout: T })
      await page.getByText('Erased delta.').waitFor({ timeout: T })
      assert((await card.count()) === 0, 'both calls were decided')
      const bodies = await page.locator('[data-testid=tool-card] .tool-body').allTextContents()
      assert(bodies.some((b) => b.includes('erased delta2')), 'the other call ran too')
      await idle(page)
      await send(page, 'Erase epsilon')
      await page.getByText('Erased epsilon.').waitFor({ timeout: T })
      assert((await page.locator('[data-testid=approval-card]').count()) === 0, 'no card for an always-allowed tool')
      await late.close()
      return page
    },
  ],
  [
    'tool approval: another user cannot answer; a call nobody answers expires and the model is told',
    async () => {
      // On the server with keys (--approval-timeout 8s): two guests, the second a stranger to the session.
      if (!AUTH) throw new Error('PARLEY_AUTH_URL is not set')
      const guest = () => fetch(AUTH + '/api/v1/auth/guest', { method: 'POST' }).then((r) => r.json())
      const [owner, stranger] = [await guest(), await guest()]
      await enqueue({ ToolCalls: [{ id: 'call_exp1', type: 'function', function: { name: 't__erase', arguments: '{"key":"zeta"}' } }] }, { Content: 'Nobody approved it.' })
      const page = await newPage()
      await page.context().addInitScript((k) => localStorage.setItem('parley.key', k), owner.token)
      await page.goto(AUTH + '/')
      await page.locator('#prompt').waitFor({ timeout: T })
      await send(page, 'Erase zeta')
      const card = page.locator('[data-testid=approval-card]')
      await card.waitFor({ timeout: T })
      const sid = /\/s\/([0-9a-fA-F-]+)/.exec(page.url())[1]
      const r = await fetch(`${AUTH}/api/v1/sessions/${sid}/approvals/call_exp1`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + stranger.token },
        body: JSON.stringify({ decision: 'approve' }),
      })
      assert(r.status === 403 || r.status === 404, 'another user cannot answer: ' + r.status)
      const pending = await fetch(`${AUTH}/api/v1/sessions/${sid}/approvals`, { headers: { Authorization: 'Bearer ' + owner.token } }).then((x) => x.json())
      assert(pending.approvals.some((a) => a.call_id === 'call_exp1'), 'the call still waits for its owner: ' + JSON.stringify(pending))
      assert((await card.count()) === 1, 'the owner still sees the card')
      console.log('    the stranger got ' + r.status)
      await page.locator('[data-testid=approval-note]', { hasText: 'not approved in time' }).waitFor({ timeout: T })
      await page.getByText('Nobody approved it.').waitFor({ timeout: T })
      await idle(page)
      const reqs = await control('GET', '/requests')
      const told = reqs[reqs.length - 1].last
      assert(/approv/i.test(told) && !told.includes('erased zeta'), 'the model got a result saying the call was not approved and did not run: ' + told)
      console.log('    the model was told: ' + told)
      return page
    },
  ],
  [
    'branches: edit a message, "‹ 1 / 2 ›" switches, regenerate, a reload keeps the branch, another page follows, fork opens a new session',
    async () => {
      const page = await newPage()
      await page.goto(BASE + '/')
      await page.getByRole('heading', { name: 'What can I help with?' }).waitFor({ timeout: T })
      await enqueue({ Content: 'Answer one.' })
      await send(page, 'First question')
      await page.getByText('Answer one.').waitFor({ timeout: T })
      await idle(page)
      await enqueue({ Content: 'Answer two.' })
      await send(page, 'Second question')
      await page.getByText('Answer two.').waitFor({ timeout: T })
      await idle(page)
      const id = page.url().split('/s/')[1]
      const other = await newPage()
      await other.goto(page.url())
      await other.getByText('Answer two.').waitFor({ timeout: T })
      const userMsg = (p, text) => p.locator('[data-testid=user-message]', { hasText: text })
      const asstMsg = (p, text) => p.locator('[data-testid=assistant-message]', { hasText: text })
      assert((await page.locator('[data-testid=branch-nav]').count()) === 0, 'no navigation before a branch exists')

      // Edit the second question: the edited one and its answer replace it and what followed.
      await userMsg(page, 'Second question').getByRole('button', { name: 'Edit message' }).click()
      const editor = page.getByTestId('user-editor')
      await editor.getByLabel('Edit message').fill('Second question, edited')
      await enqueue({ Content: 'Answer to the edit.' })
      await editor.getByRole('button', { name: 'Send edit' }).click()
      await page.getByText('Answer to the edit.').waitFor({ timeout: T })
      await idle(page)
      assert((await page.getByText('Answer two.').count()) === 0, 'the old answer is not on the branch shown')
      const nav = (loc) => loc.getByTestId('branch-nav').locator('.branch-pos')
      await nav(userMsg(page, 'Second question, edited')).filter({ hasText: '2 / 2' }).waitFor({ timeout: T })
      let reqs = await control('GET', '/requests')
      assert(reqs[reqs.length - 1].last === 'Second question, edited', 'the model answered the edit: ' + reqs[reqs.length - 1].last)
      // The other page followed the edit live, without a reload.
      await other.getByText('Answer to the edit.').waitFor({ timeout: T })
      assert((await other.getByText('Answer two.').count()) === 0, 'the other page cut the old branch away')
      assert((await userMsg(other, 'Second question').count()) === 1, 'one second question on the other page')
      await other.close()

      // ‹ goes back to the first version: its question and its answer.
      await userMsg(page, 'Second question, edited').getByRole('button', { name: 'Previous version' }).click()
      await page.getByText('Answer two.').waitFor({ timeout: T })
      assert((await page.getByText('Answer to the edit.').count()) === 0, 'the edit is on the other branch')
      await nav(userMsg(page, 'Second question')).filter({ hasText: '1 / 2' }).waitFor({ timeout: T })

      // Regenerate the answer on this branch with the model picked: a sibling answer, "2 / 2" on it.
      await page.waitForFunction(() => document.querySelectorAll('select option').length >= 3, null, { timeout: T })
      await page.getByRole('combobox', { name: 'Model' }).selectOption('oa/gpt-4o-mini')
      await enqueue({ Content: 'Answer two, again.' })
      await asstMsg(page, 'Answer two.').getByRole('button', { name: 'Regenerate answer' }).click()
      await page.getByText('Answer two, again.').waitFor({ timeout: T })
      await idle(page)
      assert((await page.getByText('Answer two.', { exact: true }).count()) === 0, 'the old answer went')
      await nav(asstMsg(page, 'Answer two, again.')).filter({ hasText: '2 / 2' }).waitFor({ timeout: T })
      reqs = await control('GET', '/requests')
      assert(reqs[reqs.length - 1].last === 'Second question', 'the regeneration answered the same question: ' + reqs[reqs.length - 1].last)
      assert(reqs[reqs.length - 1].model === 'gpt-4o-mini', 'the regeneration used the model picked: ' + reqs[reqs.length - 1].model)
      if (SHOTS) await page.screenshot({ path: path.join(SHOTS, 'branches-light.png') })
      await axeCheck(page, 'branches')

      // A reload shows the same branch: the server keeps the active leaf.
      await page.reload()
      await page.getByText('Answer two, again.').waitFor({ timeout: T })
      assert((await page.getByText('Answer to the edit.').count()) === 0 && (await page.getByText('Answer two.', { exact: true }).count()) === 0, 'only the active branch')
      await nav(userMsg(page, 'Second question')).filter({ hasText: '1 / 2' }).waitFor({ timeout: T })
      await nav(asstMsg(page, 'Answer two, again.')).filter({ hasText: '2 / 2' }).waitFor({ timeout: T })
      const stored = (await api('GET', `/api/v1/sessions/${id}/messages`)).body.messages.map((m) => m.content)
      assert(JSON.stringify(stored) === JSON.stringify(['First question', 'Answer one.', 'Second question', 'Answer two, again.']), 'the API reads the same branch: ' + JSON.stringify(stored))
      // ‹ on the answer shows the first one; the branch of the edit is still there, › on the question.
      await asstMsg(page, 'Answer two, again.').getByRole('button', { name: 'Previous version' }).click()
      await page.getByText('Answer two.', { exact: true }).waitFor({ timeout: T })
      await userMsg(page, 'Second question').getByRole('button', { name: 'Next version' }).click()
      await page.getByText('Answer to the edit.').waitFor({ timeout: T })

      // Fork at the first answer: a new session with the messages up to there, opened at once.
      await asstMsg(page, 'Answer one.').getByRole('button', { name: 'Fork from here' }).click()
      await page.waitForURL((u) => /\/s\/[0-9a-f-]{36}$/.test(u.pathname) && !u.pathname.endsWith(id), { timeout: T })
      await page.getByText('Answer one.').waitFor({ timeout: T })
      assert((await page.locator('[data-testid=user-message]').count()) === 1, 'the fork holds the branch up to the message')
      assert((await page.getByText('Second question').count()) === 0, 'nothing after the fork point')
      const forkId = page.url().split('/s/')[1]
      const forked = (await api('GET', `/api/v1/sessions/${forkId}/messages`)).body.messages.map((m) => m.content)
      assert(JSON.stringify(forked) === JSON.stringify(['First question', 'Answer one.']), 'the fork stored: ' + JSON.stringify(forked))
      // The fork goes on by itself.
      await enqueue({ Content: 'Answer in the fork.' })
      await send(page, 'A question in the fork')
      await page.getByText('Answer in the fork.').waitFor({ timeout: T })
      await idle(page)
      assert((await api('GET', `/api/v1/sessions/${id}/messages`)).body.messages.every((m) => m.content !== 'A question in the fork'), 'the source session is untouched')
      return page
    },
  ],
]

// ---- runner -----------------------------------------------------------------------------------

// launch gives the browser a fresh, temporary profile of its own (a fresh user-data dir).
browser = await chromium.launch({
  executablePath: process.env.PARLEY_CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
  ],
})
if (SHOTS) fs.mkdirSync(SHOTS, { recursive: true })
let failed = 0
const started = Date.now()
for (const [i, [name, fn]] of cases.entries()) {
  if (i % SHARDS !== SHARD) continue
  if (ONLY && !name.includes(ONLY)) continue
  const t0 = Date.now()
  let page
  try {
    await control('POST', '/reset')
    page = await fn()
    if (page?.problems?.length) throw new Error(page.problems.join('\n'))
    console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(1)} s)`)
  } catch (e) {
    failed++
    console.log(`FAIL ${name}: ${e.stack ?? e}`)
    // What the case's pages showed, to tell a slow or lost answer from a page that drew it wrong.
    for (const c of contexts)
      for (const p of c.pages()) {
        const shown = await p
          .evaluate(() => ({ url: location.href, conn: document.querySelector('.conn')?.textContent ?? '', text: document.querySelector('.messages')?.innerText ?? '' }))
          .catch((err) => ({ error: String(err) }))
        console.log(`     page: ${JSON.stringify(shown).slice(0, 1500)}`)
        if (p.problems?.length) console.log(`     problems: ${p.problems.join(' | ')}`)
      }
  }
  for (const c of contexts.splice(0)) await c.close().catch(() => {})
}
await browser.close()
console.log(`${failed ? 'FAIL' : 'ok'}: ${failed} failed, ${((Date.now() - started) / 1000).toFixed(1)} s`)
process.exit(failed ? 1 : 0)
