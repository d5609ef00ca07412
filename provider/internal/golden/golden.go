// Package golden compares test output with files in testdata, for the adapters' wire-format
// tests. Run a package's tests with -update to rewrite its files.
package golden

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/parleyhq/parley"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// Check compares got with the file at path, or rewrites the file with -update.
func Check(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the package's tests with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// JSON returns v as indented JSON with a final newline, HTML characters unescaped.
func JSON(t *testing.T, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Request is the JSON form of a test case for an adapter's request encoder: a provider-agnostic
// request and the adapter's options, read from testdata/request/<name>.in.json.
type Request struct {
	Model       string            `json:"model"`
	Messages    []parley.Message  `json:"messages"`
	Tools       []parley.ToolSpec `json:"tools,omitempty"`
	ToolChoice  string            `json:"tool_choice,omitempty"`
	Temperature *float64          `json:"temperature,omitempty"`
	MaxTokens   int               `json:"max_tokens,omitempty"`
	Stream      bool              `json:"stream,omitempty"`
	Options     json.RawMessage   `json:"options,omitempty"` // the adapter's options
}

// ChatRequest returns the request of the case.
func (r *Request) ChatRequest() *parley.ChatRequest {
	return &parley.ChatRequest{Model: r.Model, Messages: r.Messages, Tools: r.Tools, ToolChoice: r.ToolChoice,
		Temperature: r.Temperature, MaxTokens: r.MaxTokens}
}

// EachRequest runs encode on every testdata/request/*.in.json and compares the body it returns,
// indented, with <name>.golden.json; an error is written as {"error": ...} instead.
func EachRequest(t *testing.T, encode func(*Request) ([]byte, error)) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "request", "*.in.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no request cases: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".in.json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var c Request
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			body, err := encode(&c)
			var got []byte
			if err != nil {
				got = JSON(t, map[string]any{"error": err.Error(), "code": parley.CodeOf(err)})
			} else {
				var v any
				if err := json.Unmarshal(body, &v); err != nil {
					t.Fatalf("body is not JSON: %v\n%s", err, body)
				}
				got = JSON(t, json.RawMessage(body))
			}
			Check(t, filepath.Join("testdata", "request", name+".golden.json"), got)
		})
	}
}

// Event is the JSON form of a parley.StreamEvent in golden files.
type Event struct {
	Type         parley.StreamEventType `json:"type"`
	Content      string                 `json:"content,omitempty"`
	Reasoning    string                 `json:"reasoning,omitempty"`
	ToolCall     *parley.ToolCallDelta  `json:"tool_call,omitempty"`
	FinishReason string                 `json:"finish_reason,omitempty"`
	Usage        *parley.Usage          `json:"usage,omitempty"`
	Thinking     *parley.ThinkingBlock  `json:"thinking,omitempty"`
}

// End is how a stream ended.
type End struct {
	EOF           bool             `json:"eof,omitempty"` // io.EOF: the stream's proper end
	Code          parley.ErrorCode `json:"code,omitempty"`
	Message       string           `json:"message,omitempty"`
	Log           string           `json:"log,omitempty"` // err.Error(): what the logs see
	UnexpectedEOF bool             `json:"unexpected_eof,omitempty"`
}

// Stream is what a stream yielded: its events, how it ended, and the response they make.
type Stream struct {
	Events   []Event          `json:"events"`
	End      End              `json:"end"`
	Response *parley.Response `json:"response"`
}

// Drain reads s to its end, with a bound on the number of events.
func Drain(t *testing.T, s parley.Stream) Stream {
	t.Helper()
	var g Stream
	var b parley.ResponseBuilder
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("stream does not end")
		}
		ev, err := s.Next()
		if err != nil {
			if err == io.EOF {
				g.End.EOF = true
			} else {
				g.End = End{Code: parley.CodeOf(err), Message: parley.MessageOf(err), Log: err.Error(),
					UnexpectedEOF: errors.Is(err, io.ErrUnexpectedEOF)}
			}
			break
		}
		b.Add(ev)
		g.Events = append(g.Events, Event{ev.Type, ev.Content, ev.Reasoning, ev.ToolCall, ev.FinishReason, ev.Usage, ev.Thinking})
	}
	g.Response = b.Response()
	return g
}

// EachStream feeds every testdata/stream/*<ext> file to open and compares what the stream yields
// with <name>.golden.json. A second Next must repeat the end, Close must close the body exactly
// once, and the same bytes in one-byte and half reads must give the same result.
func EachStream(t *testing.T, ext string, open func(io.ReadCloser) parley.Stream) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "stream", "*"+ext))
	if err != nil || len(files) == 0 {
		t.Fatalf("no stream fixtures: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ext)
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			body := &CloseCounter{Reader: bytes.NewReader(raw)}
			s := open(body)
			g := Drain(t, s)
			got := JSON(t, g)
			Check(t, filepath.Join("testdata", "stream", name+".golden.json"), got)
			if _, err := s.Next(); g.End.EOF && err != io.EOF || !g.End.EOF && parley.CodeOf(err) != g.End.Code {
				t.Errorf("Next after the end = %v, want the same end", err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			_ = s.Close()
			if n := body.Closes(); n != 1 {
				t.Errorf("body closed %d times, want 1", n)
			}
			for rname, r := range map[string]io.Reader{
				"one byte": iotest.OneByteReader(bytes.NewReader(raw)),
				"half":     iotest.HalfReader(bytes.NewReader(raw)),
			} {
				again := open(io.NopCloser(r))
				if g2 := JSON(t, Drain(t, again)); !bytes.Equal(g2, got) {
					t.Errorf("%s reads give a different result:\n%s", rname, g2)
				}
				again.Close()
			}
		})
	}
}

// CloseCounter is a body that counts its Close calls.
type CloseCounter struct {
	io.Reader
	closes atomic.Int32
}

// Close counts the call.
func (c *CloseCounter) Close() error { c.closes.Add(1); return nil }

// Closes is the number of Close calls so far.
func (c *CloseCounter) Closes() int32 { return c.closes.Load() }

// Options decodes the case's adapter options into an O (the zero O when it has none).
func Options[O any](t *testing.T, c *Request) O {
	t.Helper()
	var o O
	if len(c.Options) > 0 {
		if err := json.Unmarshal(c.Options, &o); err != nil {
			t.Fatalf("options: %v", err)
		}
	}
	return o
}

// BenchStream measures reading body through open to its end, and reports the time per event;
// every pass must yield exactly events events.
func BenchStream(b *testing.B, body []byte, events int, open func(io.ReadCloser) parley.Stream) {
	b.Helper()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		s := open(io.NopCloser(bytes.NewReader(body)))
		n := 0
		for {
			if _, err := s.Next(); err != nil {
				if err != io.EOF {
					b.Fatal(err)
				}
				break
			}
			n++
		}
		if n != events {
			b.Fatalf("%d events, want %d", n, events)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(events), "ns/event")
}
