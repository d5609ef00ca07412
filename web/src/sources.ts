// Reading the sources of a web_search result from the tool's result text, whose shape the server
// fixes (docs/protocol.md, "web_search"), so a reloaded conversation shows them as the live one did.

export interface Source {
  n: number
  title: string
  url: string
  snippet: string
}

const head = /^Source (\d+): (.*)$/

// parseSources reads "Source N: title / URL: … / [Published: …] / snippet" blocks.
export function parseSources(text: string): Source[] {
  const out: Source[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const m = head.exec(lines[i])
    if (!m || !lines[i + 1]?.startsWith('URL: ')) continue
    const url = lines[i + 1].slice(5).trim()
    let j = i + 2
    if (lines[j]?.startsWith('Published: ')) j++
    const snippet: string[] = []
    for (; j < lines.length && lines[j] !== '' && !head.test(lines[j]); j++) snippet.push(lines[j])
    out.push({ n: Number(m[1]), title: m[2], url, snippet: snippet.join(' ') })
    i = j - 1
  }
  return out
}
