package httpapi

import (
	"bufio"
	"net"
	"net/http"
	"sync"
)

// A WebSocket library writes each message with its own system call. A client that is behind has
// several events waiting, and writing them one call each is most of what broadcasting costs (the
// kernel's TCP path, on both ends). So the WebSocket's connection is wrapped: while corked, its
// writes are gathered, and uncorking sends them in one write.

// corkMax bounds what a corked connection gathers; a write past it goes out at once.
const corkMax = 64 << 10

// corkConn is a net.Conn whose writes can be gathered (cork) and sent together (uncork).
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked && len(c.buf)+len(p) <= corkMax {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// cork starts gathering writes.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// uncork sends what was gathered, in one write, and stops gathering.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 2*wsKeepBuffer {
		c.buf = nil // not kept for the connection's life
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// corkingWriter hands websocket.Accept a connection it writes through a corkConn, when it
// hijacks the request's.
type corkingWriter struct {
	http.ResponseWriter
	conn *corkConn // set by Hijack
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
	w.conn = &corkConn{Conn: c}
	brw.Writer.Reset(w.conn)
	return w.conn, brw, nil
}
