package upstream

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/parleyhq/parley"
)

// ErrClosed ends a stream that was closed before its end.
var ErrClosed = parley.Errorf(parley.ECCanceled, "provider stream closed")

// Framer reads the next frame of a body and appends its events to out. It returns io.EOF at the
// stream's proper end (with the last events appended), a *parley.Error to end the stream with
// that error, and any other error for a body that failed or ended too soon (io.ErrUnexpectedEOF).
type Framer func(out []parley.StreamEvent) ([]parley.StreamEvent, error)

// Stream is the parley.Stream every adapter builds on: it reads the body frame by frame with its
// Framer, hands the events out one by one, keeps the end it reached, and may be closed from any
// goroutine to unblock Next. Next itself is not safe for concurrent use.
type Stream struct {
	ctx  context.Context
	body io.ReadCloser
	next Framer
	what string // the proper end, named in the error of a stream cut before it
	// queue holds the last frame's events, handed out from head on. Its backing array is kept
	// and filled again by the next frame: a stream of one event a frame allocates none.
	queue  []parley.StreamEvent
	head   int
	err    error // sticky: io.EOF at the proper end, or the error that ended the stream
	closed atomic.Bool
}

// NewStream returns a Stream over body. end names the stream's proper end, e.g. "[DONE]".
func NewStream(ctx context.Context, body io.ReadCloser, end string, next Framer) *Stream {
	return &Stream{ctx: ctx, body: body, next: next, what: end}
}

// Next returns the next event, or io.EOF after the last one.
func (s *Stream) Next() (parley.StreamEvent, error) {
	for {
		if s.head < len(s.queue) {
			ev := s.queue[s.head]
			s.queue[s.head] = parley.StreamEvent{} // what it points to is the caller's now
			s.head++
			return ev, nil
		}
		if s.err != nil {
			return parley.StreamEvent{}, s.err
		}
		if s.closed.Load() {
			return parley.StreamEvent{}, ErrClosed
		}
		var err error
		s.queue, err = s.next(s.queue[:0])
		s.head = 0
		if err != nil && err != io.EOF {
			err = s.final(err)
		}
		s.err = err
	}
}

// final maps a framer's error to the stream's: its own *parley.Error, or a read error.
func (s *Stream) final(err error) error {
	var pe *parley.Error
	switch {
	case errors.As(err, &pe):
		return err
	case s.closed.Load():
		return ErrClosed
	}
	return StreamError(s.ctx, err, s.what)
}

// Close closes the body. It is safe to call more than once and concurrently with Next.
func (s *Stream) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.body.Close()
}

// Cut turns the io.EOF of a body that ended before the stream's proper end into
// io.ErrUnexpectedEOF; other errors pass unchanged.
func Cut(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
