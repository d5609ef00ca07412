package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/parleyhq/parley/stream"
)

// One pump moves a session's stream to a client, whatever the transport: SSE (the native stream),
// the AI SDK UI message stream (SSE too) and the WebSocket. The pump waits on the subscription, the
// heartbeat, the idle timer, the credentials' recheck and the stream's lifetime; the transport
// encodes the frames (their JSON is made once per event, shared by every client) and says what a
// client is told when its stream ends.

// transport writes a subscription's frames to one client.
type transport interface {
	// frames writes a batch; end: the stream is over after it (a done event it waited for).
	frames(fs []*stream.Frame) (end bool, err error)
	// heartbeat keeps the connection alive while nothing else is written.
	heartbeat() error
	// failed tells the client its stream ended because reading it failed.
	failed(err error)
	// revoked tells the client its credentials are no longer valid; the stream then ends.
	revoked(err error)
	// idle tells the client the stream was quiet for StreamIdle; the stream then ends.
	idle()
	// lifetime tells the client the stream was open for StreamLifetime; the stream then ends.
	lifetime()
}

// pump is one client's stream. The WebSocket's own inputs (replies to the client's frames, the
// session its first message created, its activity) come in through the optional channels; an SSE
// stream leaves them nil.
type pump struct {
	s   *server
	r   *http.Request // the request: its credentials are checked again while the stream is open
	t   transport
	sub *stream.Subscription // nil until there is a session (a WebSocket before its first message)

	heartbeat time.Duration // 0: none (the WebSocket pings on its own)

	replies  <-chan []byte
	reply    func(b []byte) error
	sessions <-chan string
	activity <-chan struct{}
}

// subscribe makes the pump read the session after seq `after`.
func (p *pump) subscribe(ctx context.Context, sessionID string, after int64) {
	p.sub = p.s.Runs.Subscribe(ctx, sessionID, after)
}

// run pumps until ctx ends, the transport ends the stream, a write fails, or the stream is idle,
// revoked or past its lifetime. It returns why it stopped (nil: the transport ended it, or ctx
// ended), and closes the subscription.
func (p *pump) run(ctx context.Context) error {
	s := p.s
	defer func() {
		if p.sub != nil {
			p.sub.Close()
		}
	}()
	var heartbeat <-chan time.Time
	if p.heartbeat > 0 {
		t := time.NewTicker(p.heartbeat)
		defer t.Stop()
		heartbeat = t.C
	}
	idle := time.NewTimer(s.StreamIdle)
	defer idle.Stop()
	recheck, stopRecheck := s.recheckTicks()
	defer stopRecheck()
	for {
		var ready <-chan struct{}
		if p.sub != nil {
			ready = p.sub.Ready()
		}
		select {
		case <-recheck:
			if err := s.stillValid(ctx, p.r); err != nil {
				p.t.revoked(err)
				return errRevoked
			}
		case <-ready:
			frames, err := p.sub.Next(ctx)
			if err != nil {
				if ctx.Err() == nil {
					p.t.failed(err)
					return err
				}
				return nil
			}
			if len(frames) == 0 {
				continue
			}
			end, err := p.t.frames(frames)
			if err != nil {
				return errClientGone{err}
			}
			if end {
				return nil
			}
			idle.Reset(s.StreamIdle)
		case b := <-p.replies:
			if err := p.reply(b); err != nil {
				return errClientGone{err}
			}
		case id := <-p.sessions:
			if p.sub == nil {
				p.subscribe(ctx, id, stream.Join)
			}
		case <-p.activity:
			idle.Reset(s.StreamIdle)
		case <-heartbeat:
			if err := p.t.heartbeat(); err != nil {
				return errClientGone{err}
			}
		case <-idle.C:
			p.t.idle()
			return errIdle
		case <-ctx.Done():
			if p.r.Context().Err() == nil {
				p.t.lifetime()
			}
			return nil
		}
	}
}

// Why a pump stopped.
type errClientGone struct{ err error }

func (e errClientGone) Error() string { return "client gone: " + e.err.Error() }
func (e errClientGone) Unwrap() error { return e.err }

var (
	errIdle    = errorString("idle timeout")
	errRevoked = errorString("credentials no longer valid")
)

type errorString string

func (e errorString) Error() string { return string(e) }
