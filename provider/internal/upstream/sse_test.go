package upstream

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// timeout bounds every wait in these tests; it never asserts speed.
func timeout(t *testing.T) <-chan time.Time {
	t.Helper()
	return time.After(10 * time.Second)
}

type ev struct{ Type, Data string }

func readAll(r *SSEReader) ([]ev, error) {
	var out []ev
	for i := 0; i < 1000; i++ {
		e, err := r.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev{e.Type, string(e.Data)})
	}
	return out, errors.New("too many events")
}

func TestSSEReader(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []ev
		err  error
	}{
		{"LF", "data: a\n\ndata: b\n\n", []ev{{"", "a"}, {"", "b"}}, io.EOF},
		{"CRLF", "data: a\r\n\r\ndata: b\r\n\r\n", []ev{{"", "a"}, {"", "b"}}, io.EOF},
		{"CR", "data: a\r\rdata: b\r\r", []ev{{"", "a"}, {"", "b"}}, io.EOF},
		{"CRLF inside an event", "data: a\r\ndata: b\r\n\r\n", []ev{{"", "a\nb"}}, io.EOF},
		{"comments and keep-alives", ": OPENROUTER PROCESSING\n\n:\ndata: a\n: ping\n\n", []ev{{"", "a"}}, io.EOF},
		{"multi-line data", "data: a\ndata: b\ndata\n\n", []ev{{"", "a\nb\n"}}, io.EOF},
		{"no space after colon", "data:a\n\ndata:  b\n\n", []ev{{"", "a"}, {"", " b"}}, io.EOF},
		{"event type", "event: error\ndata: x\n\ndata: y\n\n", []ev{{"error", "x"}, {"", "y"}}, io.EOF},
		{"event type without data is reset", "event: error\n\ndata: y\n\n", []ev{{"", "y"}}, io.EOF},
		{"id, retry and unknown fields ignored", "id: 7\nretry: 100\nfoo: bar\ndata: a\n\n", []ev{{"", "a"}}, io.EOF},
		{"blank lines only", "\n\n\r\n", nil, io.EOF},
		{"BOM", "\xEF\xBB\xBFdata: a\n\n", []ev{{"", "a"}}, io.EOF},
		{"complete event without blank line at EOF", "data: a\n\ndata: b\n", []ev{{"", "a"}, {"", "b"}}, io.EOF},
		{"partial last line dropped", "data: a\n\ndata: {\"x\":", []ev{{"", "a"}}, io.EOF},
		{"a line longer than the first buffer", "data: " + strings.Repeat("x", 5*initialBuffer) + "\n\ndata: b\n\n",
			[]ev{{"", strings.Repeat("x", 5*initialBuffer)}, {"", "b"}}, io.EOF},
		{"line as long as it may be", "data:" + strings.Repeat("x", MaxEventSize-6) + "\n\n", []ev{{"", strings.Repeat("x", MaxEventSize-6)}}, io.EOF},
		{"line too long", "data: " + strings.Repeat("x", MaxEventSize) + "\n\n", nil, ErrTooLarge},
		{"event too large", strings.Repeat("data: "+strings.Repeat("x", 1<<20)+"\n", 5) + "\n", nil, ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"whole", "one byte"} {
				var r io.Reader = strings.NewReader(tt.in)
				if mode == "one byte" {
					if len(tt.in) > 1<<16 {
						continue
					}
					r = iotest.OneByteReader(r)
				}
				got, err := readAll(NewSSEReader(r))
				if !errors.Is(err, tt.err) {
					t.Errorf("%s: err = %v, want %v", mode, err, tt.err)
				}
				if len(got) != len(tt.want) {
					t.Fatalf("%s: got %q, want %q", mode, got, tt.want)
				}
				for i := range got {
					if got[i] != tt.want[i] {
						t.Errorf("%s: event %d = %q, want %q", mode, i, got[i], tt.want[i])
					}
				}
			}
		})
	}
}

func TestSSEReaderReadError(t *testing.T) {
	boom := errors.New("boom")
	r := NewSSEReader(io.MultiReader(strings.NewReader("data: a\n\n"), iotest.ErrReader(boom)))
	got, err := readAll(r)
	if len(got) != 1 || !errors.Is(err, boom) {
		t.Errorf("got %q, %v; want one event then boom", got, err)
	}
}

// A released reader's buffers serve the next reader, which reads its own stream whole: a long
// line that made the last one grow, or a long event, leaves nothing behind.
func TestReleasedBuffersServeTheNextReader(t *testing.T) {
	long := strings.Repeat("x", 3*initialBuffer)
	r := NewSSEReader(strings.NewReader("data: " + long + "\ndata: " + long + "\n\ndata: b\n\n"))
	got, err := readAll(r)
	if err != io.EOF || len(got) != 2 || got[0].Data != long+"\n"+long || got[1].Data != "b" {
		t.Fatalf("first reader: %d events, %v", len(got), err)
	}
	r.Release()
	r.Release() // twice is harmless
	for i := 0; i < 3; i++ {
		r := NewSSEReader(strings.NewReader("event: e\ndata: c\n\ndata: d\n\n"))
		got, err := readAll(r)
		if err != io.EOF || len(got) != 2 || got[0] != (ev{"e", "c"}) || got[1] != (ev{"", "d"}) {
			t.Fatalf("next reader: %v, %v", got, err)
		}
		r.Release()
	}
}

// A model call's reader borrows its buffers: reading a short stream allocates far less than the
// 4 KiB line buffer it used to make each time.
func TestReaderBorrowsItsBuffers(t *testing.T) {
	if raceOn {
		t.Skip("sync.Pool keeps nothing reliably under the race detector")
	}
	body := strings.Repeat("data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n", 5) + "data: [DONE]\n\n"
	var in strings.Reader
	bytesPer := testing.Benchmark(func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			in.Reset(body)
			r := NewSSEReader(&in)
			for {
				if _, err := r.Next(); err != nil {
					break
				}
			}
			r.Release()
		}
	}).AllocedBytesPerOp()
	if bytesPer >= initialBuffer {
		t.Errorf("a short stream allocated %d bytes, want less than %d", bytesPer, initialBuffer)
	}
}

// A streamed answer holds its reader's line buffer for its whole length: model-sized chunks
// (lines of a few hundred bytes, here arriving in bursts as from a busy socket) are read with a
// 1 KiB buffer, not the 4 KiB one it had; a longer line still comes whole.
func TestReaderHoldsASmallLineBuffer(t *testing.T) {
	chunk := "data: {\"choices\":[{\"delta\":{\"content\":\"" + strings.Repeat("w", 300) + "\"}}]}"
	long := "data: " + strings.Repeat("y", 3000)
	body := strings.Repeat(chunk+"\n\n", 40) + long + "\n\n" + chunk + "\n\n"
	r := NewSSEReader(strings.NewReader(body))
	defer r.Release()
	held := 0
	for i := range 40 {
		e, err := r.Next()
		if err != nil || string(e.Data) != chunk[len("data: "):] {
			t.Fatalf("event %d: %q, %v", i, e.Data, err)
		}
		held = max(held, cap(r.sc.Bytes()))
	}
	if held > 1<<10 {
		t.Errorf("model-sized chunks were read with a line buffer of %d bytes, want at most 1 KiB", held)
	}
	if e, err := r.Next(); err != nil || string(e.Data) != long[len("data: "):] {
		t.Fatalf("the long line: %d bytes, %v", len(e.Data), err)
	}
	if e, err := r.Next(); err != nil || string(e.Data) != chunk[len("data: "):] {
		t.Fatalf("the chunk after the long line: %v", err)
	}
}
