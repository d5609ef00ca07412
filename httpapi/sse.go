package httpapi

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// sseBuffers lends SSE streams the buffer a batch of events is gathered in, from the first write
// to the flush: an idle stream holds none.
var sseBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

const (
	// sseWriteOut: a batch that gathers more than this is written out before it is complete.
	sseWriteOut = 32 << 10
	// sseKeep is the largest buffer given back to sseBuffers.
	sseKeep = 64 << 10
)

// sseWriter writes Server-Sent Events. Every write has a deadline: a client that does not take
// its events in time is dropped rather than waited on. A write error is kept and returned by the
// next flush.
type sseWriter struct {
	w       http.ResponseWriter
	rc      http.ResponseController // a value: one allocation less a stream
	conn    net.Conn                // set instead of w: a detached stream writes its chunks itself
	buf     *[]byte                 // borrowed from sseBuffers while a batch is gathered
	err     error
	timeout time.Duration
}

// newSSEWriter starts the response. Its head is sent with the first flush, so that it shares a
// write with the events ready when the stream starts (a chat's first ones are).
func newSSEWriter(w http.ResponseWriter, timeout time.Duration) (*sseWriter, error) {
	s := &sseWriter{}
	if err := s.start(w, timeout); err != nil {
		return nil, err
	}
	return s, nil
}

// start is newSSEWriter for a writer that is part of a larger object (sseStream).
func (s *sseWriter) start(w http.ResponseWriter, timeout time.Duration) error {
	if !canFlush(w) {
		return parley.Errorf(parley.ECInternal, "streaming unsupported")
	}
	// The values are shared, never changed in place (net/http copies them when it sends the
	// head): no allocation for each of them on every stream.
	h := w.Header()
	h["Content-Type"] = sseContentType
	h["Cache-Control"] = noCache
	if h.Get("Connection") == "" { // "close" when a body was sent and not read (observe)
		h["Connection"] = keepAlive
	}
	h["X-Accel-Buffering"] = noBuffering // ask proxies not to buffer the stream
	*s = sseWriter{w: w, rc: *http.NewResponseController(w), timeout: timeout}
	w.WriteHeader(http.StatusOK)
	return nil
}

// An SSE response's header values.
var (
	sseContentType = []string{"text/event-stream"}
	noCache        = []string{"no-cache"}
	keepAlive      = []string{"keep-alive"}
	noBuffering    = []string{"no"}
	connClose      = []string{"close"}
)

// canFlush reports whether w, or a writer it wraps, can flush (as http.ResponseController
// looks for it).
func canFlush(w http.ResponseWriter) bool {
	for {
		switch w.(type) {
		case http.Flusher, interface{ FlushError() error }:
			return true
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return false
		}
		w = u.Unwrap()
	}
}

// b returns the batch's buffer, borrowing one if needed.
func (s *sseWriter) b() *[]byte {
	if s.buf == nil {
		s.buf = sseBuffers.Get().(*[]byte)
	}
	return s.buf
}

// gathered writes out what the batch has gathered once it is large.
func (s *sseWriter) gathered() {
	if len(*s.buf) >= sseWriteOut {
		s.writeOut()
	}
}

// writeOut writes the gathered bytes to the response, within the write timeout.
func (s *sseWriter) writeOut() {
	if s.buf == nil || len(*s.buf) == 0 {
		return
	}
	switch {
	case s.err != nil:
	case s.conn != nil:
		// One chunk of the chunked response: its size in hex, the bytes, CRLF; one system call.
		var size [20]byte
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
		bufs := net.Buffers{append(strconv.AppendInt(size[:0], int64(len(*s.buf)), 16), '\r', '\n'), *s.buf, crlf}
		_, s.err = bufs.WriteTo(s.conn)
	default:
		// Not every ResponseWriter supports deadlines (httptest's recorder does not); ignore that.
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
		_, s.err = s.w.Write(*s.buf)
	}
	*s.buf = (*s.buf)[:0]
}

var crlf = []byte("\r\n")

// lastChunk ends a chunked response.
var lastChunk = []byte("0\r\n\r\n")

// end ends the response: what was gathered is written out, without a flush of its own. A
// detached stream's last chunk goes in the same write; net/http sends the rest of a handler's
// response, with its end, when the handler returns.
func (s *sseWriter) end() {
	switch {
	case s.conn == nil:
		s.writeOut()
	case s.err != nil:
	case s.buf != nil && len(*s.buf) > 0:
		var size [20]byte
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
		bufs := net.Buffers{append(strconv.AppendInt(size[:0], int64(len(*s.buf)), 16), '\r', '\n'), *s.buf, crlf, lastChunk}
		_, s.err = bufs.WriteTo(s.conn)
		*s.buf = (*s.buf)[:0]
	default:
		_ = s.conn.SetWriteDeadline(time.Now().Add(s.timeout))
		_, s.err = s.conn.Write(lastChunk)
	}
	s.release()
}

// release gives the batch's buffer back.
func (s *sseWriter) release() {
	if s.buf != nil {
		if cap(*s.buf) <= sseKeep {
			sseBuffers.Put(s.buf)
		}
		s.buf = nil
	}
}

// event buffers one event: "id: <seq>", "event: <type>", "data: <json>".
func (s *sseWriter) event(f *stream.Frame) {
	b := s.b()
	*b = append(*b, "id: "...)
	*b = strconv.AppendInt(*b, f.Seq, 10)
	*b = append(*b, "\nevent: "...)
	*b = append(*b, f.Type...)
	*b = append(*b, "\ndata: "...)
	*b = append(*b, f.JSON...) // JSON never contains a raw newline
	*b = append(*b, "\n\n"...)
	s.gathered()
}

// errorEvent buffers an error that is not a run's: "event: error" and its data,
// {"type":"error","error":{…}}, without an id.
func (s *sseWriter) errorEvent(body parley.ErrorBody) {
	b := s.b()
	*b = append(*b, "event: error\ndata: "...)
	*b = append(*b, mustJSON(struct {
		Type  string           `json:"type"`
		Error parley.ErrorBody `json:"error"`
	}{"error", body})...)
	*b = append(*b, "\n\n"...)
	s.gathered()
}

// comment writes a keep-alive comment line and flushes.
func (s *sseWriter) comment(text string) error {
	b := s.b()
	*b = append(*b, ": "...)
	*b = append(*b, text...)
	*b = append(*b, "\n\n"...)
	return s.flush()
}

// flush writes what was gathered, flushes the response and gives the buffer back.
func (s *sseWriter) flush() error {
	// writeOut sets the write deadline when it has something to write: the flush that follows
	// at once goes out within it (one deadline set, not two, for each batch).
	wrote := s.buf != nil && len(*s.buf) > 0
	s.writeOut()
	s.release()
	if s.err != nil || s.conn != nil {
		return s.err
	}
	if !wrote {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	return s.rc.Flush()
}
