package httpapi

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"

	parley "github.com/parleyhq/parley"
)

// sessionFlights lets the requests that look up one session at the same time share one store
// read: a burst of clients connecting to a session's stream (subscribers of one busy session, or
// all of them reconnecting after a restart) is then one query at a time per session instead of
// one each. Each of those queries holds one of the store's pooled connections while it runs, so
// a burst of them opened the SQLite store's pool to its bound (2 → 8 connections, ≈ 0.3 MB of
// SQLite's own memory each, outside Go's heap) for lookups of one row (issue 25: memory per idle
// SSE stream). A request that arrives while a read is running waits for that read's answer, which
// is as fresh as one of its own would have been (both run while the request is being served).
type sessionFlights struct {
	mu sync.Mutex
	m  map[string]*sessionFlight
}

// sessionFlight is one store read of a session, and its answer once done is closed.
type sessionFlight struct {
	done chan struct{}
	sess *parley.Session // shared by every waiter: read, never changed
	err  error
}

// onSessionJoin, when set (tests), is called by a request that waits for a read already running.
var onSessionJoin atomic.Pointer[func()]

// get returns the session id from the store, sharing a read that is running for it. The
// session is shared: the caller must not change it.
func (f *sessionFlights) get(ctx context.Context, st parley.Store, id string) (*parley.Session, error) {
	f.mu.Lock()
	if fl := f.m[id]; fl != nil {
		f.mu.Unlock()
		if f := onSessionJoin.Load(); f != nil {
			(*f)()
		}
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// The read ended with its own request (that client left, or its deadline passed): this
		// one reads for itself.
		if fl.err != nil && (errors.Is(fl.err, context.Canceled) || errors.Is(fl.err, context.DeadlineExceeded)) && ctx.Err() == nil {
			return st.GetSession(ctx, id)
		}
		return fl.sess, fl.err
	}
	fl := &sessionFlight{done: make(chan struct{})}
	if f.m == nil {
		f.m = make(map[string]*sessionFlight)
	}
	f.m[id] = fl
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.m, id)
		f.mu.Unlock()
		close(fl.done)
	}()
	fl.sess, fl.err = st.GetSession(ctx, id)
	return fl.sess, fl.err
}

// sharedOwnedSession is ownedSession with the store's read shared among the requests that look
// up the same session at once (sessionFlights). The session is shared: the caller reads it only.
func (s *server) sharedOwnedSession(r *http.Request) (*parley.Session, string, error) {
	return s.ownedSessionBy(r, func(ctx context.Context, id string) (*parley.Session, error) {
		return s.sessions.get(ctx, s.Store, id)
	})
}
