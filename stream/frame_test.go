package stream

import (
	"reflect"
	"runtime"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// A chunk's frame costs its JSON and a small Frame, not a whole parley.Event beside the JSON: the
// frames of a streamed answer are what a run holds while the store takes them (issue 25). With
// a parley.Event in it a frame was 320 bytes before its JSON (144 bytes for this chunk); now it
// is 112.
func TestAChunksFrameHoldsNoWholeEvent(t *testing.T) {
	if raceOn {
		t.Skip("the race detector adds allocations of its own")
	}
	h := New(Options{})
	ev := parley.Event{Seq: 1234, Type: parley.EventChunk, RunID: parley.NewID(), SessionID: parley.NewID(), Content: "tok "}
	const n = 2000
	frames := make([]*Frame, n)
	perFrame := uint64(1 << 62)
	for range 3 { // the least of three: another goroutine may allocate meanwhile
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range frames {
			frames[i] = h.frame(ev)
		}
		runtime.ReadMemStats(&after)
		perFrame = min(perFrame, (after.TotalAlloc-before.TotalAlloc)/n)
	}
	runtime.KeepAlive(frames)
	if json := uint64(cap(frames[0].JSON)); perFrame > json+160 {
		t.Fatalf("a chunk's frame allocates %d bytes, %d of them beside its %d bytes of JSON; want at most 160 beside it", perFrame, perFrame-json, json)
	}
}

// Frame.size counts what a frame holds, so that the ring's bounds and the backlog's budget are
// bounds of memory: a chunk's frame is counted within a tenth of what it allocates (the
// allocator rounds up to its size classes; main counted a 4-byte chunk's 468 bytes as 608).
func TestFrameSizeCountsWhatItAllocates(t *testing.T) {
	if raceOn {
		t.Skip("the race detector adds allocations of its own")
	}
	h := New(Options{})
	for _, content := range []string{"tok ", strings.Repeat("a", 1000)} {
		ev := parley.Event{Seq: 99, Type: parley.EventChunk, RunID: parley.NewID(), SessionID: parley.NewID(), Content: content}
		ev.Content = string([]byte(content)) // the frame's own copy, as a model's text is
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		f := h.frame(ev)
		runtime.ReadMemStats(&after)
		got := int(after.TotalAlloc - before.TotalAlloc + uint64(len(content)))
		if size := f.size(); size < got-got/10 || size > got+got/10 {
			t.Errorf("a chunk of %d bytes: Frame.size is %d, its frame allocates %d (and its text)", len(content), size, got)
		}
	}
}

// A frame gives back the event it was made of, whichever of its fields are set: a text delta
// with any field beside its number, run, session and text is kept whole (a field added to
// parley.Event is not lost in the compact form).
func TestFrameEventIsTheEventAppended(t *testing.T) {
	base := parley.Event{Seq: 7, Type: parley.EventChunk, RunID: "r1", SessionID: "s1", Content: "hi"}
	for _, typ := range []parley.EventType{parley.EventChunk, parley.EventReasoning} {
		ev := base
		ev.Type = typ
		f := NewFrame(ev, []byte(`{}`))
		if f.ev != nil {
			t.Errorf("a %s frame keeps a whole event", typ)
		}
		if got := f.Event(); !reflect.DeepEqual(got, ev) {
			t.Errorf("a %s frame gives %+v, want %+v", typ, got, ev)
		}
	}
	rt := reflect.TypeFor[parley.Event]()
	for i := range rt.NumField() {
		field := rt.Field(i)
		switch field.Name {
		case "Seq", "Type", "RunID", "SessionID", "Content":
			continue
		}
		ev := base
		v := reflect.ValueOf(&ev).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString("x")
		case reflect.Int, reflect.Int64:
			v.SetInt(3)
		case reflect.Pointer:
			v.Set(reflect.New(field.Type.Elem()))
		case reflect.Slice:
			v.Set(reflect.MakeSlice(field.Type, 0, 0)) // empty but not nil: Todos sends []
		default:
			t.Fatalf("parley.Event.%s: a %s field this test does not set", field.Name, v.Kind())
		}
		f := NewFrame(ev, []byte(`{}`))
		if got := f.Event(); !reflect.DeepEqual(got, ev) {
			t.Errorf("a chunk with %s set: the frame gives %+v, want %+v", field.Name, got, ev)
		}
	}
	done := parley.Event{Seq: 9, Type: parley.EventStatus, RunID: "r1", SessionID: "s1", State: parley.RunRecovered}
	if f := NewFrame(done, []byte(`{}`)); f.state() != parley.RunRecovered || !reflect.DeepEqual(f.Event(), done) {
		t.Errorf("a status frame gives %+v", f.Event())
	}
}

// A frame that keeps its event whole (every event but a text delta: a run's start, records,
// usage, done) is one allocation, the Frame and its copy of the event together; on main it was
// two, the Frame and then the event.
func TestAWholeEventsFrameIsOneAllocation(t *testing.T) {
	if raceOn {
		t.Skip("the race detector adds allocations of its own")
	}
	ev := parley.Event{Seq: 3, Type: parley.EventUsage, RunID: "r1", SessionID: "s1", Usage: &parley.Usage{PromptTokens: 1}}
	b := []byte(`{}`)
	var f *Frame
	if n := testing.AllocsPerRun(200, func() { f = NewFrame(ev, b) }); n != 1 {
		t.Errorf("a usage event's frame: %v allocations, want 1", n)
	}
	if f.ev == &ev || !reflect.DeepEqual(f.Event(), ev) {
		t.Errorf("the frame gives %+v, want a copy of %+v", f.Event(), ev)
	}
}
