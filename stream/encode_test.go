package stream

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"testing"

	parley "github.com/parleyhq/parley"
)

// Every event encodes as json.Marshal encodes it: the plain ones written directly, the others
// through json.Marshal.
func TestEncodeEventIsJSONMarshal(t *testing.T) {
	evs := []parley.Event{
		{Seq: 1, Type: parley.EventStart, RunID: "r1", SessionID: "s1", Model: "openai/gpt-4o-mini"},
		{Seq: 2, Type: parley.EventChunk, RunID: "r1", SessionID: "s1", Content: "Hello <b>world</b> & \"friends\"\n\t\\ \u2028\u2029 é 日本 \x00\x1f\x7f \b\f\r"},
		{Seq: 3, Type: parley.EventReasoning, RunID: "r1", SessionID: "s1", Content: "bad utf-8: \xff\xfe end \xe2\x80"},
		{Seq: 4, Type: parley.EventStatus, RunID: "r1", SessionID: "s1", State: parley.RunPaused},
		{Seq: 5, Type: parley.EventDone, RunID: "r1", SessionID: "s1", FinishReason: parley.FinishStop, Iterations: 3},
		{Seq: 6, Type: parley.EventChunk},
		{Seq: -7, Type: parley.EventUsage, RunID: "r1", SessionID: "s1", Usage: &parley.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}},
		{Seq: 8, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{Role: parley.RoleUser, Content: parley.Text("<hi>")}},
		{Seq: 9, Type: parley.EventTodoUpdate, RunID: "r1", SessionID: "s1", Todos: []parley.Todo{}},
		{Seq: 10, Type: parley.EventError, RunID: "r1", SessionID: "s1", Error: &parley.ErrorBody{Code: parley.ECInternal, Message: "x"}},
	}
	for _, ev := range evs {
		want, err := json.Marshal(&ev)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeEvent(&ev)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("event %d:\n got %s\nwant %s", ev.Seq, got, want)
		}
	}
}

// appendString escapes any text as encoding/json does: random bytes, random runes.
func TestAppendStringIsJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	special := []rune{'"', '\\', '<', '>', '&', '\n', '\r', '\t', '\b', '\f', 0, 0x1f, 0x7f, 0x80, 0xff, '\u2028', '\u2029', 0xfffd, 0x10ffff, 'é', '日'}
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
		if got := appendString(nil, string(s)); !bytes.Equal(got, want) {
			t.Fatalf("case %d, %q:\n got %s\nwant %s", i, s, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "<&>", "\u2028", "\xff", "a\"b\\c\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("%q:\n got %s\nwant %s", s, got, want)
		}
	})
}

// BenchmarkEncodeChunk encodes a chunk event (a model's text delta) for the clients.
func BenchmarkEncodeChunk(b *testing.B) {
	ev := parley.Event{Seq: 1234, Type: parley.EventChunk, RunID: "01a20d9d-cb5a-7b31-8da0-ece6060eef94",
		SessionID: "01a20d9d-cb5a-7b15-b3a1-4b47a72b1f43", Content: "arley's offline mock model: it can use the calculator and the clock. Con"}
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			json.Marshal(&ev)
		}
	})
	b.Run("encodeEvent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			encodeEvent(&ev)
		}
	})
}
