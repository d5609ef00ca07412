// The name an artifact version downloads as (kept apart from the panel so that it is unit tested
// without React).

const extensions: Record<string, string> = { react: 'jsx', html: 'html', svg: 'svg', mermaid: 'mmd', markdown: 'md' }
const codeExtensions: Record<string, string> = { javascript: 'js', typescript: 'ts', python: 'py', go: 'go', rust: 'rs', java: 'java', shell: 'sh', bash: 'sh', json: 'json', css: 'css', sql: 'sql', yaml: 'yaml' }

// fileName is the name an artifact version downloads as: its title made safe, and an extension
// by type (by language for code).
export function fileName(a: { title: string; type: string; language?: string; version: number }): string {
  const base = a.title.replace(/[^\p{L}\p{N}._ -]+/gu, '').trim().replace(/^\.+/, '').replace(/\s+/g, '-').slice(0, 80) || 'artifact'
  const ext = a.type === 'code' ? (codeExtensions[(a.language ?? '').toLowerCase()] ?? 'txt') : (extensions[a.type] ?? 'txt')
  return `${base}-v${a.version}.${ext}`
}
