package sqlite

import (
	"context"
	"database/sql"
	"encoding/binary"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Checkpoints run after a chat's begin, never inside a commit.
//
// SQLite's default (wal_autocheckpoint=1000) has the commit that takes the WAL past 1,000 pages
// also copy the WAL into the database file and fsync that file, inside its COMMIT statement: on
// the disk of issue 25's sixth pass 15–40 ms added to one commit in every few dozen, and that
// commit is a chat's begin (before its first token) as often as not. The next writer after such
// a checkpoint restarts the WAL, writing and fsyncing a new WAL header: a second fsync in that
// commit, again as often as not a begin.
//
// Open turns the automatic checkpoint off on every connection. The store's checkpointer (one
// goroutine, stopped by Close) checkpoints once the WAL holds checkpointFrames frames, and only
// when told so by a run's begin that has just committed (BeginRun), or by any commit once the
// WAL holds twice that (a store that begins no runs). It checkpoints holding the group-commit
// writer's slot (groupcommit.Writer.Exclusive), so that no commit runs meanwhile and the
// checkpoint copies the whole WAL (a checkpoint beside running commits leaves their frames, and
// the WAL would not restart): the writes that wait for it are the ones after the begin, which at
// one chat at a time are that chat's own events and end, after its first token. The restart
// lands on one of those as well.
//
// The threshold is SQLite's own: the WAL stays as long as it was, and a checkpoint costs what
// it did; what changes is where it lands.
//
// A commit learns the WAL's length from the wal-index header (the -shm file, whose layout SQLite
// documents: the header's mxFrame, the last valid frame, at byte 16, in native byte order): one
// pread, after the commit.
const checkpointFrames = 1000 // ≈ 4 MiB of WAL at 4 KiB pages, wal_autocheckpoint's default

// checkpointTimeout bounds one checkpoint; Close interrupts it sooner.
const checkpointTimeout = time.Minute

type checkpointer struct {
	db        *sql.DB
	shm       string                                    // the wal-index file, path + "-shm"
	at        uint32                                    // frames in the WAL that start a checkpoint
	exclusive func(ctx context.Context, f func()) error // the store's writer's Exclusive
	last      uint32                                    // the WAL's frames at the last checkpoint (loop)
	blind     atomic.Int64                              // commits that could not read the WAL's length

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

func newCheckpointer(db *sql.DB, path string, at uint32, exclusive func(context.Context, func()) error,
	ran func(frames, copied int, err error)) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	c := &checkpointer{db: db, shm: path + "-shm", at: at, exclusive: exclusive, want: make(chan struct{}, 1), stop: stop,
		done: make(chan struct{}), ran: ran}
	go c.loop(ctx)
	return c
}

// begun is called after a run's begin has committed: it starts a checkpoint if the WAL holds
// the threshold's frames. It does not wait for the checkpoint.
func (c *checkpointer) begun() { c.due(c.at) }

// committed is called after each commit: it starts a checkpoint if the WAL holds twice the
// threshold's frames (no begin came to start one).
func (c *checkpointer) committed() { c.due(2 * c.at) }

func (c *checkpointer) due(at uint32) {
	n, ok := c.frames()
	if ok && n < at {
		return
	}
	// The header could not be read (it should be; SQLite keeps it in the -shm file beside the
	// database in WAL mode): a checkpoint every blindCommits commits, and at once the first time.
	if !ok && c.blind.Add(1)%blindCommits != 1 {
		return
	}
	select {
	case c.want <- struct{}{}:
	default: // one is due already
	}
}

// blindCommits is how many commits go between two checkpoints when the WAL's length cannot be
// read.
const blindCommits = 256

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
		_ = c.exclusive(ctx, func() { c.checkpoint(ctx) }) // an error: the store is closing
	}
}

// checkpoint copies the WAL into the database, unless it is short or was copied already (a
// second request for the same frames). It runs while no commit does.
func (c *checkpointer) checkpoint(ctx context.Context) {
	n, ok := c.frames()
	if ok && (n < c.at || n == c.last) {
		return
	}
	c.last = n
	cctx, cancel := context.WithTimeout(ctx, checkpointTimeout)
	defer cancel()
	var busy, frames, copied int
	err := c.db.QueryRowContext(cctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	if c.ran != nil {
		c.ran(frames, copied, err)
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
