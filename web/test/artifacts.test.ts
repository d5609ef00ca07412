// Unit tests of the name an artifact version downloads as (src/artifactFile.ts).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { fileName } from '../src/artifactFile'

test('fileName: a safe title, the version and an extension by type', () => {
  assert.equal(fileName({ title: 'Counter', type: 'react', version: 2 }), 'Counter-v2.jsx')
  assert.equal(fileName({ title: 'Sales chart', type: 'svg', version: 1 }), 'Sales-chart-v1.svg')
  assert.equal(fileName({ title: 'parse', type: 'code', language: 'Python', version: 3 }), 'parse-v3.py')
  assert.equal(fileName({ title: 'notes', type: 'code', language: 'cobol', version: 1 }), 'notes-v1.txt')
  assert.equal(fileName({ title: 'Flow', type: 'mermaid', version: 1 }), 'Flow-v1.mmd')
})

test('fileName: no path parts or control characters from the title', () => {
  assert.equal(fileName({ title: '../../etc/passwd', type: 'markdown', version: 1 }), 'etcpasswd-v1.md')
  assert.equal(fileName({ title: 'a\u0000b/c\\d', type: 'html', version: 1 }), 'abcd-v1.html')
  assert.equal(fileName({ title: '///', type: 'html', version: 1 }), 'artifact-v1.html')
})
