package files

import (
	"bytes"
	"mime"
	"net/http"
	"path"
	"strings"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// sniffLen is how many leading bytes decide a media type, as http.DetectContentType reads.
const sniffLen = 512

// MaxNameBytes bounds a cleaned file name.
const MaxNameBytes = 255

// textTypes are the media types of text files known by their extension, used only when the bytes
// are valid UTF-8 without NUL: the extension never makes binary bytes text.
var textTypes = map[string]string{
	".txt": "text/plain", ".text": "text/plain", ".log": "text/plain",
	".md": "text/markdown", ".markdown": "text/markdown",
	".csv": "text/csv", ".tsv": "text/tab-separated-values",
	".json": "application/json", ".jsonl": "application/jsonl", ".ndjson": "application/jsonl",
	".yaml": "application/yaml", ".yml": "application/yaml", ".toml": "application/toml",
	".xml": "text/xml", ".html": "text/html", ".htm": "text/html", ".css": "text/css", ".svg": "image/svg+xml",
	".go": "text/x-go", ".py": "text/x-python", ".js": "text/javascript", ".mjs": "text/javascript",
	".ts": "text/x-typescript", ".tsx": "text/x-typescript", ".jsx": "text/javascript",
	".java": "text/x-java", ".kt": "text/x-kotlin", ".c": "text/x-c", ".h": "text/x-c",
	".cc": "text/x-c++", ".cpp": "text/x-c++", ".hpp": "text/x-c++", ".cs": "text/x-csharp",
	".rs": "text/x-rust", ".rb": "text/x-ruby", ".php": "text/x-php", ".swift": "text/x-swift",
	".sh": "text/x-shellscript", ".bash": "text/x-shellscript", ".sql": "text/x-sql",
	".r": "text/x-r", ".lua": "text/x-lua", ".pl": "text/x-perl", ".scala": "text/x-scala",
	".ini": "text/plain", ".cfg": "text/plain", ".conf": "text/plain", ".env": "text/plain",
	".tex": "text/x-tex", ".rst": "text/x-rst", ".proto": "text/plain", ".diff": "text/x-diff", ".patch": "text/x-diff",
}

// imageTypes are the image types served inline and given to models as images. Others (SVG, which
// can hold scripts, among them) are downloads.
var imageTypes = map[string]bool{"image/png": true, "image/jpeg": true, "image/gif": true, "image/webp": true}

// Sniff returns the media type of a file from its first bytes (head), whether all its bytes are
// valid UTF-8 without NUL (isText), and its cleaned name, whose extension can only refine text.
// The client's Content-Type is never consulted.
func Sniff(head []byte, isText bool, name string) string {
	if len(head) > sniffLen {
		head = head[:sniffLen]
	}
	if bytes.HasPrefix(head, []byte("%PDF-")) {
		return "application/pdf"
	}
	detected := http.DetectContentType(head)
	base, _, _ := mime.ParseMediaType(detected)
	if !isText {
		if strings.HasPrefix(base, "text/") {
			// The first bytes looked like text but the rest is not valid UTF-8 or holds NUL.
			return "application/octet-stream"
		}
		return detected
	}
	if base == "text/plain" {
		if t, ok := textTypes[strings.ToLower(path.Ext(name))]; ok {
			base = t
		}
	}
	if strings.HasPrefix(base, "text/") {
		return base + "; charset=utf-8"
	}
	return base
}

// BaseType is the media type without parameters.
func BaseType(mediaType string) string {
	base, _, err := mime.ParseMediaType(mediaType)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(strings.Split(mediaType, ";")[0]))
	}
	return base
}

// IsImage reports whether a file of mediaType is an image served inline and shown to models.
func IsImage(mediaType string) bool { return imageTypes[BaseType(mediaType)] }

// IsText reports whether a file of mediaType is text a model is given as text.
func IsText(mediaType string) bool {
	b := BaseType(mediaType)
	if strings.HasPrefix(b, "text/") {
		return true
	}
	switch b {
	case "application/json", "application/jsonl", "application/yaml", "application/toml", "application/xml", "image/svg+xml":
		return true
	}
	return false
}

// IsPDF reports whether mediaType is a PDF document.
func IsPDF(mediaType string) bool { return BaseType(mediaType) == "application/pdf" }

// CleanName makes a client's file name safe to store and show: its last path element (either
// slash), without control, bidirectional-override or invalid UTF-8 characters, without leading
// dots and spaces, at most MaxNameBytes bytes (the extension kept when it is short). An empty
// result is "file".
func CleanName(name string) string {
	name = strings.ToValidUTF8(name, "")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if !parley.Allowed(r, parley.TextName) || r == utf8.RuneError {
			return -1
		}
		return r
	}, name)
	name = strings.TrimLeft(strings.TrimSpace(name), ". ")
	name = strings.TrimSpace(name)
	if len(name) > MaxNameBytes {
		ext := path.Ext(name)
		if len(ext) > 16 {
			ext = ""
		}
		name = cutUTF8(name[:len(name)-len(ext)], MaxNameBytes-len(ext)) + ext
	}
	if name == "" {
		return "file"
	}
	return name
}

// cutUTF8 returns the longest prefix of s of at most n bytes that ends on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// textCheck follows a stream and tells whether it is all valid UTF-8 without NUL, in constant
// memory, and keeps its first sniffLen bytes.
type textCheck struct {
	head []byte
	pend []byte // the start of a character cut by a write boundary
	bad  bool
}

func (c *textCheck) Write(p []byte) (int, error) {
	n := len(p)
	if len(c.head) < sniffLen {
		c.head = append(c.head, p[:min(len(p), sniffLen-len(c.head))]...)
	}
	if c.bad {
		return n, nil
	}
	if bytes.IndexByte(p, 0) >= 0 {
		c.bad = true
		return n, nil
	}
	for len(c.pend) > 0 && len(p) > 0 {
		c.pend = append(c.pend, p[0])
		p = p[1:]
		if utf8.FullRune(c.pend) {
			if r, size := utf8.DecodeRune(c.pend); r == utf8.RuneError && size <= 1 || size != len(c.pend) {
				c.bad = true
				return n, nil
			}
			c.pend = c.pend[:0]
		}
	}
	if len(c.pend) > 0 {
		return n, nil // still incomplete
	}
	// A character cut at the end waits for the next write.
	j := len(p) - 1
	for j >= 0 && j > len(p)-4 && !utf8.RuneStart(p[j]) {
		j--
	}
	if j >= 0 && !utf8.FullRune(p[j:]) {
		c.pend = append(c.pend, p[j:]...)
		p = p[:j]
	}
	if !utf8.Valid(p) {
		c.bad = true
	}
	return n, nil
}

// text reports whether everything written was valid UTF-8 without NUL.
func (c *textCheck) text() bool { return !c.bad && len(c.pend) == 0 }
