package rowcodec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// encoded returns evs with their JSON as json.Marshal makes it.
func encoded(t *testing.T, evs []parley.Event) []parley.EncodedEvent {
	t.Helper()
	out, err := EncodeEvents(evs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// decodeRows reads back every row of rows after after.
func decodeRows(t *testing.T, rows []EventBatch, after int64) []parley.Event {
	t.Helper()
	var out []parley.Event
	for _, r := range rows {
		var err error
		if out, err = DecodeEventBatch(out, r.Data, after, 1000); err != nil {
			t.Fatalf("row %d..%d %s: %v", r.First, r.Last, r.Data, err)
		}
	}
	return out
}

// A chat's events in the compact form: one row without the run's and the session's ids and the
// numbers in each event, which read back as they were.
func TestCompactEventBatchesReadBackExactly(t *testing.T) {
	const run, session = "0197a1b2-0000-7000-8000-000000000001", "0197a1b2-0000-7000-8000-000000000002"
	ok := true
	user := &parley.Message{ID: "m1", SessionID: session, Seq: 3, RunID: run, Role: parley.RoleUser, Content: parley.Text("hi <&> \u2028 \"q\"")}
	evs := []parley.Event{
		{Seq: 41, Type: parley.EventStart, Model: "m"},
		{Seq: 42, Type: parley.EventRecord, Message: user},
		{Seq: 43, Type: parley.EventChunk, Content: "a\x00b\\\"c\" ,\"run_id\":\"x\""},
		{Seq: 44, Type: parley.EventToolResult, Message: &parley.Message{Role: parley.RoleTool, Success: &ok}},
		{Seq: 45, Type: parley.EventTodoUpdate, Todos: []parley.Todo{}},
		{Seq: 46, Type: parley.EventDone, FinishReason: parley.FinishStop},
	}
	for i := range evs {
		evs[i].RunID, evs[i].SessionID = run, session
	}
	enc := encoded(t, evs)
	rows := CompactEventBatches(enc, nil)
	if len(rows) != 1 || rows[0].First != 41 || rows[0].Last != 46 {
		t.Fatalf("rows: %+v", rows)
	}
	data := rows[0].Data
	if data[0] != '{' || bytes.Count(data, []byte(run)) != 2 || bytes.Count(data, []byte(session)) != 2 {
		t.Fatalf("not compact (each id once in the row, once in the message): %s", data)
	}
	array := EventBatches(enc, nil)[0].Data
	if len(data) >= len(array)-5*100 {
		t.Fatalf("compact row %d bytes, the array %d", len(data), len(array))
	}
	if !json.Valid(data) {
		t.Fatalf("not JSON: %s", data)
	}
	if got := decodeRows(t, rows, 0); !reflect.DeepEqual(got, evs) {
		t.Fatalf("read back:\n%+v\nwant\n%+v", got, evs)
	}
	if got := decodeRows(t, rows, 43); !reflect.DeepEqual(got, evs[3:]) {
		t.Fatalf("after 43: %+v", got)
	}
	// What the array holds reads back the same.
	if got := decodeRows(t, EventBatches(enc, nil), 0); !reflect.DeepEqual(got, evs) {
		t.Fatalf("the array read back: %+v", got)
	}
}

// Rows the compact form cannot hold stay JSON arrays, and every row reads back as it was given.
func TestCompactEventBatchesFallBackToArrays(t *testing.T) {
	ev := func(seq int64, run, session string) parley.Event {
		return parley.Event{Seq: seq, Type: parley.EventChunk, RunID: run, SessionID: session, Content: "c"}
	}
	for _, tc := range []struct {
		name    string
		evs     []parley.EncodedEvent
		compact []bool // the form of each row
	}{
		{"two runs", encoded(t, []parley.Event{ev(1, "r1", "s"), ev(2, "r2", "s")}), []bool{false}},
		{"two sessions", encoded(t, []parley.Event{ev(1, "r", "s1"), ev(2, "r", "s2")}), []bool{false}},
		{"ids with escapes", encoded(t, []parley.Event{ev(1, "r\"<", "s\\\u2028"), ev(2, "r\"<", "s\\\u2028")}), []bool{true}},
		{"empty ids", encoded(t, []parley.Event{ev(1, "", ""), ev(2, "", "")}), []bool{true}},
		{"a gap: two rows, each on its own", encoded(t, []parley.Event{ev(1, "r1", "s"), ev(3, "r2", "s"), ev(4, "r2", "s")}), []bool{true, true}},
		{"members in another order", []parley.EncodedEvent{
			{Seq: 1, JSON: []byte(`{"seq":1,"type":"chunk","session_id":"s","run_id":"r"}`)},
		}, []bool{false}},
		{"JSON numbered apart from its event", []parley.EncodedEvent{
			{Seq: 2, JSON: []byte(`{"seq":7,"type":"chunk","run_id":"r","session_id":"s"}`)},
		}, []bool{false}},
		{"a number with a leading zero", []parley.EncodedEvent{
			{Seq: 7, JSON: []byte(`{"seq":07,"type":"chunk","run_id":"r","session_id":"s"}`)},
		}, []bool{false}},
		{"no type", []parley.EncodedEvent{{Seq: 1, JSON: []byte(`{"seq":1,"run_id":"r","session_id":"s"}`)}}, []bool{false}},
		{"a truncated head", []parley.EncodedEvent{{Seq: 1, JSON: []byte(`{"seq":1,"type":"chunk","run_id":"r","session_id":"s`)}}, []bool{false}},
		{"no members after the head", []parley.EncodedEvent{{Seq: 1, JSON: []byte(`{"seq":1,"type":"chunk","run_id":"r","session_id":"s"}`)}}, []bool{true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := CompactEventBatches(tc.evs, nil)
			if len(rows) != len(tc.compact) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(tc.compact), rows)
			}
			for i, r := range rows {
				if got := r.Data[0] == '{'; got != tc.compact[i] {
					t.Fatalf("row %d compact %v, want %v: %s", i, got, tc.compact[i], r.Data)
				}
			}
			var want []parley.Event
			for _, e := range tc.evs {
				var ev parley.Event
				if err := json.Unmarshal(e.JSON, &ev); err != nil {
					want = nil // not JSON: compared with the array's reading below
					break
				}
				want = append(want, ev)
			}
			if want == nil {
				return
			}
			if got := decodeRows(t, rows, 0); !reflect.DeepEqual(got, want) {
				t.Fatalf("read back:\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

// A retried write skips what is stored, and a number given twice is stored once, in either form.
func TestCompactEventBatchesSkipWhatIsStored(t *testing.T) {
	var evs []parley.Event
	for seq := range int64(6) {
		evs = append(evs, parley.Event{Seq: seq + 1, Type: parley.EventChunk, RunID: "r", SessionID: "s", Content: strings.Repeat("x", int(seq))})
	}
	enc := encoded(t, evs)
	enc = append(enc[:4:4], append([]parley.EncodedEvent{enc[3]}, enc[4:]...)...) // 4 twice
	for _, f := range []func([]parley.EncodedEvent, Covered) []EventBatch{EventBatches, CompactEventBatches} {
		rows := f(enc, RangesCover([][2]int64{{2, 3}}))
		if len(rows) != 2 || rows[0].First != 1 || rows[0].Last != 1 || rows[1].First != 4 || rows[1].Last != 6 {
			t.Fatalf("rows: %+v", rows)
		}
		if got, want := decodeRows(t, rows, 0), append(evs[:1:1], evs[3:]...); !reflect.DeepEqual(got, want) {
			t.Fatalf("read back %+v, want %+v", got, want)
		}
	}
}

// A row that is not JSON (either form) fails to decode, and does not panic.
func TestDecodeEventBatchRefusesBadRows(t *testing.T) {
	for _, data := range []string{``, `{`, `{"e":{}}`, `{"f":"1","e":[]}`, `[`, `[{"seq":"x"}]`} {
		if _, err := DecodeEventBatch(nil, []byte(data), 0, 10); err == nil {
			t.Errorf("%q decoded", data)
		}
	}
}

// A short chat's 7 events joined into a row, as a JSON array and in the compact form.
func BenchmarkEventBatchesChat(b *testing.B)        { benchEventBatches(b, EventBatches) }
func BenchmarkCompactEventBatchesChat(b *testing.B) { benchEventBatches(b, CompactEventBatches) }

func benchEventBatches(b *testing.B, f func([]parley.EncodedEvent, Covered) []EventBatch) {
	const run, session = "0197a1b2-0000-7000-8000-000000000001", "0197a1b2-0000-7000-8000-000000000002"
	msg := func(role parley.Role, text string) *parley.Message {
		return &parley.Message{ID: "0197a1b2-0000-7000-8000-000000000003", SessionID: session, RunID: run, Role: role, Content: parley.Text(text)}
	}
	evs := []parley.Event{{Type: parley.EventStart, Model: "m"}, {Type: parley.EventRecord, Message: msg(parley.RoleUser, "hello")},
		{Type: parley.EventChunk, Content: "An answer "}, {Type: parley.EventChunk, Content: "of a few "},
		{Type: parley.EventChunk, Content: "words."}, {Type: parley.EventRecord, Message: msg(parley.RoleAssistant, "An answer of a few words.")},
		{Type: parley.EventDone, FinishReason: parley.FinishStop}}
	for i := range evs {
		evs[i].Seq, evs[i].RunID, evs[i].SessionID = int64(1000+i), run, session
	}
	enc, err := EncodeEvents(evs)
	if err != nil {
		b.Fatal(err)
	}
	var size int
	b.ReportAllocs()
	for b.Loop() {
		size = len(f(enc, nil)[0].Data)
	}
	b.ReportMetric(float64(size), "bytes/row")
}
