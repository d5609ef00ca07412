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
// Open turns the automatic checkpoint off on every connection. Once the WAL holds
// checkpointFrames frames, the commit of a transaction that began a run (BeginRun) has the
// checkpoint run right after its batch has answered its callers, holding the group-commit
// writer's slot (groupcommit.Writer.Then), on a goroutine of its own: the begin's caller goes on
// to its first token, no commit runs beside the checkpoint (one that did would leave its frames
// uncopied, and the WAL would not restart but grow), and the writes that wait for it are the
// ones after the begin, which at one chat at a time are that chat's own events and end. The
// restart lands on the first of those. Any commit has it run once the WAL holds twice that (a
// store whose writes begin no runs).
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
	db   *sql.DB
	shm  string // the wal-index file, path + "-shm"
	at   uint32 // frames in the WAL that make a checkpoint due after a begin
	then func(f func())
	ctx  context.Context // cancelled by close: a checkpoint under way is interrupted
	stop context.CancelFunc

	last  uint32       // the WAL's frames at the last checkpoint (checkpoint: one at a time)
	blind atomic.Int64 // commits that could not read the WAL's length

	mu  sync.Mutex
	f   *os.File // the -shm file, opened once (nil until then, or after a failed read)
	hdr [24]byte
	// ran, if set (tests), is told each checkpoint's result: the WAL's frames, those copied,
	// and the error.
	ran func(frames, copied int, err error)
}

// newCheckpointer returns the checkpointer of the database at path; then is its writer's Then.
func newCheckpointer(db *sql.DB, path string, at uint32, then func(f func()), ran func(frames, copied int, err error)) *checkpointer {
	ctx, stop := context.WithCancel(context.Background())
	return &checkpointer{db: db, shm: path + "-shm", at: at, then: then, ctx: ctx, stop: stop, ran: ran}
}

// committed is called by the commit of each write transaction, before its callers are answered:
// it has a checkpoint run after the batch if the WAL holds the threshold's frames and the batch
// began a run, or twice that.
func (c *checkpointer) committed(began bool) {
	at := 2 * c.at
	if began {
		at = c.at
	}
	n, ok := c.frames()
	if ok && n < at {
		return
	}
	// The header could not be read (it should be; SQLite keeps it in the -shm file beside the
	// database in WAL mode): a checkpoint every blindCommits commits, and at once the first time.
	if !ok && c.blind.Add(1)%blindCommits != 1 {
		return
	}
	c.then(c.checkpoint)
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

// checkpoint copies the WAL into the database, unless it was copied already (a second request
// for the same frames). It runs holding the writer (Writer.Then).
func (c *checkpointer) checkpoint() {
	n, ok := c.frames()
	if ok && n == c.last {
		return
	}
	c.last = n
	ctx, cancel := context.WithTimeout(c.ctx, checkpointTimeout)
	defer cancel()
	var busy, frames, copied int
	err := c.db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
	if c.ran != nil {
		c.ran(frames, copied, err)
	}
}

// interrupt interrupts a checkpoint under way; none starts from then on that is not at once
// interrupted. The writer's Close then waits for it.
func (c *checkpointer) interrupt() { c.stop() }

// close lets go of the -shm file, once no commit runs.
func (c *checkpointer) close() {
	c.mu.Lock()
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
	c.mu.Unlock()
}
