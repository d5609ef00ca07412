package httpapi

import (
	"unicode/utf8"

	"github.com/parleyhq/parley/chat"
)

// fastChatRequest decodes the common shape of a chat request's body, an object of string members
// (message, session_id, model, project_id, parent_id), without encoding/json: a json.Decoder, its
// buffer and its reflection were about 1.5% of Parley's CPU a chat at 32 in flight. It reads only
// what it reads exactly as decodeStrict would (an object, each member once, named exactly, a
// string of valid UTF-8 without \u escapes or control characters, nothing after it but white
// space) and returns false for anything else, leaving v as it found it: decodeStrict then
// decodes the body, and says what is wrong with it. TestFastChatRequestAsDecodeStrict and
// FuzzFastChatRequest hold that.
func fastChatRequest(data []byte, v *chat.Request) bool {
	var out chat.Request
	var seen [5]bool
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		i++
	} else {
		for {
			if i >= len(data) || data[i] != '"' {
				return false
			}
			key, j, ok := fastKey(data, i)
			if !ok {
				return false
			}
			i = skipSpace(data, j)
			if i >= len(data) || data[i] != ':' {
				return false
			}
			i = skipSpace(data, i+1)
			if i >= len(data) || data[i] != '"' {
				return false // null, a number, an array…: encoding/json's to decode or refuse
			}
			val, j, ok := fastString(data, i)
			if !ok {
				return false
			}
			var f *string
			var n int
			switch string(key) { // no string made: the compiler compares the bytes
			case "message":
				f, n = &out.Message, 0
			case "session_id":
				f, n = &out.SessionID, 1
			case "model":
				f, n = &out.Model, 2
			case "project_id":
				f, n = &out.ProjectID, 3
			case "parent_id":
				f, n = &out.ParentID, 4
			default:
				return false // another field, a name in other case, or an unknown one
			}
			if seen[n] {
				return false
			}
			seen[n] = true
			*f = val
			i = skipSpace(data, j)
			if i >= len(data) {
				return false
			}
			if data[i] == '}' {
				i++
				break
			}
			if data[i] != ',' {
				return false
			}
			i = skipSpace(data, i+1)
		}
	}
	if skipSpace(data, i) != len(data) {
		return false
	}
	*v = out
	return true
}

// skipSpace returns the index of the first byte of data at or after i that is not JSON white
// space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// fastKey reads the member name starting at data[i] (a quote) and returns its bytes and the
// index after it; not ok for a name with an escape or a control character.
func fastKey(data []byte, i int) (key []byte, end int, ok bool) {
	for j := i + 1; j < len(data); j++ {
		switch c := data[j]; {
		case c == '"':
			return data[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// fastString reads the JSON string starting at data[i] (a quote) and returns it and the index
// after it; not ok for a string it does not read exactly as encoding/json would (a \u escape,
// invalid UTF-8) or one that is not valid JSON (a control character, another escape, no end).
func fastString(data []byte, i int) (s string, end int, ok bool) {
	i++
	start := i
	// Without escapes, the string is the bytes between the quotes.
	for i < len(data) {
		c := data[i]
		if c == '"' {
			if !utf8.Valid(data[start:i]) {
				return "", 0, false
			}
			return string(data[start:i]), i + 1, true
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", 0, false
		}
		i++
	}
	buf := make([]byte, 0, len(data)-start)
	buf = append(buf, data[start:i]...)
	for i < len(data) {
		c := data[i]
		switch {
		case c == '"':
			if !utf8.Valid(buf) {
				return "", 0, false
			}
			return string(buf), i + 1, true
		case c < 0x20:
			return "", 0, false
		case c != '\\':
			buf = append(buf, c)
			i++
			continue
		}
		if i+1 >= len(data) {
			return "", 0, false
		}
		switch data[i+1] {
		case '"', '\\', '/':
			buf = append(buf, data[i+1])
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		default:
			return "", 0, false // \u (surrogates, U+FFFD) and anything invalid: encoding/json's
		}
		i += 2
	}
	return "", 0, false
}
