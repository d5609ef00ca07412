//go:build !no_ui

package web

import "embed"

// dist is the built UI (npm run build in web/), committed so that the binary needs no Node step.
//
//go:embed all:dist
var dist embed.FS

const embedded = true
