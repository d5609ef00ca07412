package httpapi

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// An idle stream's connection is read by no goroutine. A goroutine blocked in a read holds its
// stack (4–8 KiB once the calls that led to the read have grown it) for as long as the client
// says nothing, which for an idle stream is its whole life. So a stream whose client is quiet
// hands its connection to the server's idlePoller instead: one goroutine waits, with epoll (Linux),
// for any of the watched connections to become readable (bytes from the client, or its leaving),
// and calls the stream back; the stream then reads what there is with a goroutine of its own, or
// without one. Where there is no epoll, or the connection is not a plain socket, watch returns
// nil and the stream keeps a reading goroutine, as before.

// errWouldBlock: a read found nothing to read (readNow), or a stream's reader chose to give
// back its goroutine rather than wait for the client (wsReader).
var errWouldBlock = errors.New("nothing to read yet")

// idleWatch is one connection watched by an idlePoller. Its callback runs once per arm, in the
// poller's goroutine, when the connection has something to read or its peer hung up; it must not
// block. close must be called before the connection is closed.
type idleWatch struct {
	p  *idlePoller
	rc syscall.RawConn
	id uint64
	fn func()

	mu     sync.Mutex
	armed  bool
	closed bool
	gen    uint64 // the poller's epoll instance it was added to (0: none)
}

// fire calls the callback if the watch is still armed; the poller calls it once per event.
func (w *idleWatch) fire() {
	w.mu.Lock()
	if w.closed || !w.armed {
		w.mu.Unlock()
		return
	}
	w.armed = false
	w.mu.Unlock()
	w.fn()
}

// rawConnOf returns the socket underneath c (through wrappers that say what they wrap, such as
// a per-address limit's), when reads of c are reads of that socket; nil otherwise.
func rawConnOf(c net.Conn) syscall.RawConn {
	for {
		switch t := c.(type) {
		case *net.TCPConn:
			rc, err := t.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		case *net.UnixConn:
			rc, err := t.SyscallConn()
			if err != nil {
				return nil
			}
			return rc
		case interface{ NetConn() net.Conn }:
			c = t.NetConn()
		default:
			return nil
		}
	}
}
