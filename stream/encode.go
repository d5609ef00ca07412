package stream

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// encodeEvent returns ev's JSON, as json.Marshal writes it. The events of a streamed answer are
// mostly text deltas (chunk, reasoning) with a few plain ones around them (start, status, done):
// events whose only fields are strings and numbers are written here directly, which costs a
// fraction of encoding/json's reflection; the others go through json.Marshal.
func encodeEvent(ev *parley.Event) ([]byte, error) {
	if !plainEvent(ev) {
		return json.Marshal(ev)
	}
	n := 64 + len(ev.Type) + len(ev.RunID) + len(ev.SessionID) + len(ev.Model) + len(ev.Content) + len(ev.State) + len(ev.FinishReason)
	b := make([]byte, 0, n+n/8)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, string(ev.Type))
	b = append(b, `,"run_id":`...)
	b = appendString(b, ev.RunID)
	b = append(b, `,"session_id":`...)
	b = appendString(b, ev.SessionID)
	if ev.Model != "" {
		b = append(b, `,"model":`...)
		b = appendString(b, ev.Model)
	}
	if ev.Content != "" {
		b = append(b, `,"content":`...)
		b = appendString(b, ev.Content)
	}
	if ev.State != "" {
		b = append(b, `,"state":`...)
		b = appendString(b, ev.State)
	}
	if ev.FinishReason != "" {
		b = append(b, `,"finish_reason":`...)
		b = appendString(b, ev.FinishReason)
	}
	if ev.Iterations != 0 {
		b = append(b, `,"iterations":`...)
		b = strconv.AppendInt(b, int64(ev.Iterations), 10)
	}
	return append(b, '}'), nil
}

// plainEvent reports whether ev has none of the fields encodeEvent leaves to json.Marshal.
func plainEvent(ev *parley.Event) bool {
	return ev.Message == nil && ev.ToolCalls == nil && ev.ToolCall == nil && ev.Usage == nil && ev.Error == nil &&
		ev.Todos == nil && ev.Memory == nil && ev.Artifact == nil && ev.WebSearch == nil && ev.Image == nil && ev.Approval == nil
}

const hexDigits = "0123456789abcdef"

// plainByte tells the ASCII bytes a JSON string holds as they are (encoding/json's htmlSafeSet).
var plainByte = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendString appends s as a JSON string, escaped as encoding/json escapes it (HTML
// characters, U+2028 and U+2029 as \u escapes; invalid UTF-8 as U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plainByte[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
