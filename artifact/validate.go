// Package artifact makes the artifacts a model writes safe to store and to show (seed 003 §3):
// each type's post-processing and validation, the create_artifact and update_artifact tools, and
// the page that runs an artifact in a sandboxed iframe, React compiled on the server with the
// libraries Parley ships.
package artifact

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	parley "github.com/parleyhq/parley"
)

// MaxContent bounds an artifact's content, in bytes.
const MaxContent = 512 << 10

// AllowedImports are the modules a React artifact may import: the React build Parley ships
// (vendor/), nothing else.
var AllowedImports = []string{"react", "react-dom", "react-dom/client", "react/jsx-runtime"}

// ValidationError says why an artifact was refused, in words the model can act on.
type ValidationError struct {
	Type    parley.ArtifactType
	Message string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("the %s artifact is invalid: %s", e.Type, e.Message)
}

func invalid(t parley.ArtifactType, format string, args ...any) error {
	return &ValidationError{Type: t, Message: fmt.Sprintf(format, args...)}
}

// ValidType reports whether t is an artifact type.
func ValidType(t parley.ArtifactType) bool { return slices.Contains(parley.ArtifactTypes, t) }

// Process post-processes and validates content of type t (language for code): it takes the code
// out of a Markdown fence, strips an HTML document around a React component, checks that React
// parses and imports only AllowedImports, cleans an SVG of scripts, event handlers and external
// references. It returns the content to store and notes on what it removed, or a
// *ValidationError.
func Process(t parley.ArtifactType, language, content string) (string, []string, error) {
	if !ValidType(t) {
		return "", nil, invalid(t, "unknown type %q (one of react, html, svg, code, mermaid, markdown)", t)
	}
	if len(content) > MaxContent {
		return "", nil, invalid(t, "the content is %d bytes; at most %d are allowed", len(content), MaxContent)
	}
	if t != parley.ArtifactMarkdown {
		content = unfence(content)
	}
	if strings.TrimSpace(content) == "" {
		return "", nil, invalid(t, "the content is empty")
	}
	switch t {
	case parley.ArtifactReact:
		content = StripDocument(content)
		if err := checkReact(content); err != nil {
			return "", nil, err
		}
	case parley.ArtifactSVG:
		return CleanSVG(content)
	case parley.ArtifactCode:
		if strings.TrimSpace(language) == "" {
			return "", nil, invalid(t, "a code artifact needs its language (for example \"go\" or \"python\")")
		}
	case parley.ArtifactMermaid:
		if err := checkMermaid(content); err != nil {
			return "", nil, err
		}
	}
	return content, nil, nil
}

var fence = regexp.MustCompile("(?s)^\\s*```[A-Za-z0-9_+.-]*[ \\t]*\\n(.*?)\\n?```\\s*$")

// unfence returns the code inside a Markdown code fence that is the whole of s, or s.
func unfence(s string) string {
	if m := fence.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return s
}

var (
	docTags     = regexp.MustCompile(`(?is)<!doctype[^>]*>|</?html\b[^>]*>|</?body\b[^>]*>|<head\b[^>]*>.*?</head>|<meta\b[^>]*>|<title\b[^>]*>.*?</title>`)
	babelScript = regexp.MustCompile(`(?is)^\s*<script\b[^>]*>(.*)</script>\s*$`)
	cdnScript   = regexp.MustCompile(`(?is)<script\b[^>]*\bsrc\s*=[^>]*>\s*</script>`)
	rootDiv     = regexp.MustCompile(`(?is)<div\s+id\s*=\s*["']root["']\s*>\s*</div>`)
)

// StripDocument removes HTML document structure a model put around a React component (seed
// 003's stripHtmlDocumentStructure): DOCTYPE, html, head, body, script tags loading React from a
// CDN, the root div, and the script element holding the component. The component's own JSX is
// left alone: this runs on the markup around it, which is not part of a module.
func StripDocument(src string) string {
	trimmed := strings.TrimSpace(src)
	if !strings.HasPrefix(trimmed, "<") {
		return src // a module starts with code, not markup
	}
	out := docTags.ReplaceAllString(trimmed, "")
	out = cdnScript.ReplaceAllString(out, "")
	out = rootDiv.ReplaceAllString(out, "")
	if m := babelScript.FindStringSubmatch(out); m != nil {
		out = m[1]
	}
	return strings.TrimSpace(out) + "\n"
}

var mermaidStart = regexp.MustCompile(`^(graph|flowchart|sequenceDiagram|classDiagram(-v2)?|stateDiagram(-v2)?|erDiagram|gantt|pie|journey|gitGraph|mindmap|timeline|quadrantChart|requirementDiagram|C4Context|C4Container|C4Component|C4Dynamic|C4Deployment|xychart-beta|sankey-beta|block-beta|packet-beta|architecture-beta|kanban)\b`)

func checkMermaid(src string) error {
	for _, line := range strings.Split(src, "\n") {
		l := strings.TrimSpace(line)
		if l == "" || strings.HasPrefix(l, "%%") {
			continue
		}
		if l == "---" { // front matter: accept what follows
			return nil
		}
		if !mermaidStart.MatchString(l) {
			return invalid(parley.ArtifactMermaid, "the diagram must start with its type (flowchart TD, sequenceDiagram, classDiagram, gantt, …), not %q", truncate(l, 60))
		}
		return nil
	}
	return invalid(parley.ArtifactMermaid, "the diagram is empty")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8Start(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
