package httpapi

import (
	"io"
	"net"
	"sync"
	"syscall"
)

// idlePoller waits for watched connections with one epoll instance and one goroutine, which run
// only while some connection is watched: the goroutine ends, and the instance is closed, after
// a second with none.
type idlePoller struct {
	mu      sync.Mutex
	epfd    int    // -1: none
	gen     uint64 // counts the epoll instances made, so a watch knows whether it was added to this one
	next    uint64
	watches map[uint64]*idleWatch // the armed ones
}

func newIdlePoller() *idlePoller { return &idlePoller{epfd: -1, watches: map[uint64]*idleWatch{}} }

// idlePollWait is how long the poller's goroutine waits in one call (ms): with no watch left
// after that, it ends.
const idlePollWait = 1000

// watch returns a watch of c that calls fn, or nil when c cannot be watched (not a socket).
func (p *idlePoller) watch(c net.Conn, fn func()) *idleWatch {
	rc := rawConnOf(c)
	if rc == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.next++
	return &idleWatch{p: p, rc: rc, id: p.next, fn: fn}
}

// arm watches the connection until it is readable, once. It reports false when it cannot: the
// watch is closed, or the connection is.
func (w *idleWatch) arm() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	if w.armed {
		return true
	}
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epfd < 0 {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return false
		}
		p.epfd = fd
		p.gen++
		go p.loop(fd)
	}
	// Level-triggered, once: bytes already waiting are reported at once, and the watch is
	// disarmed by its event until it is armed again.
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLONESHOT, Fd: int32(uint32(w.id)), Pad: int32(uint32(w.id >> 32))}
	op := syscall.EPOLL_CTL_ADD
	if w.gen == p.gen {
		op = syscall.EPOLL_CTL_MOD
	}
	var cerr error
	err := w.rc.Control(func(fd uintptr) {
		cerr = syscall.EpollCtl(p.epfd, op, int(fd), &ev)
		if cerr == syscall.ENOENT && op == syscall.EPOLL_CTL_MOD {
			cerr = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if err != nil || cerr != nil {
		return false
	}
	w.gen = p.gen
	w.armed = true
	p.watches[w.id] = w
	return true
}

// close stops watching the connection; its callback is not called after close returns, unless
// it had already begun. Call it before closing the connection.
func (w *idleWatch) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.closed, w.armed = true, false
	p := w.p
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.watches, w.id)
	if w.gen == p.gen && p.epfd >= 0 {
		// The connection's descriptor is still open (the caller closes it after), so this
		// removes it from this instance and nothing else.
		_ = w.rc.Control(func(fd uintptr) { _ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	}
}

func (p *idlePoller) loop(epfd int) {
	events := make([]syscall.EpollEvent, 128)
	var fired []*idleWatch
	for {
		n, err := syscall.EpollWait(epfd, events, idlePollWait)
		if err != nil {
			n = 0 // EINTR; nothing else is expected of a valid instance
		}
		p.mu.Lock()
		fired = fired[:0]
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if w, ok := p.watches[id]; ok {
				delete(p.watches, id)
				fired = append(fired, w)
			}
		}
		if n == 0 && err == nil && len(p.watches) == 0 {
			// Nothing is watched: the watches disarmed by their events are added again, to a
			// new instance, when they are armed.
			syscall.Close(epfd)
			p.epfd = -1
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		for _, w := range fired {
			w.fire()
		}
		clear(fired)
	}
}

// readNow reads what the connection has, without waiting: (0, errWouldBlock) when it has nothing,
// (0, io.EOF) when the peer has closed its side. It goes around the runtime's poller, so it must
// be the connection's only reader at the time.
func (w *idleWatch) readNow(b []byte) (int, error) {
	var n int
	var rerr error
	err := w.rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Read(int(fd), b)
		return true // one attempt: never wait in the runtime's poller
	})
	if err != nil {
		return 0, err
	}
	return readResult(n, rerr)
}

func readResult(n int, err error) (int, error) {
	switch {
	case err == syscall.EAGAIN:
		return 0, errWouldBlock
	case err != nil:
		return 0, err
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}
