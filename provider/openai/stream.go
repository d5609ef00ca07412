package openai

import (
	"bytes"
	"context"
	"io"
	"sync/atomic"

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

func newStream(ctx context.Context, body io.ReadCloser) *stream {
	return &stream{ctx: ctx, body: body, sse: upstream.NewSSEReader(body), dec: newChunkDecoder()}
}

// stream is the state machine between the event reader and the chunk decoder: it queues the
// events of one chunk and ends at [DONE], at the end of the body, or at the first error.
// Next is not safe for concurrent use; Close may be called from any goroutine to unblock it.
type stream struct {
	ctx    context.Context
	body   io.ReadCloser
	sse    *upstream.SSEReader
	dec    *chunkDecoder
	queue  []parley.StreamEvent
	usage  *parley.Usage // the latest usage seen, reported once at [DONE]
	err    error         // sticky: io.EOF after [DONE], or the error that ended the stream
	closed atomic.Bool
}

var errClosed = parley.Errorf(parley.ECCanceled, "provider stream closed")

func (s *stream) Next() (parley.StreamEvent, error) {
	for {
		if len(s.queue) > 0 {
			ev := s.queue[0]
			s.queue = s.queue[1:]
			return ev, nil
		}
		if s.err != nil {
			return parley.StreamEvent{}, s.err
		}
		if s.closed.Load() {
			return parley.StreamEvent{}, errClosed
		}
		ev, err := s.sse.Next()
		if err != nil {
			s.err = s.readError(err)
			continue
		}
		data := bytes.TrimSpace(ev.Data)
		switch {
		case bytes.Equal(data, []byte("[DONE]")):
			if s.usage != nil {
				s.queue = append(s.queue[:0], parley.StreamEvent{Type: parley.StreamUsage, Usage: s.usage})
			}
			s.err = io.EOF
		case ev.Type == "error":
			s.err = parley.WrapError(parley.ECUpstream, upstream.EventError(data), "provider stream failed")
		default:
			evs, err := s.dec.decode(data)
			if err != nil {
				s.err = err
			}
			s.queue = s.queue[:0]
			for _, e := range evs {
				if e.Type == parley.StreamUsage {
					s.usage = e.Usage // totals so far; only the last is reported
					continue
				}
				s.queue = append(s.queue, e)
			}
		}
	}
}

// Close closes the body. It is safe to call more than once and concurrently with Next.
func (s *stream) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.body.Close()
}

// readError maps an error of the event reader to the stream's final error.
func (s *stream) readError(err error) error {
	if s.closed.Load() {
		return errClosed
	}
	return upstream.StreamError(s.ctx, err, "[DONE]")
}
