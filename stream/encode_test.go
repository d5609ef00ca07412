package stream

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"
	"time"

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
		{Seq: 11, Type: parley.EventUsage, RunID: "r1", SessionID: "s1", Usage: &parley.Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3, ReasoningTokens: 4, CachedTokens: 5, Cost: 0.000123}},
		{Seq: 12, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{Role: parley.RoleAssistant}},
		{Seq: 13, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{Role: parley.RoleUser, Content: parley.Parts(parley.Part{Type: "text", Text: "a"})}},
		{Seq: 14, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function"}}}},
		{Seq: 15, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{Role: parley.RoleAssistant, Content: parley.Text(""), ToolCalls: []parley.ToolCall{}}},
		{Seq: 17, Type: parley.EventUsage, RunID: "r1", SessionID: "s1", Usage: &parley.Usage{Cost: 1e-7}},
		{Seq: 18, Type: parley.EventUsage, RunID: "r1", SessionID: "s1", Usage: &parley.Usage{Cost: -2.5e21}},
		{Seq: 19, Type: parley.EventRecord, RunID: "r1", SessionID: "s1", Message: &parley.Message{
			Role: parley.RoleAssistant, Content: parley.Text("You said: <hi> & \"bye\"\n"), Name: "n\u2028", ToolCallID: "call_1",
			Reasoning: "because", ID: "m1", SessionID: "s1", Seq: 2, RunID: "r1", Model: "openai/m", LatencyMS: 12,
			Usage: &parley.Usage{PromptTokens: 849, CompletionTokens: 54, TotalTokens: 903, Cost: 3}, Success: new(bool),
			ResourceID: "res", Server: "mcp", ParentID: "m0", Error: parley.ECUpstream,
			CreatedAt: time.Date(2026, 11, 24, 20, 24, 48, 573700000, time.FixedZone("x", 3600)),
		}},
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

// A message or a usage with any mix of fields encodes as json.Marshal encodes it, whether
// encodeEvent writes it or leaves it to json.Marshal.
func TestEncodeEventMessagesAreJSONMarshal(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"", "a", "<&>", "line\nbreak", "\xff bad", "é \u2028"}
	str := func() string { return texts[rng.IntN(len(texts))] }
	i64 := func() int64 { return []int64{0, 1, -1, 903, math.MaxInt64}[rng.IntN(5)] }
	usage := func() *parley.Usage {
		if rng.IntN(3) == 0 {
			return nil
		}
		costs := []float64{0, 0.5, 1e-7, 1.5e-6, 123456.789, 1e21, 2e20, -3e-9, math.NaN(), math.Inf(1), rng.Float64(), rng.NormFloat64() * 1e-5}
		return &parley.Usage{PromptTokens: i64(), CompletionTokens: i64(), TotalTokens: i64(), ReasoningTokens: i64(), CachedTokens: i64(), Cost: costs[rng.IntN(len(costs))]}
	}
	times := []time.Time{{}, time.Date(2026, 11, 24, 20, 24, 48, 573700000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("", -5*3600)), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range 20000 {
		var content parley.Content
		switch rng.IntN(4) {
		case 0: // null
		case 1:
			content = parley.Parts(parley.Part{Type: "text", Text: str()})
		default:
			content = parley.Text(str())
		}
		var success *bool
		if rng.IntN(3) == 0 {
			success = new(rng.IntN(2) == 0)
		}
		m := &parley.Message{Role: parley.Role(str()), Content: content, Name: str(), ToolCallID: str(), Reasoning: str(),
			ID: str(), SessionID: str(), Seq: i64(), RunID: str(), Model: str(), LatencyMS: i64(), Usage: usage(), Success: success,
			ResourceID: str(), Server: str(), ParentID: str(), Error: parley.ErrorCode(str()), CreatedAt: times[rng.IntN(len(times))]}
		if rng.IntN(8) == 0 {
			m.ToolCalls = []parley.ToolCall{{ID: str(), Type: "function"}}
		}
		ev := parley.Event{Seq: i64(), Type: parley.EventRecord, RunID: str(), SessionID: str(), Model: str(), Content: str(), State: str(), FinishReason: str(), Iterations: int(i64() % 100)}
		switch rng.IntN(3) {
		case 0:
			ev.Message = m
		case 1:
			ev.Usage = usage()
		default:
			ev.Message, ev.Usage = m, usage()
		}
		want, wantErr := json.Marshal(&ev)
		got, err := encodeEvent(&ev)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("case %d:\n got %s (%v)\nwant %s (%v)", i, got, err, want, wantErr)
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

// BenchmarkEncodeRecord encodes the record event of an answer (bench/gateway's) for the clients.
func BenchmarkEncodeRecord(b *testing.B) {
	ev := parley.Event{Seq: 7, Type: parley.EventRecord, RunID: "01a20f3b-84b9-7ee2-9143-7de29ae6883b", SessionID: "01a20f3b-84b9-7e50-8689-9e77072cff17",
		Message: &parley.Message{Role: parley.RoleAssistant, Content: parley.Text("You said: Tell me something about streaming servers, please.\n\n(This is Parley's offline mock model: it can use the calculator and the clock. Configure a real provider with OPENAI_API_KEY or PARLEY_OPENAI_BASE_URL.)"),
			ID: "01a20f3b-84bd-7aae-a7c5-96a1209be44d", SessionID: "01a20f3b-84b9-7e50-8689-9e77072cff17", Seq: 2, RunID: "01a20f3b-84b9-7ee2-9143-7de29ae6883b",
			Model: "openai/bench-model", LatencyMS: 2, Usage: &parley.Usage{PromptTokens: 849, CompletionTokens: 54, TotalTokens: 903},
			ParentID: "01a20f3b-84b9-7ec5-afaf-5f28ef75c218", CreatedAt: time.Date(2026, 11, 24, 20, 24, 48, 573700000, time.UTC)}}
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
