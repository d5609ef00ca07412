package sqlite

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// writeSessions stores n sessions, each with a title of 2 KiB, one write each (a commit each).
func writeSessions(t *testing.T, s *Store, n int) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for range n {
		sess := &parley.Session{ID: parley.NewID(), Owner: "u", Title: strings.Repeat("t", 2048), CreatedAt: now, UpdatedAt: now}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
}

// checkpointResult is what a checkpoint reported: the WAL's frames, and those it copied.
type checkpointResult struct{ frames, copied int }

// openCheckpointing opens a store in the file at path whose checkpointer starts at `at` frames and
// reports each checkpoint (up to keep of them unread) on the channel returned; a checkpoint's
// error fails the test, but the one Close interrupts.
func openCheckpointing(t *testing.T, path string, at uint32, keep int) (*Store, <-chan checkpointResult) {
	t.Helper()
	results := make(chan checkpointResult, keep)
	s, err := Open(context.Background(), path, func(o *options) {
		o.checkpointAt = at
		o.checkpointed = func(frames, copied int, err error) {
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("checkpoint: %v", err)
			}
			select {
			case results <- checkpointResult{frames, copied}:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, results
}

// No commit checkpoints the WAL: past SQLite's default threshold (1,000 pages), with the store's
// checkpointer set beyond what the test writes, the WAL still holds every frame written.
func TestACommitDoesNotCheckpoint(t *testing.T) {
	var mu sync.Mutex
	ran := 0
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(context.Background(), path, func(o *options) {
		o.checkpointAt = 1 << 30
		o.checkpointed = func(int, int, error) { mu.Lock(); ran++; mu.Unlock() }
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	writeSessions(t, s, 1500) // ≥ 1 page each
	n, ok := s.ckpt.frames()
	if !ok {
		t.Fatal("the wal-index header could not be read")
	}
	if n < 1500 {
		t.Fatalf("the WAL holds %d frames after 1,500 commits of a page or more: a commit checkpointed it", n)
	}
	var auto int
	if err := s.db.QueryRow(`PRAGMA wal_autocheckpoint`).Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("wal_autocheckpoint = %d on a connection of the store, want 0", auto)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran != 0 {
		t.Fatalf("the checkpointer ran %d times below its threshold", ran)
	}
}

// The checkpointer keeps the WAL short without begins too: once it holds twice the threshold's
// frames, any commit starts a checkpoint, which copies them to the database, and the WAL starts
// again from its beginning.
func TestTheCheckpointerKeepsTheWALShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "parley.db")
	s, results := openCheckpointing(t, path, 200, 64)
	writeSessions(t, s, 300)
	select {
	case r := <-results:
		if r.frames < 400 || r.copied != r.frames {
			t.Fatalf("a checkpoint of a WAL of %d frames copied %d", r.frames, r.copied)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no checkpoint within 30 s of a WAL past its threshold")
	}
	// Keep writing: the checkpointed WAL restarts, so it never holds much more than the
	// threshold and what was written while a checkpoint ran.
	deadline := time.Now().Add(30 * time.Second)
	for {
		writeSessions(t, s, 50)
		n, ok := s.ckpt.frames()
		if ok && n < 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the WAL still holds %d frames (ok %v) after 30 s of checkpoints", n, ok)
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 64<<20 {
		t.Fatalf("WAL file of %d bytes", fi.Size())
	}
}

// A run's begin starts a checkpoint once the WAL holds the threshold's frames, and the
// checkpoint runs while no commit does (it holds the writer): it copies the whole WAL, however
// busy the writers, so that the next commit restarts the WAL. (A checkpoint beside running
// commits leaves their frames uncopied; the WAL then does not restart, but grows, and each
// commit past the threshold asks for another checkpoint.)
func TestACheckpointAfterABeginCopiesTheWholeWAL(t *testing.T) {
	s, results := openCheckpointing(t, filepath.Join(t.TempDir(), "parley.db"), 100, 256)
	ctx := context.Background()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 { // writers that never pause
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				now := time.Now().UTC().Truncate(time.Microsecond)
				if err := s.CreateSession(ctx, &parley.Session{ID: parley.NewID(), Owner: "u", Title: "busy", CreatedAt: now, UpdatedAt: now}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var got []checkpointResult
	deadline := time.Now().Add(60 * time.Second)
	for len(got) < 8 {
		if time.Now().After(deadline) {
			t.Fatalf("%d checkpoints in 60 s of begins past the threshold", len(got))
		}
		now := time.Now().UTC().Truncate(time.Microsecond)
		id := parley.NewID()
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: id, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(strings.Repeat("q", 3000)), RunID: run.ID, CreatedAt: now}
		if _, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: &parley.Session{ID: id, Owner: "u", CreatedAt: now, UpdatedAt: now},
			SessionID: id, Reserve: 8, Run: run, Messages: []*parley.Message{user}}); err != nil {
			t.Fatal(err)
		}
		select {
		case r := <-results:
			got = append(got, r)
		default:
		}
	}
	restarted := false
	for i, r := range got {
		if r.frames < 100 || r.copied != r.frames {
			t.Fatalf("checkpoints (frames, copied) %v: want each of a WAL of 100 frames or more, all copied", got)
		}
		restarted = restarted || i > 0 && r.frames < got[i-1].frames
	}
	// A WAL that restarts after each checkpoint holds a hundred frames and what came while the
	// checkpointer waited, each time anew; one that does not restart only grows.
	if !restarted {
		t.Fatalf("checkpoints (frames, copied) %v: the WAL only grew, it never restarted", got)
	}
}

// The begin that makes a checkpoint due is answered before the checkpoint runs; the checkpoint
// then holds back the next write (at one chat at a time, that chat's own end), not the begin.
func TestTheBeginIsAnsweredBeforeItsCheckpoint(t *testing.T) {
	inside, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(context.Background(), path, func(o *options) {
		o.checkpointAt = 200 // the migrations leave 100 frames or so
		o.checkpointed = func(int, int, error) {
			once.Do(func() { close(inside); <-release }) // the first checkpoint waits, holding the writer
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	// Past the threshold, below twice it, and no begin yet: no checkpoint.
	for deadline := time.Now().Add(30 * time.Second); ; {
		writeSessions(t, s, 1)
		if n, ok := s.ckpt.frames(); ok && n >= 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WAL never reached 200 frames")
		}
	}
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := parley.NewID()
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: id, Owner: "u", Model: "m", Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
	if _, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: &parley.Session{ID: id, Owner: "u", CreatedAt: now, UpdatedAt: now},
		SessionID: id, Reserve: 8, Run: run, Messages: []*parley.Message{user}}); err != nil {
		t.Fatal(err)
	}
	// BeginRun returned: its checkpoint runs (or is about to) after it.
	select {
	case <-inside:
	case <-time.After(30 * time.Second):
		t.Fatal("no checkpoint after a begin past the threshold")
	}
	next := make(chan error, 1)
	go func() {
		now := time.Now().UTC().Truncate(time.Microsecond)
		next <- s.CreateSession(ctx, &parley.Session{ID: parley.NewID(), Owner: "u", CreatedAt: now, UpdatedAt: now})
	}()
	select {
	case err := <-next:
		t.Fatalf("a write was answered (%v) while the checkpoint held the writer", err)
	case <-time.After(100 * time.Millisecond): // a write beside the checkpoint would be done by now
	}
	close(release)
	select {
	case err := <-next:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the write after the checkpoint never ran")
	}
}
