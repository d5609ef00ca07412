package artifact

import (
	"errors"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

func TestProcessTable(t *testing.T) {
	const counter = `import { useState } from "react";
export default function Counter() {
  const [n, setN] = useState(0);
  return <button onClick={() => setN(n + 1)}>clicked {n} times</button>;
}
`
	cases := []struct {
		name    string
		typ     parley.ArtifactType
		lang    string
		in      string
		wantErr []string // all in the error message
		want    []string // all in the output
		wantNot []string // none in the output
		notes   []string // all among the notes
	}{
		{name: "react ok", typ: parley.ArtifactReact, in: counter, want: []string{"useState"}},
		{name: "react tsx types", typ: parley.ArtifactReact, in: "type P = {n: number}\nexport default function A({n}: P) { return <b>{n}</b> }\n", want: []string{"type P"}},
		{name: "react in a fence", typ: parley.ArtifactReact, in: "```jsx\n" + counter + "```", want: []string{"useState"}, wantNot: []string{"```"}},
		{name: "broken jsx", typ: parley.ArtifactReact, in: "export default function A() {\n  return <div><span>hi</div>;\n}\n",
			wantErr: []string{"line 2", "column", "span"}},
		{name: "broken js", typ: parley.ArtifactReact, in: "export default function A() {\n  const x = ;\n  return <p/>;\n}\n",
			wantErr: []string{"line 2", "Unexpected"}},
		{name: "disallowed import", typ: parley.ArtifactReact, in: "import axios from \"axios\";\nexport default function A() { return <p/> }\n",
			wantErr: []string{`import "axios" is not allowed`, "react, react-dom"}},
		{name: "disallowed url import", typ: parley.ArtifactReact, in: "import x from \"https://esm.sh/lodash\";\nexport default function A() { return <p>{x}</p> }\n",
			wantErr: []string{`import "https://esm.sh/lodash" is not allowed`}},
		{name: "dynamic import refused", typ: parley.ArtifactReact, in: "export default function A() { import(\"lodash\"); return <p/> }\n",
			wantErr: []string{`import "lodash" is not allowed`}},
		{name: "no default export", typ: parley.ArtifactReact, in: "export function A() { return <p/> }\n",
			wantErr: []string{"default export"}},
		{name: "html document stripped", typ: parley.ArtifactReact, in: `<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>Counter</title>
<script src="https://unpkg.com/react@18/umd/react.production.min.js"></script>
</head>
<body>
<div id="root"></div>
<script type="text/babel">
` + counter + `</script>
</body>
</html>`, want: []string{"export default function Counter", "useState"}, wantNot: []string{"DOCTYPE", "<html", "<head", "<body", "unpkg", `id="root"`, "<script", "</html>"}},
		{name: "svg cleaned", typ: parley.ArtifactSVG, in: `<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" viewBox="0 0 10 10" onload="alert(1)">
  <script>fetch('/api/v1/sessions')</script>
  <style>@import url(https://evil.example/x.css); .a { fill: url(#g); background: url('https://evil.example/t.png') }</style>
  <defs><linearGradient id="g"><stop offset="0"/></linearGradient></defs>
  <a href="javascript:alert(1)"><rect class="a" width="5" height="5" onclick="steal()"/></a>
  <use xlink:href="https://evil.example/sprite.svg#icon"/>
  <use href="#g"/>
  <image href="http://evil.example/p.png" width="1" height="1"/>
  <rect fill="url(http://evil.example/f)" width="1" height="1"/>
  <foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><iframe src="https://evil.example"/></div></foreignObject>
  <set attributeName="href" to="javascript:alert(1)"/>
</svg>`,
			want:    []string{`<svg xmlns="http://www.w3.org/2000/svg"`, `viewBox="0 0 10 10"`, `fill: url(#g)`, `<use href="#g">`, `<linearGradient id="g">`},
			wantNot: []string{"onload", "<script", "fetch", "onclick", "javascript:", "evil.example", "foreignObject", "@import", "<set"},
			notes:   []string{"1 <script> element", "event handler (onload)", "event handler (onclick)", "external reference (xlink:href)", "external reference (href)", "<foreignObject> element", "@import rule", "external url() reference"}},
		{name: "svg not well formed", typ: parley.ArtifactSVG, in: `<svg xmlns="http://www.w3.org/2000/svg"><g></svg>`, wantErr: []string{"not well-formed"}},
		{name: "svg wrong root", typ: parley.ArtifactSVG, in: `<html><svg/></html>`, wantErr: []string{"root element is <html>"}},
		{name: "svg entity bomb refused", typ: parley.ArtifactSVG, in: `<!DOCTYPE svg [<!ENTITY a "aaaa">]><svg>&a;</svg>`, wantErr: []string{"not well-formed"}},
		{name: "code needs language", typ: parley.ArtifactCode, in: "print(1)", wantErr: []string{"language"}},
		{name: "code ok", typ: parley.ArtifactCode, lang: "python", in: "```python\nprint(1)\n```", want: []string{"print(1)"}, wantNot: []string{"```"}},
		{name: "mermaid ok", typ: parley.ArtifactMermaid, in: "```mermaid\nflowchart TD\n  A --> B\n```", want: []string{"flowchart TD"}},
		{name: "mermaid without type", typ: parley.ArtifactMermaid, in: "A --> B", wantErr: []string{"must start with its type"}},
		{name: "markdown keeps fences", typ: parley.ArtifactMarkdown, in: "```go\nx\n```", want: []string{"```go"}},
		{name: "empty", typ: parley.ArtifactHTML, in: "  \n", wantErr: []string{"empty"}},
		{name: "unknown type", typ: "pdf", in: "x", wantErr: []string{"unknown type"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, notes, err := Process(c.typ, c.lang, c.in)
			if len(c.wantErr) > 0 {
				var ve *ValidationError
				if !errors.As(err, &ve) {
					t.Fatalf("err = %v, want a ValidationError; out:\n%s", err, out)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Process: %v", err)
			}
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, w := range c.wantNot {
				if strings.Contains(out, w) {
					t.Errorf("output keeps %q:\n%s", w, out)
				}
			}
			joined := strings.Join(notes, "\n")
			for _, w := range c.notes {
				if !strings.Contains(joined, w) {
					t.Errorf("notes lack %q: %q", w, notes)
				}
			}
			if c.typ == parley.ArtifactSVG {
				// The cleaned SVG is itself well-formed and clean: a second pass removes nothing.
				again, notes2, err := CleanSVG(out)
				if err != nil || again != out || len(notes2) > 0 {
					t.Errorf("second pass: err %v, notes %q, changed %v", err, notes2, again != out)
				}
			}
		})
	}
}

func TestCompileBundlesReact(t *testing.T) {
	js, err := Compile("import { useState } from 'react';\nexport default function A() { const [n] = useState(41); return <p>{n + 1}</p> }\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"createRoot", "useState"} {
		if !strings.Contains(js, w) {
			t.Errorf("bundle lacks %q", w)
		}
	}
	for _, w := range []string{"require(", "import ", "process.env"} {
		if strings.Contains(js, w) {
			t.Errorf("bundle keeps %q: it would not run in a browser", w)
		}
	}
	if len(js) > 400<<10 {
		t.Errorf("bundle is %d bytes", len(js))
	}
}

func TestExtractCode(t *testing.T) {
	for _, c := range []struct {
		in   string
		typ  parley.ArtifactType
		want string
	}{
		{"Here it is:\n```jsx\nexport default () => <p/>\n```\nEnjoy.", parley.ArtifactReact, "export default () => <p/>"},
		{"no fence at all", parley.ArtifactReact, "no fence at all"},
		{"```a\nx\n```\nand\n```b\ny\n```", parley.ArtifactCode, "```a\nx\n```\nand\n```b\ny\n```"}, // two blocks: left whole
		{"Intro\n```md\n# x\n```", parley.ArtifactMarkdown, "Intro\n```md\n# x\n```"},
	} {
		if got := extractCode(c.in, c.typ); got != c.want {
			t.Errorf("extractCode(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
