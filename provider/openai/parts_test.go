package openai

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/parleyhq/parley"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A streamed call sends its tools from the client's encoding of them, not from a copy in every
// request's body: with a 64 KB tool list a call allocates far less than the list (on the code
// before, each call made a body holding it). The bytes sent are the request's encoding.
func TestStreamDoesNotCopyTheTools(t *testing.T) {
	schema := `{"type":"object","description":"` + strings.Repeat("a long schema ", 64<<10/14) + `"}`
	req := &parley.ChatRequest{Model: "gpt-x", Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hello")}},
		Tools: []parley.ToolSpec{{Name: "big", Description: "a tool with a large schema", Parameters: []byte(schema)}}, ToolChoice: "auto"}
	want, err := EncodeRequestWith(req, true, EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	c := New(Config{BaseURL: "http://model.invalid/v1", HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if got == nil {
			got, _ = io.ReadAll(r.Body)
		} else {
			io.Copy(io.Discard, r.Body) // the body's WriteTo: no buffer of its size
		}
		r.Body.Close()
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: io.NopCloser(strings.NewReader("data: [DONE]\n\n")), Request: r}, nil
	})}})
	call := func() {
		s, err := c.Stream(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	call()
	if string(got) != string(want) {
		t.Fatalf("the body sent is not the request's encoding (%d bytes, want %d)", len(got), len(want))
	}
	call() // the tools' encoding cached
	const calls = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range calls {
		call()
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > uint64(len(schema)/4) {
		t.Fatalf("a call allocated %d bytes with a %d-byte tool list: the list is copied", per, len(schema))
	}
}
