package llmtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Transport returns a RoundTripper that serves requests with s in-process, without a socket.
// Streamed bodies arrive chunk by chunk as the server flushes them.
func Transport(s *Server) http.RoundTripper { return transport{s} }

type transport struct{ s *Server }

func (t transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	pr, pw := io.Pipe()
	rw := &pipeWriter{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	sreq := req.Clone(ctx)
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	// The handler goroutine is owned by this round trip: it ends when the handler returns, which
	// the cancelled context (the body closed, or the request's context done) makes prompt.
	go func() {
		defer cancel()
		defer func() {
			if p := recover(); p != nil {
				rw.abort(fmt.Errorf("llmtest: handler panic: %v", p))
				return
			}
			rw.start()
			pw.Close()
		}()
		t.s.ServeHTTP(rw, sreq)
	}()
	select {
	case <-rw.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err()) // unblocks a handler that is writing
		return nil, ctx.Err()
	}
	return &http.Response{
		Status: fmt.Sprintf("%d %s", rw.status, http.StatusText(rw.status)), StatusCode: rw.status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: rw.header, Body: &pipeBody{pr: pr, cancel: cancel}, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the ResponseWriter of the in-process transport.
type pipeWriter struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		w.header = w.header.Clone() // the response gets a snapshot, as on the wire
		close(w.ready)
	})
}

func (w *pipeWriter) start() { w.WriteHeader(http.StatusOK) }

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.start()
	return w.pw.Write(b)
}

// Flush is a no-op: the pipe hands each write to the reader as it happens.
func (w *pipeWriter) Flush() { w.start() }

func (w *pipeWriter) abort(err error) {
	w.start()
	w.pw.CloseWithError(err)
}

type pipeBody struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
}

func (b *pipeBody) Read(p []byte) (int, error) { return b.pr.Read(p) }

func (b *pipeBody) Close() error {
	b.cancel()
	return b.pr.CloseWithError(io.ErrClosedPipe)
}

// ListenAndServe serves s on addr until ctx is cancelled, logging the address it listens on.
func ListenAndServe(ctx context.Context, addr string, s *Server, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", "addr", ln.Addr().String())
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil {
		srv.Close()
	}
	<-errc
	return nil
}
