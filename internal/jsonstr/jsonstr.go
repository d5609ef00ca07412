// Package jsonstr writes JSON strings (and floating-point numbers) as encoding/json's Marshal
// writes them, without its reflection: the hot paths that write a few known fields by hand use it.
package jsonstr

import (
	"math"
	"strconv"
	"unicode/utf8"
)

// AppendFloat appends a finite f as encoding/json writes a float64: the shortest decimal that
// reads back as f, in exponent form only below 1e-6 or from 1e21 on, with a one-digit negative
// exponent not padded ("1e-7", not "1e-07"). The caller checks f is finite (encoding/json
// refuses NaN and the infinities).
func AppendFloat(b []byte, f float64) []byte {
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// plainByte tells the ASCII bytes a JSON string holds as they are (encoding/json's htmlSafeSet).
var plainByte = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// plainByteNoHTML is plainByte with the HTML characters held as they are (encoding/json's
// safeSet).
var plainByteNoHTML = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// Append appends s as a JSON string, escaped as encoding/json escapes it (HTML
// characters, U+2028 and U+2029 as \u escapes; invalid UTF-8 as U+FFFD).
func Append(b []byte, s string) []byte { return appendWith(b, s, &plainByte) }

// AppendNoHTML appends s as a JSON string, escaped as an encoding/json Encoder with
// SetEscapeHTML(false) escapes it: as Append, but <, > and & as they are.
func AppendNoHTML(b []byte, s string) []byte { return appendWith(b, s, &plainByteNoHTML) }

func appendWith(b []byte, s string, plain *[utf8.RuneSelf]bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if plain[c] {
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
