// Package onewrite sends an HTTP/1 request's head and its body in one system call.
//
// net/http's client writes a request whose body is not a *bytes.Reader, *bytes.Buffer or
// *strings.Reader in two writes: it flushes the head (the request line and the headers) first,
// then copies the body to the connection, through a buffer of the body's size made for the copy
// (the body hidden behind an io.LimitedReader, the connection cannot take it whole). Parley's
// requests to a model provider are such bodies (they let go of their bytes once sent, so that a
// streamed answer does not hold the conversation), and each is a system call more on both sides
// and a buffer the size of the conversation.
//
// A Conn, wrapped around a connection net/http's transport dialed, holds back a write that is
// exactly one request's head announcing a body (Content-Length above 0, no Expect, no
// Transfer-Encoding) and sends it with what is written next, the body, in one writev(2); a body
// that implements Body is handed to that write whole, without the copy. It follows the requests
// byte by byte, so it holds only a head at a request's start; whatever else is written (a TLS
// connection's records, a head split across writes, a chunked body) turns it off for the
// connection, and everything then goes through as it comes.
package onewrite

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
)

// Body is a request body that can give all it has left in one Write, and say how much that is.
// It must be an io.ReadCloser itself: net/http hands a connection the body it was given only when
// it needed no io.NopCloser around it. A body in several parts gives them in one WriteBuffers
// when the writer it is given is a BuffersWriter (a Conn's is), so that parts kept elsewhere (an
// encoding shared by many requests) go out with the head without being copied into one buffer.
type Body interface {
	io.WriterTo
	Len() int
}

// BuffersWriter is a writer that takes a body's parts in one write: the writer a Conn gives a
// Body's WriteTo is one.
type BuffersWriter interface {
	// WriteBuffers writes the parts in bufs (which it consumes, as net.Buffers.WriteTo does)
	// and returns how many bytes went.
	WriteBuffers(bufs *net.Buffers) (int64, error)
}

// maxHead bounds the head a Conn holds back; a longer one is written as it comes.
const maxHead = 4 << 10

// Conn is a client connection that sends a request's head with its body (see the package's
// comment). Its writes come from one goroutine at a time, as net/http's transport makes them.
//
// It follows the requests it carries byte by byte: a write at a request's start must be exactly
// one head, and a head announcing a body is followed by that many bytes of body before the next
// request starts. Anything else (a TLS record, a head split across writes, a chunked body,
// Expect: 100-continue, a body net/http copies in parts) turns it off for the connection's life:
// from then on every write goes through as it comes.
type Conn struct {
	net.Conn
	head   *[]byte // a request's head held back until its body (lent by heads); nil: none
	left   int64   // bytes of the current request's body not yet written
	off    bool    // the writes are not, or no longer known to be, plain requests: nothing is held
	writes atomic.Int64
}

// heads lends the copies of the heads held back: a connection keeps none between requests.
var heads = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// Wrap returns c as a Conn.
func Wrap(c net.Conn) *Conn { return &Conn{Conn: c} }

// Dialer wraps dial's connections.
func Dialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return Wrap(c), nil
	}
}

// Writes returns how many writes the Conn made on its connection (a writev counts one; a body
// handed to the connection's own ReadFrom, one).
func (c *Conn) Writes() int64 { return c.writes.Load() }

// Write holds p back if it is a request's head announcing a body; else it sends p, after the
// head held back if any, in one write.
func (c *Conn) Write(p []byte) (int, error) {
	if c.off || c.left > 0 {
		return c.body(p)
	}
	n, ok := requestHead(p)
	switch {
	case !ok || len(p) > maxHead:
		c.off = true
		return c.body(p)
	case n == 0: // a request without a body
		c.writes.Add(1)
		return c.Conn.Write(p)
	}
	h := heads.Get().(*[]byte)
	*h = append((*h)[:0], p...)
	c.head, c.left = h, n
	return len(p), nil
}

// body sends p, a request's body (or anything, once off), with the head held back if any.
func (c *Conn) body(p []byte) (int, error) {
	var n int
	var err error
	if c.head != nil {
		var n64 int64
		n64, err = c.withHead(p, nil)
		n = int(n64)
	} else {
		c.writes.Add(1)
		n, err = c.Conn.Write(p)
	}
	c.sent(int64(n))
	return n, err
}

// bodyBuffers sends the parts of a request's body in one write, with the head held back if any.
func (c *Conn) bodyBuffers(bufs *net.Buffers) (int64, error) {
	var n int64
	var err error
	if c.head != nil {
		n, err = c.withHead(nil, bufs)
	} else {
		c.writes.Add(1)
		n, err = bufs.WriteTo(c.Conn)
	}
	c.sent(n)
	return n, err
}

// sent counts n bytes of the current request's body as written.
func (c *Conn) sent(n int64) {
	if !c.off {
		if n > c.left {
			c.off = true // more than the head announced: net/http fails the request
		} else {
			c.left -= n
		}
	}
}

// withHead sends the head held back and p, or the parts in more (nil: none), in one write
// (writev on a TCP connection); it returns how much of p or more went.
func (c *Conn) withHead(p []byte, more *net.Buffers) (int64, error) {
	h := c.head
	c.head = nil
	c.writes.Add(1)
	// The head before the body: the list and its slice in one allocation.
	w := &headAndParts{}
	w.bufs = append(w.arr[:0], *h)
	if more == nil {
		w.bufs = append(w.bufs, p)
	} else {
		w.bufs = append(w.bufs, *more...)
		*more = nil
	}
	n, err := w.bufs.WriteTo(c.Conn)
	n -= int64(len(*h))
	if cap(*h) <= maxHead {
		heads.Put(h)
	}
	if n < 0 {
		n = 0
	}
	return n, err
}

// headAndParts is a head and its body (or the body's parts), as written: a body of up to three
// parts needs no list of its own.
type headAndParts struct {
	bufs net.Buffers
	arr  [4][]byte
}

// ReadFrom writes r to the connection. A request's body that is a Body, behind net/http's
// io.LimitedReader, goes with its head in one write, without a copy. Any other reader is given
// to the connection's own ReadFrom, as net/http would have (sendfile, splice), after the head
// held back, and the Conn turns off.
func (c *Conn) ReadFrom(r io.Reader) (int64, error) {
	if !c.off && c.left > 0 {
		if lr, ok := r.(*io.LimitedReader); ok {
			if b, ok := lr.R.(Body); ok && int64(b.Len()) <= lr.N {
				n, err := b.WriteTo(bodyWriter{c})
				lr.N -= n
				return n, err
			}
		}
	}
	c.off = true
	if c.head != nil {
		if _, err := c.withHead(nil, nil); err != nil {
			return 0, err
		}
	}
	c.writes.Add(1)
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(writerOnly{c.Conn}, r)
}

// bodyWriter is what a Body writes itself to.
type bodyWriter struct{ c *Conn }

func (w bodyWriter) Write(p []byte) (int, error) { return w.c.body(p) }

// WriteBuffers writes a body's parts with the head held back, in one write.
func (w bodyWriter) WriteBuffers(bufs *net.Buffers) (int64, error) { return w.c.bodyBuffers(bufs) }

// writerOnly hides a connection's ReadFrom from io.Copy.
type writerOnly struct{ io.Writer }

var (
	crlf          = []byte("\r\n")
	crlf2         = []byte("\r\n\r\n")
	contentLength = []byte("\r\nContent-Length: ")
	expect        = []byte("\r\nExpect:")
	transferEnc   = []byte("\r\nTransfer-Encoding:")
	http11        = []byte(" HTTP/1.1\r\n")
)

// requestHead reports whether p is exactly one HTTP/1.1 request's head as net/http writes it
// (canonical header names), and the length of the body that follows it at once: 0 for none; not
// ok for a body of unknown length (Transfer-Encoding) or one sent only after the server's
// answer (Expect).
func requestHead(p []byte) (n int64, ok bool) {
	if len(p) < 4 || bytes.Index(p, crlf2) != len(p)-4 {
		return 0, false
	}
	// The request line: a method of capital letters, a space, a target, and " HTTP/1.1" ending it.
	i := 0
	for i < len(p) && p[i] >= 'A' && p[i] <= 'Z' {
		i++
	}
	if i == 0 || p[i] != ' ' {
		return 0, false
	}
	eol := bytes.Index(p, crlf)
	if eol+2-len(http11) <= i || !bytes.Equal(p[eol+2-len(http11):eol+2], http11) {
		return 0, false
	}
	headers := p[eol:] // from the CRLF that ends the request line
	if bytes.Contains(headers, expect) || bytes.Contains(headers, transferEnc) {
		return 0, false
	}
	j := bytes.Index(headers, contentLength)
	if j < 0 {
		return 0, true
	}
	if bytes.Contains(headers[j+1:], contentLength) {
		return 0, false
	}
	v := headers[j+len(contentLength):]
	v = v[:bytes.IndexByte(v, '\r')]
	n, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
