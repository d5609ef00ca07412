//go:build !linux

package httpapi

import "net"

// idlePoller has no epoll here: no connection can be watched, and every stream keeps its reading
// goroutine.
type idlePoller struct{}

func newIdlePoller() *idlePoller { return &idlePoller{} }

func (p *idlePoller) watch(net.Conn, func()) *idleWatch { return nil }

func (w *idleWatch) arm() bool { return false }

func (w *idleWatch) close() {}

func (w *idleWatch) readNow([]byte) (int, error) { return 0, errWouldBlock }
