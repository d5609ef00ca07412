package main

import (
	"net"
	"net/http"
	"time"

	"github.com/parleyhq/parley/internal/onewrite"
)

// How many idle connections to the model providers are kept for the next call. net/http's
// default keeps 2 per host: with more streams than that in flight to one provider, most calls
// found no idle connection and dialed a new one (in a profile of 32 streams in flight to an
// OpenAI-compatible server, dialing took 6% of Parley's CPU), and closed it after. A connection
// kept idle costs its two buffers and two goroutines (about 10 KiB).
const (
	upstreamIdlePerHost = 512
	upstreamIdle        = 1024
)

// upstreamWriteBuffer is the size of the buffer a connection to a model provider writes its
// requests through (net/http's default: 4 KiB). A connection holds it for as long as it lives,
// a streamed answer's whole length included, though it is used only while a request is written:
// the request line and headers fit in 1 KiB, and the body goes to the socket without passing
// through it, in the same write as the head (onewrite).
const upstreamWriteBuffer = 1 << 10

// upstreamTransport is the transport of the calls to the model providers: net/http's default
// (proxy from the environment, timeouts, HTTP/2 where the server offers it), keeping as many idle
// connections per provider as a busy server has streams in flight to it, each with a small write
// buffer, and sending a request's head and body in one write (onewrite: a system call a model
// call fewer, on both sides, and no copy of the body).
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = upstreamIdle
	t.MaxIdleConnsPerHost = upstreamIdlePerHost
	t.WriteBufferSize = upstreamWriteBuffer
	// net/http's default dialer's settings (DefaultTransport's DialContext is not exported apart).
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	t.DialContext = onewrite.Dialer(d.DialContext)
	return t
}
