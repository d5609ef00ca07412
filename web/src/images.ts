// Reading the images of a generate_image or edit_image result from its JSON text (docs/protocol.md,
// "Images"), so a reloaded conversation shows them as the live one did.

export interface ImageOut {
  file_id?: string
  url?: string
  media_type?: string
  degraded?: boolean
  b64_json?: string
}

const inlineTypes = new Set(['image/png', 'image/jpeg', 'image/webp', 'image/gif'])

// imageSrc keeps only Parley's signed image route and inline raster images.
export function imageSrc(im: ImageOut): string | undefined {
  if (im.url && /^\/api\/v1\/images\/[A-Za-z0-9-]+\?/.test(im.url)) return im.url
  if (im.degraded && im.b64_json && im.media_type && inlineTypes.has(im.media_type)) {
    return `data:${im.media_type};base64,${im.b64_json}`
  }
  return undefined
}

export function parseImages(text: string): ImageOut[] {
  try {
    const v = JSON.parse(text)
    return Array.isArray(v?.images) ? (v.images as ImageOut[]) : []
  } catch {
    return []
  }
}
