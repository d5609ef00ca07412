// Unit tests of reading the images of an image tool's result (src/images.ts).
import { test } from 'node:test'
import assert from 'node:assert/strict'
import { imageSrc, parseImages } from '../src/images'

test('parseImages reads stored and degraded images', () => {
  const text = JSON.stringify({
    images: [
      { file_id: 'f1', url: '/api/v1/images/f1?exp=1&sig=abc', media_type: 'image/png', bytes: 3 },
      { media_type: 'image/png', bytes: 3, degraded: true, b64_json: 'AAAA' },
    ],
    prompt: 'p',
  })
  const imgs = parseImages(text)
  assert.equal(imgs.length, 2)
  assert.equal(imageSrc(imgs[0]), '/api/v1/images/f1?exp=1&sig=abc')
  assert.equal(imageSrc(imgs[1]), 'data:image/png;base64,AAAA')
})

test('imageSrc refuses other URLs and types', () => {
  assert.equal(imageSrc({ url: 'https://evil.example/x.png' }), undefined)
  assert.equal(imageSrc({ url: 'javascript:alert(1)' }), undefined)
  assert.equal(imageSrc({ degraded: true, media_type: 'image/svg+xml', b64_json: 'PHN2Zz4=' }), undefined)
  assert.deepEqual(parseImages('error: rate limited'), [])
})
