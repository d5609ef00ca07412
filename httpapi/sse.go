package httpapi

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	parley "github.com/parleyhq/parley"
)

// sseWriter writes Server-Sent Events. Every write has a deadline: a client that does not take
// its events in time is dropped rather than waited on.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	buf     *bufio.Writer
	timeout time.Duration
}

func newSSEWriter(w http.ResponseWriter, timeout time.Duration) (*sseWriter, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // ask proxies not to buffer the stream
	s := &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	s.buf = bufio.NewWriterSize(writerFunc(s.write), 32<<10)
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

// event buffers one event: "id: <seq>", "event: <type>", "data: <json>".
func (s *sseWriter) event(ev parley.Event) error {
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	s.buf.WriteString("id: ")
	s.buf.WriteString(strconv.FormatInt(ev.Seq, 10))
	s.buf.WriteString("\nevent: ")
	s.buf.WriteString(string(ev.Type))
	s.buf.WriteString("\ndata: ")
	s.buf.Write(data) // JSON never contains a raw newline
	_, err = s.buf.WriteString("\n\n")
	return err
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
