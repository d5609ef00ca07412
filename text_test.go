package parley_test

import (
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

func TestCheckText(t *testing.T) {
	cases := []struct {
		name, s string
		kind    parley.TextKind
		reason  string // "" when allowed
	}{
		{"plain name", "Trip to Kyōto 🗾", parley.TextName, ""},
		{"right-to-left letters", "שלום עולם", parley.TextName, ""},
		{"NUL in a name", "a\x00b", parley.TextName, "NUL character (U+0000) at byte 1"},
		{"NUL in a message", "a\x00b", parley.TextMessage, "NUL character"},
		{"ANSI escape in a name", "\x1b[31mred", parley.TextName, "control character (U+001B) at byte 0"},
		{"ANSI escape in a message", "x\x1b[2J", parley.TextMessage, "control character (U+001B)"},
		{"newline in a name", "two\nlines", parley.TextName, "control character (U+000A)"},
		{"tab in a name", "a\tb", parley.TextName, "control character (U+0009)"},
		{"newline, CR and tab in a message", "line one\r\n\tline two", parley.TextMessage, ""},
		{"DEL", "a\x7fb", parley.TextMessage, "control character (U+007F)"},
		{"C1 control", "a\u009bb", parley.TextMessage, "control character (U+009B)"},
		{"bidi override in a name", "invoice\u202egnp.exe", parley.TextName, "bidirectional override or isolate (U+202E)"},
		{"bidi isolate in a name", "a\u2066b", parley.TextName, "(U+2066)"},
		{"first bidi embedding", "a\u202ab", parley.TextName, "(U+202A)"},
		{"last bidi isolate", "a\u2069b", parley.TextName, "(U+2069)"},
		{"bidi override in a message", "quote: \u202eabc\u202c", parley.TextMessage, ""},
		{"invalid UTF-8", "a\xffb", parley.TextMessage, "not valid UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := parley.CheckText("field", c.s, c.kind)
			if c.reason == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(parley.MessageOf(err), c.reason) || !strings.HasPrefix(parley.MessageOf(err), "field: ") {
				t.Fatalf("got %v, want an invalid-input error on field with %q", err, c.reason)
			}
		})
	}
}

func TestSafeText(t *testing.T) {
	cases := []struct{ in, want string }{
		{"laptop", "laptop"},
		{"Kyōto 🗾", "Kyōto 🗾"},
		{"\x1b[2J\x1b[31mpwned", `\x1b[2J\x1b[31mpwned`},
		{"a\x00b\tc\nd", `a\x00b\x09c\x0ad`},
		{"invoice\u202egnp.exe", `invoice\u202egnp.exe`},
		{"c1\u009b", `c1\u009b`},
		{"bad\xff", `bad\xff`},
		{`back\slash`, `back\\slash`}, // so that an escape shown is never ambiguous
	}
	for _, c := range cases {
		if got := parley.SafeText(c.in); got != c.want {
			t.Errorf("SafeText(%q) = %q, want %q", c.in, got, c.want)
		}
		if err := parley.CheckText("x", parley.SafeText(c.in), parley.TextName); err != nil {
			t.Errorf("SafeText(%q) is not a safe name: %v", c.in, err)
		}
	}
}
