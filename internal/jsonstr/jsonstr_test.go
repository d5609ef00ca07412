package jsonstr

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"
)

// Append writes any text as json.Marshal does, AppendNoHTML as an Encoder that does not escape
// HTML does: random bytes and runes, the ones each escapes most of all.
func TestAppendIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	special := []rune{'"', '\\', '<', '>', '&', '\n', '\r', '\t', '\b', '\f', 0, 0x1f, 0x7f, 0x80, 0xff, '\u2028', '\u2029', 0xfffd, 0x10ffff, 'é', '日'}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	for i := range 20000 {
		var s []byte
		for range rng.IntN(24) {
			switch rng.IntN(3) {
			case 0:
				s = append(s, byte(rng.IntN(256)))
			case 1:
				s = append(s, string(special[rng.IntN(len(special))])...)
			default:
				s = append(s, byte('a'+rng.IntN(26)))
			}
		}
		want, _ := json.Marshal(string(s))
		if got := Append(nil, string(s)); !bytes.Equal(got, want) {
			t.Fatalf("Append, case %d, %q:\n got %s\nwant %s", i, s, got, want)
		}
		buf.Reset()
		if err := enc.Encode(string(s)); err != nil {
			t.Fatal(err)
		}
		want = bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
		if got := AppendNoHTML(nil, string(s)); !bytes.Equal(got, want) {
			t.Fatalf("AppendNoHTML, case %d, %q:\n got %s\nwant %s", i, s, got, want)
		}
	}
}
