package httpapi

import (
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ConnLimit bounds the open connections of each client address (IPv6 addresses count by their
// /64), at accept: a connection past the bound gets a bare 503 with Retry-After and is closed,
// before a byte of it is read. Behind a reverse proxy every connection comes from the proxy's
// address; there the proxy must bound them (and Max is 0).
type ConnLimit struct {
	net.Listener
	Max int
	Log *slog.Logger

	mu     sync.Mutex
	byAddr map[string]int

	refused    atomic.Int64
	lastWarned atomic.Int64 // unix nanos of the last log line about refusals
}

// LimitConnsPerAddr wraps ln so that no client address holds more than max connections at once
// (max ≤ 0: ln itself).
func LimitConnsPerAddr(ln net.Listener, max int, log *slog.Logger) net.Listener {
	if max <= 0 {
		return ln
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ConnLimit{Listener: ln, Max: max, Log: log, byAddr: map[string]int{}}
}

// refusedResponse is what a connection past the bound gets. The request is not read.
var refusedResponse = func() []byte {
	body := `{"error":{"code":"unavailable","message":"too many connections from this address"}}` + "\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\nRetry-After: " +
		strconv.Itoa(defaultRetryAfter) + "\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}()

func (l *ConnLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := connAddr(c.RemoteAddr())
		l.mu.Lock()
		n := l.byAddr[addr]
		if n < l.Max {
			l.byAddr[addr] = n + 1
		}
		l.mu.Unlock()
		if n < l.Max {
			return &limitedConn{Conn: c, release: func() { l.release(addr) }}, nil
		}
		l.refuse(c, addr)
	}
}

// refuse answers a connection past the bound and closes it. The write goes to a fresh socket's
// empty send buffer, so it does not wait; the deadline bounds it anyway.
func (l *ConnLimit) refuse(c net.Conn, addr string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = c.Write(refusedResponse)
	_ = c.Close()
	n := l.refused.Add(1)
	now := time.Now().UnixNano()
	if last := l.lastWarned.Load(); now-last > int64(10*time.Second) && l.lastWarned.CompareAndSwap(last, now) {
		l.Log.Warn("connections refused: too many from one address", "addr", addr, "max_per_addr", l.Max, "refused_total", n)
	}
}

func (l *ConnLimit) release(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
		delete(l.byAddr, addr)
	}
}

// connAddr is the address a connection counts under.
func connAddr(a net.Addr) string {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return a.String()
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// limitedConn gives its slot back when it is closed (once, however often Close is called).
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// NetConn returns the connection it wraps (an idle stream's watch reads the socket underneath).
func (c *limitedConn) NetConn() net.Conn { return c.Conn }

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
