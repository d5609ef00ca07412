// Unit tests of reading web_search sources from the tool's result text (src/sources.ts).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { parseSources } from '../src/sources'

test('parseSources reads the formatted search context', () => {
  const text =
    'WEB SEARCH RESULTS\nQuery: go 1.26\n\n' +
    'Source 1: Go 1.26 Release Notes\nURL: https://go.dev/doc/go1.26\nGo 1.26 is a major release.\n\n' +
    'Source 2: Go 1.26 is released\nURL: https://go.dev/blog/go1.26\nPublished: 2026-02-10\nThe Go team\nannounces it.\n\n' +
    'Source 3: No snippet\nURL: javascript:alert(1)\n'
  assert.deepEqual(parseSources(text), [
    { n: 1, title: 'Go 1.26 Release Notes', url: 'https://go.dev/doc/go1.26', snippet: 'Go 1.26 is a major release.' },
    { n: 2, title: 'Go 1.26 is released', url: 'https://go.dev/blog/go1.26', snippet: 'The Go team announces it.' },
    { n: 3, title: 'No snippet', url: 'javascript:alert(1)', snippet: '' },
  ])
})

test('parseSources finds nothing in other text', () => {
  assert.deepEqual(parseSources('WEB SEARCH RESULTS\nQuery: x\n\nNo results.\n'), [])
  assert.deepEqual(parseSources('Source 1: a title without a URL line\nsomething'), [])
})
