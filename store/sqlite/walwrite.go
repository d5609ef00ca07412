//go:build linux && (amd64 || arm64)

package sqlite

import (
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// One pwrite a WAL frame instead of two.
//
// SQLite writes each frame of the WAL as two writes: the frame's 24-byte header, then its page
// (walWriteOneFrame), each a pwrite of its own: at 32 in flight about 7.5 pwrites a chat, and
// the WAL's pwrites 11% of the store's CPU. The unix VFS lets a program replace the system
// calls it makes (sqlite3_vfs.xSetSystemCall, https://sqlite.org/c3ref/vfs.html). Here its
// "open", "close" and "pwrite" go through the functions below, which keep a WAL file's 24-byte
// write back and, when the next write to that file starts right after it (the frame's page, as
// it always does), write the two as one pwrite.
//
// What reaches the disk, and in what order relative to an fsync, is unchanged: SQLite writes
// a frame's page right after its header with nothing in between (no sync, no read, no other
// write), so a header kept back is written by that next call, before SQLite returns from the
// frame. Should anything else come first (a write elsewhere in the file, the file's close), the
// header is written on its own before it, as SQLite would have. Only files whose name ends in
// "-wal" are watched; every other file's writes go straight through.
//
// The replacement is process-wide (SQLite's system calls are), set once when the package is
// initialized, before any connection exists.

type (
	openFn   = func(tls *libc.TLS, path uintptr, flags, mode int32) int32
	closeFn  = func(tls *libc.TLS, fd int32) int32
	pwriteFn = func(tls *libc.TLS, fd int32, buf uintptr, n uint64, off int64) int64
)

// walHeader is the size of a WAL frame's header.
const walHeader = 24

var wal struct {
	open   openFn
	close  closeFn
	pwrite pwriteFn

	mu    sync.Mutex
	files map[int32]*walFile // the open WAL files, by descriptor

	joined atomic.Int64 // frames written with one pwrite (tests)
	writes atomic.Int64 // pwrites made to WAL files (tests)
}

// walFile is a WAL file open in the process, and the frame header kept back for it.
type walFile struct {
	held bool
	off  int64 // where the header kept goes
	buf  []byte
}

func init() {
	tls := libc.NewTLS()
	defer tls.Close()
	vfs := sqlite3.Xsqlite3_vfs_find(tls, 0) // the default, "unix"
	if vfs == 0 {
		return
	}
	v := (*sqlite3.Tsqlite3_vfs)(cptr(vfs))
	if v.FiVersion < 3 || v.FxGetSystemCall == 0 || v.FxSetSystemCall == 0 {
		return
	}
	get := *(*func(*libc.TLS, uintptr, uintptr) uintptr)(unsafe.Pointer(&v.FxGetSystemCall))
	set := *(*func(*libc.TLS, uintptr, uintptr, uintptr) int32)(unsafe.Pointer(&v.FxSetSystemCall))
	names := [3]uintptr{}
	for i, n := range []string{"open", "close", "pwrite"} {
		p, err := libc.CString(n)
		if err != nil {
			return
		}
		defer libc.Xfree(tls, p)
		names[i] = p
	}
	open, cls, pw := get(tls, vfs, names[0]), get(tls, vfs, names[1]), get(tls, vfs, names[2])
	if open == 0 || cls == 0 || pw == 0 {
		return
	}
	wal.open = *(*openFn)(unsafe.Pointer(&open))
	wal.close = *(*closeFn)(unsafe.Pointer(&cls))
	wal.pwrite = *(*pwriteFn)(unsafe.Pointer(&pw))
	wal.files = map[int32]*walFile{}
	fns := [3]uintptr{}
	*(*openFn)(unsafe.Pointer(&fns[0])) = walOpen
	*(*closeFn)(unsafe.Pointer(&fns[1])) = walClose
	*(*pwriteFn)(unsafe.Pointer(&fns[2])) = walPwrite
	// pwrite last: a WAL file is known by its descriptor before a write is kept back.
	for _, i := range []int{0, 1, 2} {
		if set(tls, vfs, names[i], fns[i]) != sqlite3.SQLITE_OK {
			for _, j := range []int{2, 1, 0} { // all or nothing
				set(tls, vfs, names[j], 0)
			}
			return
		}
	}
}

func walOpen(tls *libc.TLS, path uintptr, flags, mode int32) int32 {
	fd := wal.open(tls, path, flags, mode)
	if fd >= 0 && strings.HasSuffix(libc.GoString(path), "-wal") {
		wal.mu.Lock()
		wal.files[fd] = &walFile{}
		wal.mu.Unlock()
	}
	return fd
}

func walClose(tls *libc.TLS, fd int32) int32 {
	wal.mu.Lock()
	if f := wal.files[fd]; f != nil {
		if f.held {
			flushHeld(tls, fd, f) // not expected: SQLite closes no WAL between a header and its page
		}
		delete(wal.files, fd)
	}
	wal.mu.Unlock()
	return wal.close(tls, fd)
}

func walPwrite(tls *libc.TLS, fd int32, buf uintptr, n uint64, off int64) int64 {
	wal.mu.Lock()
	f := wal.files[fd]
	if f == nil {
		wal.mu.Unlock()
		return wal.pwrite(tls, fd, buf, n, off)
	}
	// A WAL file has one writer at a time (SQLite's WAL write lock); the lock here is for the
	// map, and keeps the race detector from having to know that.
	defer wal.mu.Unlock()
	if f.held {
		if off == f.off+walHeader && n > 0 {
			return joinFrame(tls, fd, f, buf, n)
		}
		if r := flushHeld(tls, fd, f); r < 0 {
			return r
		}
	}
	if n == walHeader && off >= 32 { // past the WAL's own header: a frame's header
		if cap(f.buf) < walHeader {
			f.buf = make([]byte, walHeader, walHeader+64<<10)
		}
		f.buf = f.buf[:walHeader]
		copy(f.buf, unsafe.Slice((*byte)(cptr(buf)), walHeader))
		f.held, f.off = true, off
		return walHeader
	}
	wal.writes.Add(1)
	return wal.pwrite(tls, fd, buf, n, off)
}

// joinFrame writes the header kept back and the n bytes at buf that follow it as one pwrite,
// and returns n as the page's write (or -1, errno set, if the write failed).
func joinFrame(tls *libc.TLS, fd int32, f *walFile, buf uintptr, n uint64) int64 {
	f.held = false
	f.buf = append(f.buf[:walHeader], unsafe.Slice((*byte)(cptr(buf)), n)...)
	if r := writeAll(tls, fd, f.buf, f.off); r < 0 {
		return r
	}
	wal.joined.Add(1)
	return int64(n)
}

// flushHeld writes the header kept back on its own.
func flushHeld(tls *libc.TLS, fd int32, f *walFile) int64 {
	f.held = false
	return writeAll(tls, fd, f.buf[:walHeader], f.off)
}

// writeAll writes b at off, through short writes and interrupts: the caller reports only the
// page's length, so SQLite cannot resume a short joined write itself.
func writeAll(tls *libc.TLS, fd int32, b []byte, off int64) int64 {
	for len(b) > 0 {
		wal.writes.Add(1)
		r := wal.pwrite(tls, fd, uintptr(unsafe.Pointer(&b[0])), uint64(len(b)), off)
		runtime.KeepAlive(b)
		if r < 0 {
			if *(*int32)(cptr(libc.X__errno_location(tls))) == eintr {
				continue
			}
			return r
		}
		if r == 0 { // not for a regular file; reported as an I/O error
			*(*int32)(cptr(libc.X__errno_location(tls))) = eio
			return -1
		}
		b, off = b[r:], off+r
	}
	return 0
}

// errno values (Linux).
const (
	eintr = 4
	eio   = 5
)

// cptr is the C memory at p (SQLite's and libc's, never the Go heap's) as a pointer.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
