// Prints the size of what the page loads before it can run: the scripts and styles that
// dist/index.html names (the entry, its preloads and its CSS), raw and gzipped (level 9), and
// fails when the gzipped JavaScript exceeds the budget (250 KB, issue 19).
import fs from 'node:fs'
import path from 'node:path'
import zlib from 'node:zlib'
import { fileURLToPath } from 'node:url'

const dist = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist')
const index = fs.readFileSync(path.join(dist, 'index.html'), 'utf8')
const files = [...index.matchAll(/(?:src|href)="\/(assets\/[^"]+)"/g)].map((m) => m[1])
let js = 0
let jsRaw = 0
for (const f of files) {
  const data = fs.readFileSync(path.join(dist, f))
  const gz = zlib.gzipSync(data, { level: 9 }).length
  console.log(`${f.padEnd(44)} ${(data.length / 1024).toFixed(1).padStart(7)} KB  gzip ${(gz / 1024).toFixed(1).padStart(6)} KB`)
  if (f.endsWith('.js')) {
    js += gz
    jsRaw += data.length
  }
}
const budget = 250 * 1024
console.log(`initial JavaScript: ${(jsRaw / 1024).toFixed(1)} KB, gzip ${(js / 1024).toFixed(1)} KB (budget ${budget / 1024} KB)`)
if (js > budget) {
  console.error('over budget')
  process.exit(1)
}
