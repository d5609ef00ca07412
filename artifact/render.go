package artifact

import (
	"crypto/rand"
	"encoding/base64"
	"html"
	"regexp"
	"strings"

	parley "github.com/parleyhq/parley"
)

// Page is an artifact made into a document for a sandboxed iframe, with the Content-Security-
// Policy it must be served with.
type Page struct {
	HTML []byte
	CSP  string
}

// cspBase is every page's policy: a sandbox without allow-same-origin (the page runs in an
// opaque origin, so it cannot read Parley's cookies or storage, and Parley's API sees it as a
// foreign origin), no network at all (connect-src, no remote scripts, styles, images, fonts,
// frames or forms): the page has only what it ships.
const cspBase = "sandbox allow-scripts; default-src 'none'; connect-src 'none'; img-src data: blob:; " +
	"font-src data:; media-src data: blob:; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'; frame-src 'none'; worker-src 'none'"

// Render makes the page of a: a React component compiled and bundled with React, an HTML
// artifact as it is, an SVG inside a page, and the text of the other types in a <pre> (a client
// shows code, Mermaid and Markdown itself).
func Render(a *parley.Artifact) (*Page, error) {
	nonce := newNonce()
	head := `<!DOCTYPE html><html><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>` +
		html.EscapeString(a.Title) + `</title><style>html,body{margin:0;font-family:system-ui,sans-serif}</style></head><body>`
	switch a.Type {
	case parley.ArtifactReact:
		js, err := Compile(a.Content)
		if err != nil {
			return nil, err
		}
		// "</script" cannot appear inside the script element; esbuild escapes it in strings,
		// and this makes sure of it.
		js = strings.ReplaceAll(js, "</script", `<\/script`)
		body := head + `<div id="root"></div><script nonce="` + nonce + `">` + js + `</script></body></html>`
		return &Page{HTML: []byte(body), CSP: cspBase + "; script-src 'nonce-" + nonce + "'"}, nil
	case parley.ArtifactHTML:
		doc := a.Content
		if !hasDocument.MatchString(doc) {
			doc = head + doc + "</body></html>"
		}
		// The model's own inline scripts run: the sandbox and the policy are what contain them.
		return &Page{HTML: []byte(doc), CSP: cspBase + "; script-src 'unsafe-inline'"}, nil
	case parley.ArtifactSVG:
		return &Page{HTML: []byte(head + a.Content + "</body></html>"), CSP: cspBase + "; script-src 'none'"}, nil
	default:
		return &Page{HTML: []byte(head + `<pre style="white-space:pre-wrap;padding:1em">` + html.EscapeString(a.Content) + "</pre></body></html>"),
			CSP: cspBase + "; script-src 'none'"}, nil
	}
}

var hasDocument = regexp.MustCompile(`(?i)^\s*(<!doctype|<html)`)

func newNonce() string {
	var b [18]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
