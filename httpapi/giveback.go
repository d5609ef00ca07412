package httpapi

import (
	"net"
	"sync"
	"sync/atomic"
)

// GiveBackListener is a listener to which the API gives back the connection of a streamed chat
// it took over from net/http (streamSession, Deps.GiveBack) once the chat's response has ended
// whole: the HTTP server, which serves the listener, then takes it as a new connection and reads
// the client's next request from it, so that the connection stays kept-alive. net/http has no
// public way to serve one HTTP/1 connection; Accept is that way. One goroutine of the listener's
// own runs the inner listener's Accept, until Close.
type GiveBackListener struct {
	inner    net.Listener
	accepted chan acceptResult // from the accepting goroutine
	given    chan struct{}     // one slot: a connection was given back
	done     chan struct{}     // closed by Close
	exited   chan struct{}     // closed when the accepting goroutine returns
	failed   chan struct{}     // closed when the inner Accept failed for good (failErr)
	failErr  error

	mu     sync.Mutex
	closed bool
	back   []net.Conn // given back, not yet accepted: at most one per open connection
	// fresh are the connections given back from which the server has read nothing yet: Close
	// (which Shutdown calls) closes them, as Shutdown does an idle connection. Without it
	// Shutdown would wait for them: net/http takes a connection it accepted less than 5 s ago
	// for one whose first request is on its way.
	fresh map[*givenConn]struct{}
}

// givenConn is a connection given back: it leaves its listener's fresh set once a read returns
// bytes (of the client's next request).
// NetConn lets the idle poller reach the socket underneath (rawConnOf).
type givenConn struct {
	net.Conn
	l     *GiveBackListener
	fresh atomic.Bool
}

func (c *givenConn) NetConn() net.Conn { return c.Conn }

func (c *givenConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 && c.fresh.Load() {
		c.l.mu.Lock()
		if c.fresh.Swap(false) {
			delete(c.l.fresh, c)
		}
		c.l.mu.Unlock()
	}
	return n, err
}

type acceptResult struct {
	c   net.Conn
	err error
}

// ListenGiveBack wraps ln; its GiveBack is what Deps.GiveBack takes.
func ListenGiveBack(ln net.Listener) *GiveBackListener {
	l := &GiveBackListener{inner: ln, accepted: make(chan acceptResult), given: make(chan struct{}, 1),
		done: make(chan struct{}), exited: make(chan struct{}), failed: make(chan struct{})}
	go l.acceptLoop()
	return l
}

// acceptLoop accepts from the inner listener, one connection at a time, for Accept: an error
// is passed on as it came, and a temporary one (net/http waits, then accepts again) does not end
// the loop; any other does, and Accept returns it from then on.
func (l *GiveBackListener) acceptLoop() {
	defer close(l.exited)
	for {
		c, err := l.inner.Accept()
		if err != nil && !isTemporary(err) {
			l.failErr = err
			close(l.failed)
			return
		}
		select {
		case l.accepted <- acceptResult{c, err}:
		case <-l.done:
			if c != nil {
				c.Close()
			}
			return
		}
	}
}

func isTemporary(err error) bool {
	t, ok := err.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// Accept returns a connection given back, or else the next one the inner listener accepts.
func (l *GiveBackListener) Accept() (net.Conn, error) {
	for {
		if c := l.takeBack(); c != nil {
			return c, nil
		}
		select {
		case <-l.given:
		case r := <-l.accepted:
			return r.c, r.err
		case <-l.failed:
			return nil, l.failErr
		case <-l.done:
			return nil, &net.OpError{Op: "accept", Net: l.inner.Addr().Network(), Addr: l.inner.Addr(), Err: net.ErrClosed}
		}
	}
}

func (l *GiveBackListener) takeBack() net.Conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.back) == 0 {
		return nil
	}
	c := l.back[0]
	l.back[0] = nil
	l.back = l.back[1:]
	if len(l.back) == 0 {
		l.back = nil
	}
	return c
}

// GiveBack queues c for Accept; it reports false, c untouched, once the listener is closed (the
// server is shutting down: the caller closes c).
func (l *GiveBackListener) GiveBack(c net.Conn) bool {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	g, ok := c.(*givenConn) // given back before: not wrapped again
	if !ok {
		g = &givenConn{Conn: c, l: l}
	}
	g.fresh.Store(true)
	if l.fresh == nil {
		l.fresh = map[*givenConn]struct{}{}
	}
	l.fresh[g] = struct{}{}
	l.back = append(l.back, g)
	l.mu.Unlock()
	select {
	case l.given <- struct{}{}:
	default:
	}
	return true
}

// Close closes the inner listener, waits for the accepting goroutine to return, and closes the
// connections given back from which nothing was read yet (accepted or not). Again, it does
// nothing.
func (l *GiveBackListener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.back = nil
	var fresh []*givenConn
	for c := range l.fresh {
		c.fresh.Store(false)
		fresh = append(fresh, c)
	}
	l.fresh = nil
	l.mu.Unlock()
	close(l.done)
	err := l.inner.Close()
	<-l.exited
	for _, c := range fresh {
		c.Close()
	}
	return err
}

func (l *GiveBackListener) Addr() net.Addr { return l.inner.Addr() }
