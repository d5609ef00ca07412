// Runs the unit tests under test/ (TypeScript): bundles each with Vite into a temporary
// directory, then runs it with node's test runner. Exits non-zero when a test fails.
import { build } from 'vite'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { spawnSync } from 'node:child_process'
import { fileURLToPath } from 'node:url'

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const out = fs.mkdtempSync(path.join(os.tmpdir(), 'parley-web-unit-'))
try {
  const entries = fs.readdirSync(path.join(root, 'test')).filter((f) => f.endsWith('.test.ts'))
  await build({
    root,
    configFile: false,
    logLevel: 'warn',
    build: {
      outDir: out,
      emptyOutDir: true,
      minify: false,
      ssr: true,
      rolldownOptions: {
        input: Object.fromEntries(entries.map((f) => [f.replace(/\.ts$/, ''), path.join(root, 'test', f)])),
        output: { format: 'es', entryFileNames: '[name].mjs' },
      },
    },
  })
  const files = fs.readdirSync(out).filter((f) => f.endsWith('.test.mjs')).map((f) => path.join(out, f))
  const r = spawnSync(process.execPath, ['--test', ...files], { stdio: 'inherit' })
  process.exitCode = r.status ?? 1
} finally {
  fs.rmSync(out, { recursive: true, force: true })
}
