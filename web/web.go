// Package web serves Parley's browser UI: a React single-page app (source in this directory,
// built with Vite into dist/, committed) embedded in the binary. It talks to the server only
// through the public API (REST under /api/v1 and the WebSocket at /api/ws).
package web

import (
	"bytes"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// CSP is the Content-Security-Policy of every UI response: scripts and styles from this origin
// only (no inline script, no eval), connections to this origin only (the API and its WebSocket),
// images from this origin and data: URLs (pasted images), no plugins, no framing of the UI; frames
// from this origin only: the artifact pages, each sandboxed by its own policy.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; " +
	"font-src 'self'; connect-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'self'; " +
	"frame-src 'self'; frame-ancestors 'none'; object-src 'none'"

// Embedded reports whether this binary carries the UI (false when built with -tags no_ui).
func Embedded() bool { return embedded }

// Handler serves the UI: files of dist by path, and index.html for any other path (a client
// route such as /s/<id>). Hashed files under /assets/ are cached for a year; index.html is
// revalidated every time, so a new build reaches browsers at once.
func Handler() http.Handler {
	if !embedded {
		return http.NotFoundHandler()
	}
	root, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // the embed directive guarantees dist exists
	}
	return handler(root)
}

func handler(root fs.FS) http.Handler {
	index, _ := fs.ReadFile(root, "index.html")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
		if name != "" && name != "index.html" {
			if data, err := fs.ReadFile(root, name); err == nil {
				if strings.HasPrefix(name, "assets/") {
					h.Set("Cache-Control", "public, max-age=31536000, immutable")
				} else {
					h.Set("Cache-Control", "no-cache")
				}
				http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(data))
				return
			}
			// A missing hashed asset is a 404, not the page: a stale page asking for an old
			// bundle must not get HTML back as JavaScript.
			if strings.HasPrefix(name, "assets/") || path.Ext(name) != "" {
				http.NotFound(w, r)
				return
			}
		}
		if index == nil {
			http.NotFound(w, r)
			return
		}
		h.Set("Cache-Control", "no-cache")
		h.Set("Content-Type", "text/html; charset=utf-8")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(index))
	})
}
