package artifact

import (
	"testing"

	parley "github.com/parleyhq/parley"
)

const benchComponent = `import { useState } from "react";
export default function Counter() {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>clicked {n} times</button>;
}
`

// BenchmarkProcessReact is the validation of a small component on create_artifact: esbuild's
// parse, the import check and the default-export check.
func BenchmarkProcessReact(b *testing.B) {
	for b.Loop() {
		if _, _, err := Process(parley.ArtifactReact, "", benchComponent); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderReact is one uncached page of a React artifact: the component compiled and
// bundled, minified, with React and ReactDOM.
func BenchmarkRenderReact(b *testing.B) {
	a := &parley.Artifact{ID: "a", Version: 1, Type: parley.ArtifactReact, Title: "Counter", Content: benchComponent}
	var size int
	for b.Loop() {
		p, err := Render(a)
		if err != nil {
			b.Fatal(err)
		}
		size = len(p.HTML)
	}
	b.ReportMetric(float64(size), "page-bytes")
}

// BenchmarkCleanSVG cleans a small SVG with a script, handlers and outside references.
func BenchmarkCleanSVG(b *testing.B) {
	const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 10 10" onload="x()"><script>x()</script>` +
		`<style>.a{fill:url(#g)}</style><defs><linearGradient id="g"/></defs><rect class="a" width="5" height="5" onclick="y()"/>` +
		`<use href="https://evil.example/s.svg#i"/></svg>`
	for b.Loop() {
		if _, _, err := CleanSVG(svg); err != nil {
			b.Fatal(err)
		}
	}
}
