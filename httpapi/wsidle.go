package httpapi

import (
	"sync"
	"sync/atomic"
)

// A WebSocket's reader gives back its goroutine when its client is quiet. Between two messages,
// the reader's read of the next frame header does not wait for the client: with nothing to
// read, it returns errWouldBlock (through the library, which keeps its state: nothing of a frame
// was consumed), the connection is handed to the server's idlePoller, and a new goroutine reads
// again when the client sends something (a message, a pong to the server's ping, a close frame)
// or the connection is closed. The library reads the connection only within its Reader (our
// reader's) and within Close (the close handshake, which waits as usual: closing is set first).

// wsReadState is how a WebSocket's connection is read: the part of corkConn that knows whether a
// read may give up instead of waiting.
type wsReadState struct {
	watch *idleWatch // nil: a goroutine waits in its reads, as for any connection

	track   frameTracker // where the bytes read so far end: inside a frame or after one
	between atomic.Bool  // the reader is between two messages (in the library's Reader)
	closing atomic.Bool  // the close handshake reads: every read waits

	mu      sync.Mutex
	parked  bool   // no goroutine reads; the watch calls resume
	closed  bool   // the connection is closing: the reader reads on to its end
	resume  func() // starts a reader again
	onClose sync.Once
}

// nonBlocking reports whether a read may return errWouldBlock rather than wait: the reader is
// between messages, not in a close handshake, and the bytes read so far end a frame.
func (s *wsReadState) nonBlocking() bool {
	return s.watch != nil && s.between.Load() && !s.closing.Load() && s.track.atBoundary()
}

// park gives back the reader's goroutine, the watch armed to start another; false: it cannot
// (the connection is closing), and the reader reads on.
func (s *wsReadState) park() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.watch.arm() {
		return false
	}
	s.parked = true
	return true
}

// wake starts a reader if none runs (the watch's callback).
func (s *wsReadState) wake() {
	s.mu.Lock()
	parked := s.parked
	s.parked = false
	s.mu.Unlock()
	if parked {
		go s.resume()
	}
}

// close is called before the connection is closed: the watch stops, and a reader starts if none
// runs, to see the end and let go of the connection.
func (s *wsReadState) close() {
	s.onClose.Do(func() {
		s.watch.close()
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		s.wake()
	})
}

// frameTracker follows the WebSocket frames (RFC 6455, section 5.2) in the bytes a connection
// reads, to know whether they end between two frames.
type frameTracker struct {
	hdr  [14]byte // the header read so far of the current frame
	n    int      // its length
	left int64    // payload bytes of the current frame not read yet
}

func (t *frameTracker) atBoundary() bool { return t.n == 0 && t.left == 0 }

// feed follows b, the next bytes read.
func (t *frameTracker) feed(b []byte) {
	for len(b) > 0 {
		if t.left > 0 {
			k := min(int64(len(b)), t.left)
			t.left -= k
			b = b[k:]
			continue
		}
		t.hdr[t.n] = b[0]
		t.n++
		b = b[1:]
		if t.n < 2 {
			continue
		}
		need := 2
		switch t.hdr[1] & 0x7f {
		case 126:
			need += 2
		case 127:
			need += 8
		}
		if t.hdr[1]&0x80 != 0 { // masked: 4 bytes of key
			need += 4
		}
		if t.n < need {
			continue
		}
		switch l := int64(t.hdr[1] & 0x7f); l {
		case 126:
			t.left = int64(t.hdr[2])<<8 | int64(t.hdr[3])
		case 127:
			for _, c := range t.hdr[2:10] {
				t.left = t.left<<8 | int64(c)
			}
		default:
			t.left = l
		}
		t.n = 0
	}
}
