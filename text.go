package parley

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// TextKind is the class of a text field, which says which characters it may hold.
type TextKind int

const (
	// TextName is a one-line label: a title, a key or user name, a model or tool name, a frame
	// id. No control character at all (C0, DEL, C1) and no bidirectional override or isolate
	// (U+202A–U+202E, U+2066–U+2069), which would let a name rewrite what a terminal or a page
	// shows around it.
	TextName TextKind = iota
	// TextMessage is free text a person or a model wrote: newlines, carriage returns and tabs are
	// allowed; NUL and every other C0 or C1 control character, and DEL, are not.
	TextMessage
)

// CheckText is the one check of every text field Parley accepts from a client or an operator
// (HTTP bodies and query parameters, WebSocket frames, the CLI). It refuses invalid UTF-8 and the
// characters kind does not allow, with an ECInvalid error that names field, the character and its
// position, so a client can find it.
func CheckText(field, s string, kind TextKind) error {
	if !utf8.ValidString(s) {
		return Errorf(ECInvalid, "%s: not valid UTF-8", field)
	}
	for i, r := range s {
		if reason := refused(r, kind); reason != "" {
			return Errorf(ECInvalid, "%s: %s (U+%04X) at byte %d is not allowed", field, reason, r, i)
		}
	}
	return nil
}

// Allowed reports whether kind allows the character r (CheckText's rule, one character at a time).
func Allowed(r rune, kind TextKind) bool { return refused(r, kind) == "" }

// refused says why kind does not allow r ("" when it does).
func refused(r rune, kind TextKind) string {
	switch {
	case r == 0:
		return "the NUL character"
	case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
		if kind == TextMessage && (r == '\n' || r == '\r' || r == '\t') {
			return ""
		}
		return "a control character"
	case isBidiControl(r):
		if kind == TextMessage {
			return ""
		}
		return "a bidirectional override or isolate"
	}
	return ""
}

// isBidiControl reports the explicit directional embeddings, overrides and isolates.
func isBidiControl(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069
}

// SafeText makes s safe to print on a terminal: control characters, bidirectional overrides and
// isolates and invalid UTF-8 bytes are written as Go escapes (\x1b, \u202e, \xff), and a backslash
// as \\, so that what is shown is exactly what is stored and nothing in it acts on the terminal.
// It is for values stored before CheckText refused them, and for anything else not checked.
func SafeText(s string) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || r == '\\' || refused(r, TextName) != "" {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r < 0x80 && refused(r, TextName) != "":
			fmt.Fprintf(&b, `\x%02x`, r)
		case refused(r, TextName) != "":
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += n
	}
	return b.String()
}
