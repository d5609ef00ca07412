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
	sse, dec := upstream.NewSSEReader(body), newChunkDecoder()
	var usage *parley.Usage // the latest usage seen, reported once at [DONE]
	return upstream.NewStream(ctx, body, "[DONE]", func(out []parley.StreamEvent) (evs []parley.StreamEvent, err error) {
		defer func() {
			if err != nil { // the stream's end (io.EOF too): the framer is not called again
				sse.Release()
			}
		}()
		ev, err := sse.Next()
		if err != nil {
			return out, upstream.Cut(err)
		}
		data := bytes.TrimSpace(ev.Data)
		switch {
		case bytes.Equal(data, []byte("[DONE]")):
			if usage != nil {
				out = append(out, parley.StreamEvent{Type: parley.StreamUsage, Usage: usage})
			}
			return out, io.EOF
		case ev.Type == "error":
			return out, parley.WrapError(parley.ECUpstream, upstream.EventError(data), "provider stream failed")
		}
		n := len(out)
		out, err = dec.decode(out, data)
		kept := out[:n]
		for _, e := range out[n:] {
			if e.Type == parley.StreamUsage {
				usage = e.Usage // totals so far; only the last is reported
				continue
			}
			kept = append(kept, e)
		}
		return kept, err
	})
}
