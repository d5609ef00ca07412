//go:build no_ui

package web

import "embed"

// Built with -tags no_ui, the binary carries no UI: every page path answers 404.
var dist embed.FS

const embedded = false
