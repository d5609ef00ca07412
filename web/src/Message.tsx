import { Fragment, memo, useEffect, useState } from 'react'
import type { ToolCall, Usage } from './api'
import type { ChatState, Draft, Entry } from './chat'
import { renderMarkdown } from './markdown'
import { SearchSources } from './SearchSources'
import { GeneratedImages } from './GeneratedImages'
import { ApprovalView } from './ApprovalCard'

export function formatUsage(u: Usage): string {
  let s = `${u.total_tokens.toLocaleString('en')} tokens`
  if (u.cost) s += ` · $${u.cost < 0.01 ? u.cost.toFixed(4) : u.cost.toFixed(2)}`
  return s
}

export const Markdown = memo(function Markdown(props: { text: string }) {
  const html = renderMarkdown(props.text)
  return (
    <div
      className="md"
      onClick={(e) => {
        const b = (e.target as HTMLElement).closest('button[data-copy]')
        if (!b) return
        const code = b.closest('.code-block')?.querySelector('code')?.textContent ?? ''
        navigator.clipboard?.writeText(code).then(
          () => {
            b.textContent = 'Copied'
            setTimeout(() => (b.textContent = 'Copy'), 1500)
          },
          () => (b.textContent = 'Copy failed'),
        )
      }}
      dangerouslySetInnerHTML={{ __html: html }}
    />
  )
})

function Reasoning(props: { text: string; streaming: boolean; ms?: number; draft?: Draft }) {
  const [now, setNow] = useState(Date.now())
  const thinking = props.streaming && props.draft?.reasoningEnd === undefined
  useEffect(() => {
    if (!thinking) return
    const t = setInterval(() => setNow(Date.now()), 500)
    return () => clearInterval(t)
  }, [thinking])
  let ms = props.ms
  if (props.draft?.reasoningStart !== undefined) ms = (props.draft.reasoningEnd ?? now) - props.draft.reasoningStart
  const secs = ms !== undefined ? Math.max(1, Math.round(ms / 1000)) : undefined
  const label = thinking ? `Thinking… ${secs ?? ''}${secs ? ' s' : ''}` : secs !== undefined ? `Thought for ${secs} s` : 'Reasoning'
  return (
    <details className="reasoning" data-testid="reasoning">
      <summary>{label}</summary>
      <div className="reasoning-text">{props.text}</div>
    </details>
  )
}

function prettyArgs(a: string): string {
  try {
    return JSON.stringify(JSON.parse(a), null, 2)
  } catch {
    return a
  }
}

function ToolCard(props: { call: ToolCall; state: ChatState; toolServers: Record<string, string> }) {
  const { call, state } = props
  const res = state.results[call.id]
  const started = state.started[call.id]
  const approval = state.approvals[call.id]
  const status = res
    ? res.success === false
      ? 'failed'
      : 'done'
    : started
      ? 'running'
      : approval && !approval.resolved
        ? 'needs approval'
        : state.run !== 'idle'
          ? 'waiting'
          : 'no result'
  const server = res?.server ?? props.toolServers[call.function.name]
  return (
    <details className={'tool-card tool-' + status.replaceAll(' ', '-')} data-testid="tool-card">
      <summary>
        <span className="tool-icon" aria-hidden="true">
          ⚙
        </span>
        <span className="tool-name">{call.function.name}</span>
        {server && <span className="badge">{server}</span>}
        <span className="tool-status">{status}</span>
        {res?.latency_ms !== undefined && <span className="muted small">{res.latency_ms} ms</span>}
      </summary>
      <div className="tool-body">
        <div className="tool-label">Arguments</div>
        <pre tabIndex={0}>{prettyArgs(call.function.arguments)}</pre>
        {res && (
          <>
            <div className="tool-label">{res.success === false ? 'Error' : 'Result'}</div>
            <pre tabIndex={0}>{res.content}</pre>
          </>
        )}
      </div>
    </details>
  )
}

export function AssistantBody(props: { entry: Extract<Entry, { kind: 'assistant' }>; state: ChatState; toolServers: Record<string, string>; streaming: boolean; draft?: Draft }) {
  const e = props.entry
  const u = e.usage
  return (
    <>
      {e.reasoning && <Reasoning text={e.reasoning} streaming={props.streaming} ms={e.thoughtMs} draft={props.draft} />}
      {e.text ? <Markdown text={e.text} /> : props.streaming && !e.reasoning ? <span className="typing" role="img" aria-label="The model is answering" /> : null}
      {e.toolCalls.map((c) => (
        <Fragment key={c.id}>
          <ToolCard call={c} state={props.state} toolServers={props.toolServers} />
          {props.state.approvals[c.id] && <ApprovalView item={props.state.approvals[c.id]} />}
          {c.function.name === 'web_search' && props.state.results[c.id]?.success !== false && props.state.results[c.id] && (
            <SearchSources content={props.state.results[c.id].content} />
          )}
          {(c.function.name === 'generate_image' || c.function.name === 'edit_image') && props.state.results[c.id]?.success !== false && props.state.results[c.id] && (
            <GeneratedImages content={props.state.results[c.id].content} />
          )}
        </Fragment>
      ))}
      {(u || e.partial) && (
        <div className="meta muted small" data-testid="answer-usage">
          {e.model && <span>{e.model}</span>}
          {u && <span>{formatUsage(u)}</span>}
          {e.latency_ms !== undefined && <span>{(e.latency_ms / 1000).toFixed(1)} s</span>}
          {e.partial && <span>not stored</span>}
        </div>
      )}
    </>
  )
}
