package jsonstr

import (
	"bytes"
	"encoding/json"
	"math"
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

// AppendFloat writes any finite float64 as json.Marshal does: random bits, and the numbers
// around the switches to and from exponent form.
func TestAppendFloatIsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	fs := []float64{0, math.Copysign(0, -1), 1, -1, 0.1, 1e-6, 9.99999e-7, 1e-7, 1e20, 1e21, 9.999999e20, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64, -2.5e-300}
	for range 50000 {
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		fs = append(fs, f, rng.NormFloat64()*math.Pow(10, float64(rng.IntN(60)-30)))
	}
	for _, f := range fs {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendFloat(nil, f); !bytes.Equal(got, want) {
			t.Fatalf("%v (%x): got %s, want %s", f, math.Float64bits(f), got, want)
		}
	}
}
