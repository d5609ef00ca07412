package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"os"
	"sync"
	"time"
)

// Checkpoints run beside the writes, never inside a commit.
//
// SQLite's default (wal_autocheckpoint=1000) has the commit that takes the WAL past 1,000 pages
// also copy the WAL into the database file and fsync that file, inside its COMMIT statement: on
// the disk of issue 25's sixth pass 15–40 ms added to one commit in every few dozen, and that
// commit is a chat's begin (before its first token) as often as not. Open turns the automatic
// checkpoint off on every connection, and the store's checkpointer (one goroutine, stopped by
// Close) runs PRAGMA wal_checkpoint(PASSIVE) once the WAL holds checkpointFrames frames:
// PASSIVE takes no writer lock and waits for no reader, so commits go on while it copies.
//
// A commit learns the WAL's length from the wal-index header (the -shm file, whose layout SQLite
// documents: the header's mxFrame, the last valid frame, at byte 16, in native byte order): one
// pread, on the committing goroutine, after the commit. A bigger threshold than SQLite's makes
// the WAL restart (its next writer writes and fsyncs a new WAL header: a second fsync in that
// commit) once every checkpointFrames frames instead of every 1,000.
const checkpointFrames = 4000 // ≈ 16 MiB of WAL at 4 KiB pages

// checkpointTimeout bounds one checkpoint; Close interrupts it sooner.
const checkpointTimeout = time.Minute

type checkpointer struct {
	db  *sql.DB
	shm string // the wal-index file, path + "-shm"
	at  uint32 // frames in the WAL that start a checkpoint

	mu   sync.Mutex
	f    *os.File // the -shm file, opened once (nil until then, or after a failed read)
	hdr  [24]byte
	want chan struct{} // cap 1: a checkpoint is due
	stop context.CancelFunc
	done chan struct{}
	// ran, if set (tests), is told each checkpoint's result: the WAL's frames, those copied,
	// and the error.
	ran func(frames, copied int, err error)
}

func newCheckpointer(db *sql.DB, path string, at uint32, ran func(frames, copied int, err error)) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, shm: path + "-shm", at: at, want: make(chan struct{}, 1), stop: stop,
		done: make(chan struct{}), ran: ran}
	go c.loop(ctx)
	return c
}

// committed is called after each commit: it starts a checkpoint if the WAL has grown past the
// threshold. It does not wait for the checkpoint.
func (c *checkpointer) committed() {
	n, ok := c.frames()
	if ok && n < c.at {
		return
	}
	// The header could not be read: checkpoint (a PASSIVE checkpoint of a short WAL is cheap,
	// and the next commit tries the header again).
	select {
	case c.want <- struct{}{}:
	default: // one is due already
	}
}

// frames reads mxFrame from the wal-index header.
func (c *checkpointer) frames() (uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		f, err := os.Open(c.shm)
		if err != nil {
			return 0, false
		}
		c.f = f
	}
	if _, err := c.f.ReadAt(c.hdr[:], 0); err != nil {
		c.f.Close()
		c.f = nil
		return 0, false
	}
	return binary.NativeEndian.Uint32(c.hdr[16:20]), true
}

func (c *checkpointer) loop(ctx context.Context) {
	defer close(c.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.want:
		}
		cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
		var busy, frames, copied int
		err := c.db.QueryRowContext(cctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
		cancel()
		if c.ran != nil {
			c.ran(frames, copied, err)
		}
	}
}

// close stops the checkpointer (interrupting a checkpoint under way) and waits for it.
func (c *checkpointer) close() {
	c.stop()
	<-c.done
	c.mu.Lock()
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
	c.mu.Unlock()
}
