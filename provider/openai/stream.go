package openai

import (
	"bytes"
	"context"
	"io"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/upstream"
)

// NewStream reads a Chat Completions event stream (the body of a stream:true response) as
// parley.StreamEvents. Usage, which some endpoints repeat, comes as one event just before the
// end. Next returns io.EOF after "data: [DONE]"; a body that ends before it yields a
// *parley.Error with code ECUpstream wrapping io.ErrUnexpectedEOF. Close closes body.
func NewStream(body io.ReadCloser) parley.Stream {
	return newStream(context.Background(), body)
}

func newStream(ctx context.Context, body io.ReadCloser) *upstream.Stream {
	f := &framer{sse: upstream.NewSSEReader(body), dec: newChunkDecoder()}
	// The framer stays under the model's read for a whole streamed answer, so it keeps only
	// the read in its frame; a frame's events are made by events (issue 25: memory per active
	// stream).
	return upstream.NewStream(ctx, body, "[DONE]", func(out []parley.StreamEvent) ([]parley.StreamEvent, error) {
		ev, err := f.sse.Next()
		if err != nil {
			f.sse.Release() // the stream's end: the framer is not called again
			return out, upstream.Cut(err)
		}
		return f.events(out, &ev)
	})
}

// framer is what newStream's framer keeps from one frame to the next.
type framer struct {
	sse   *upstream.SSEReader
	dec   *chunkDecoder
	usage *parley.Usage // the latest usage seen, reported once at [DONE]
}

// events appends the events of one SSE event to out.
//
//go:noinline
func (f *framer) events(out []parley.StreamEvent, ev *upstream.SSEEvent) (evs []parley.StreamEvent, err error) {
	defer func() {
		if err != nil { // the stream's end (io.EOF too): the framer is not called again
			f.sse.Release()
		}
	}()
	data := bytes.TrimSpace(ev.Data)
	switch {
	case bytes.Equal(data, []byte("[DONE]")):
		if f.usage != nil {
			out = append(out, parley.StreamEvent{Type: parley.StreamUsage, Usage: f.usage})
		}
		return out, io.EOF
	case ev.Type == "error":
		return out, parley.WrapError(parley.ECUpstream, upstream.EventError(data), "provider stream failed")
	}
	n := len(out)
	out, err = f.dec.decode(out, data)
	kept := out[:n]
	for _, e := range out[n:] {
		if e.Type == parley.StreamUsage {
			f.usage = e.Usage // totals so far; only the last is reported
			continue
		}
		kept = append(kept, e)
	}
	return kept, err
}
