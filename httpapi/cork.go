package httpapi

import (
	"bufio"
	"net"
	"net/http"
	"sync"
	"time"
)

// A WebSocket library writes each message with its own system call. A client that is behind has
// several events waiting, and writing them one call each is most of what broadcasting costs (the
// kernel's TCP path, on both ends). So the WebSocket's connection is wrapped: while corked, its
// writes are gathered, and uncorking sends them in one write.

// corkMax bounds what a corked connection gathers; a write past it goes out at once.
const corkMax = 64 << 10

// corkBuffers lends gathering buffers to corked connections: an idle connection holds none.
var corkBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// corkConn is a net.Conn whose writes can be gathered (cork) and sent together (uncork). Each
// write to the connection underneath gets a deadline of timeout from its start.
type corkConn struct {
	net.Conn
	timeout time.Duration

	mu     sync.Mutex
	corked bool
	buf    *[]byte // lent by corkBuffers while corked

	pending []byte // read before the connection: what net/http had read ahead (one reader)

	rs wsReadState // the WebSocket's reads (wsidle.go)
}

func (c *corkConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		if len(c.pending) == 0 {
			c.pending = nil
		}
		c.rs.track.feed(p[:n])
		return n, nil
	}
	var n int
	var err error
	if c.rs.nonBlocking() {
		n, err = c.rs.watch.readNow(p)
	} else {
		n, err = c.Conn.Read(p)
	}
	c.rs.track.feed(p[:n])
	return n, err
}

func (c *corkConn) Close() error {
	if c.rs.watch != nil {
		c.rs.close() // before the descriptor is closed
	}
	return c.Conn.Close()
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked && len(*c.buf)+len(p) <= corkMax {
		*c.buf = append(*c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.write(p)
}

func (c *corkConn) write(p []byte) (int, error) {
	if c.timeout > 0 {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(c.timeout))
	}
	return c.Conn.Write(p)
}

// cork starts gathering writes.
func (c *corkConn) cork() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		c.corked = true
		c.buf = corkBuffers.Get().(*[]byte)
	}
}

// uncork sends what was gathered, in one write, and stops gathering.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.corked {
		return nil
	}
	err := c.flushLocked()
	c.corked = false
	if cap(*c.buf) <= corkMax {
		corkBuffers.Put(c.buf)
	}
	c.buf = nil
	return err
}

func (c *corkConn) flushLocked() error {
	if !c.corked || len(*c.buf) == 0 {
		return nil
	}
	_, err := c.write(*c.buf)
	*c.buf = (*c.buf)[:0]
	return err
}

// corkingWriter hands websocket.Accept a connection it writes through a corkConn, when it
// hijacks the request's.
type corkingWriter struct {
	http.ResponseWriter
	timeout time.Duration // each write's deadline
	conn    *corkConn     // set by Hijack
}

func (w *corkingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *corkingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	if err := brw.Writer.Flush(); err != nil {
		c.Close()
		return nil, nil, err
	}
	w.conn = &corkConn{Conn: c, timeout: w.timeout}
	// What the client sent after its request, which net/http's reader holds, is read first.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		w.conn.pending = append([]byte(nil), b...)
	}
	// Small buffers of the connection's own instead of net/http's 4 KiB ones: the connection
	// keeps them for its life, idle or not. Larger reads and writes go past them, and the writes
	// of a batch are gathered by the cork anyway.
	return w.conn, bufio.NewReadWriter(bufio.NewReaderSize(w.conn, hijackReadBuffer), bufio.NewWriterSize(w.conn, hijackWriteBuffer)), nil
}

// The buffers of a hijacked connection (a WebSocket): client frames are small JSON objects, and
// the writes of a batch are gathered by the cork (a frame larger than the buffer goes past it).
const (
	hijackReadBuffer  = 256
	hijackWriteBuffer = 256
)
