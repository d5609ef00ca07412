package httpapi

import (
	"bufio"
	"net/http"
	"strconv"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
)

// sseBuffer is each stream's write buffer: a few chunk events; a larger event is written
// through. It is per connection, so it is kept small.
const sseBuffer = 4 << 10

// sseWriter writes Server-Sent Events. Every write has a deadline: a client that does not take
// its events in time is dropped rather than waited on.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     *bufio.Writer
	timeout time.Duration
	num     [20]byte
}

func newSSEWriter(w http.ResponseWriter, timeout time.Duration) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	if h.Get("Connection") == "" { // "close" when a body was sent and not read (observe)
		h.Set("Connection", "keep-alive")
	}
	h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	s := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	s.buf = bufio.NewWriterSize(writerFunc(s.write), sseBuffer)
	w.WriteHeader(http.StatusOK)
	if err := s.flush(); err != nil {
		return nil, parley.WrapError(parley.ECInternal, err, "streaming unsupported")
	}
	return s, nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func (s *sseWriter) write(p []byte) (int, error) {
	// Not every ResponseWriter supports deadlines (httptest's recorder does not); ignore that.
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return s.w.Write(p)
}

// event buffers one event: "id: <seq>", "event: <type>", "data: <json>". A write error is kept
// by the buffer and returned by the next flush.
func (s *sseWriter) event(f *stream.Frame) {
	s.buf.WriteString("id: ")
	s.buf.Write(strconv.AppendInt(s.num[:0], f.Seq, 10))
	s.buf.WriteString("\nevent: ")
	s.buf.WriteString(string(f.Type))
	s.buf.WriteString("\ndata: ")
	s.buf.Write(f.JSON) // JSON never contains a raw newline
	s.buf.WriteString("\n\n")
}

// errorEvent buffers an error that is not a run's: "event: error" and its data,
// {"type":"error","error":{…}}, without an id.
func (s *sseWriter) errorEvent(body parley.ErrorBody) {
	s.buf.WriteString("event: error\ndata: ")
	s.buf.Write(mustJSON(struct {
		Type  string           `json:"type"`
		Error parley.ErrorBody `json:"error"`
	}{"error", body}))
	s.buf.WriteString("\n\n")
}

// comment writes a keep-alive comment line and flushes.
func (s *sseWriter) comment(text string) error {
	s.buf.WriteString(": ")
	s.buf.WriteString(text)
	s.buf.WriteString("\n\n")
	return s.flush()
}

func (s *sseWriter) flush() error {
	if err := s.buf.Flush(); err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	return s.rc.Flush()
}
