package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// MaxEventSize bounds one line of a provider's event stream, and the data of one event.
const MaxEventSize = 4 << 20

// initialBuffer is the SSE reader's first line buffer, held by a streamed answer for its whole
// length: a model's chunk is one line of a few hundred bytes, so 1 KiB holds it (a longer line
// makes the buffer double). Reading ahead is the model connection's own buffer's job (net/http's,
// 4 KiB): with a smaller line buffer the reader takes a burst of chunks from it in more, cheaper
// reads, not in more reads of the socket.
const initialBuffer = 1 << 10

// ErrTooLarge reports a line or an event larger than MaxEventSize.
var ErrTooLarge = errors.New("event stream line or event too large")

// errPartialLine reports a stream that ended inside a line.
var errPartialLine = errors.New("event stream ended inside a line")

// SSEEvent is one dispatched server-sent event.
type SSEEvent struct {
	Type string // the event field; "" when none was sent
	Data []byte // the data lines joined by "\n"; valid until the next call of next
}

// SSEReader reads server-sent events as the WHATWG HTML standard defines them: lines ended by
// CRLF, LF or CR; a blank line dispatches; lines starting with ':' are comments; "data" lines
// accumulate; "id" and "retry" are ignored.
type SSEReader struct {
	sc    *bufio.Scanner
	first bool
	data  []byte
	typ   string
	has   bool        // a data field was seen since the last dispatch
	bufs  *sseBuffers // lent by sseBufferPool until Release
}

// sseBuffers are a reader's line buffer and data buffer, lent from one model call to the next
// (Release): a streamed chat allocated them anew on every call.
type sseBuffers struct{ line, data []byte }

var sseBufferPool = sync.Pool{New: func() any { return &sseBuffers{line: make([]byte, initialBuffer)} }}

// maxKeptData is the largest data buffer Release keeps for the next reader.
const maxKeptData = 64 << 10

func NewSSEReader(r io.Reader) *SSEReader {
	bufs := sseBufferPool.Get().(*sseBuffers)
	sc := bufio.NewScanner(r)
	// A model's chunks are a few hundred bytes: the buffer starts small (a stream holds it for
	// its whole answer) and doubles for a longer line, up to MaxEventSize (the scanner then
	// uses a buffer of its own; the lent one stays initialBuffer long).
	sc.Buffer(bufs.line[:0], MaxEventSize)
	sc.Split(splitLine)
	return &SSEReader{sc: sc, first: true, data: bufs.data[:0], bufs: bufs}
}

// Release gives the reader's buffers back for the next reader. Call it once the stream has
// ended, when nothing refers to an event's data any more; the reader must not be used after.
func (r *SSEReader) Release() {
	if r.bufs == nil {
		return
	}
	if cap(r.data) <= maxKeptData {
		r.bufs.data = r.data[:0]
	}
	sseBufferPool.Put(r.bufs)
	r.bufs, r.sc, r.data = nil, nil, nil
}

// Next returns the next event. At the end of the input, an event whose lines were complete but
// that no blank line dispatched is still returned; a partial last line is dropped. After the
// last event it returns io.EOF, or the read error.
//
// It stays under the model's read for a whole streamed answer, so it keeps only the read in its
// frame: a line is taken by line, the input's end by end (issue 25: memory per active stream).
func (r *SSEReader) Next() (SSEEvent, error) {
	r.data, r.typ, r.has = r.data[:0], "", false
	for r.sc.Scan() {
		if done, err := r.line(r.sc.Bytes()); done || err != nil {
			return r.event(err)
		}
	}
	return r.end()
}

// line takes one line of the input. It reports whether the line dispatched the event read so far.
//
//go:noinline
func (r *SSEReader) line(line []byte) (bool, error) {
	if r.first {
		line = bytes.TrimPrefix(line, []byte("\xEF\xBB\xBF"))
		r.first = false
	}
	if len(line) == 0 {
		if r.has {
			return true, nil
		}
		r.typ = ""
		return false, nil
	}
	if line[0] == ':' {
		return false, nil
	}
	field, value, _ := bytes.Cut(line, []byte(":"))
	value = bytes.TrimPrefix(value, []byte(" "))
	switch string(field) {
	case "data":
		if len(r.data)+len(value)+1 > MaxEventSize {
			return false, ErrTooLarge
		}
		r.data = append(r.data, value...)
		r.data = append(r.data, '\n')
		r.has = true
	case "event":
		r.typ = string(value)
	}
	return false, nil
}

// event returns the event read so far, or err.
func (r *SSEReader) event(err error) (SSEEvent, error) {
	if err != nil {
		return SSEEvent{}, err
	}
	return SSEEvent{Type: r.typ, Data: bytes.TrimSuffix(r.data, []byte("\n"))}, nil
}

// end is what Next returns once the input ended or failed.
//
//go:noinline
func (r *SSEReader) end() (SSEEvent, error) {
	err := r.sc.Err()
	switch {
	case errors.Is(err, bufio.ErrTooLong):
		return SSEEvent{}, ErrTooLarge
	case err != nil && !errors.Is(err, errPartialLine):
		return SSEEvent{}, err
	case r.has:
		return r.event(nil)
	}
	return SSEEvent{}, io.EOF
}

// splitLine splits at CRLF, LF or CR. A CR at the end of the buffer waits for the next byte, so
// a CRLF split across reads is one line end. Input ending without a line end is an error.
func splitLine(data []byte, atEOF bool) (int, []byte, error) {
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF && len(data) > 0 {
		return 0, nil, errPartialLine
	}
	return 0, nil, nil
}
