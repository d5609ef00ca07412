// The images of a generate_image or edit_image result: stored ones from their signed URL, degraded
// ones inline from their base64 (src/images.ts reads them).

import { imageSrc, parseImages } from './images'

export function GeneratedImages(props: { content: string; prompt?: string }) {
  const imgs = parseImages(props.content)
    .map((im) => ({ im, src: imageSrc(im) }))
    .filter((x) => x.src)
  if (imgs.length === 0) return null
  return (
    <div className="generated-images" data-testid="generated-images">
      {imgs.map(({ im, src }, i) => (
        <figure key={im.file_id ?? i}>
          <a href={src} target="_blank" rel="noopener noreferrer">
            <img src={src} alt={props.prompt ?? 'Generated image'} loading="lazy" />
          </a>
          {im.degraded && <figcaption className="muted small">Not stored (shown inline)</figcaption>}
        </figure>
      ))}
    </div>
  )
}
