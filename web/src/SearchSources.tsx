// The sources of a web_search result as cards (read from its result text: sources.ts).

import { parseSources } from './sources'

// safeURL keeps only http(s) links: a source's URL comes from the web.
function safeURL(u: string): string | undefined {
  try {
    const p = new URL(u)
    return p.protocol === 'http:' || p.protocol === 'https:' ? p.href : undefined
  } catch {
    return undefined
  }
}

export function SearchSources(props: { content: string }) {
  const sources = parseSources(props.content)
  if (sources.length === 0) return null
  return (
    <ol className="source-cards" data-testid="search-sources" aria-label="Web search sources">
      {sources.map((s) => {
        const href = safeURL(s.url)
        let host = ''
        if (href) host = new URL(href).hostname
        return (
          <li key={s.n} className="source-card">
            <span className="source-n">{s.n}</span>
            <div>
              {href ? (
                <a href={href} target="_blank" rel="noopener noreferrer nofollow">
                  {s.title || host}
                </a>
              ) : (
                <span>{s.title}</span>
              )}
              {host && <span className="muted small source-host">{host}</span>}
              {s.snippet && <p className="small">{s.snippet}</p>}
            </div>
          </li>
        )
      })}
    </ol>
  )
}
