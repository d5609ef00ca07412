//go:build linux && (amd64 || arm64)

package sqlite

import (
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Each frame SQLite appends to the WAL reaches the file by one pwrite, its header and page
// together, and the WAL stays what SQLite wrote: a copy of the database and its WAL taken with
// the store still open (as a crash leaves them) opens with every chat in it and passes SQLite's
// integrity check. Fails on main, which writes each frame as two pwrites.
func TestAWALFrameIsOnePwrite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "parley.db")
	s, err := Open(ctx, path, func(o *options) { o.checkpointAt = 1 << 30 }) // no checkpoint but the test's
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		t.Fatal(err)
	}
	writes0, joined0 := wal.writes.Load(), wal.joined.Load()
	const chats = 40
	now := time.Now().UTC().Truncate(time.Microsecond)
	var wg sync.WaitGroup
	errs := make(chan error, chats)
	for range chats {
		wg.Go(func() {
			f, err := beginChat(ctx, s, now)
			if err == nil {
				err = s.FinishRun(ctx, f)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	writes, joined := wal.writes.Load()-writes0, wal.joined.Load()-joined0
	st, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	var page int64
	if err := s.db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&page); err != nil {
		t.Fatal(err)
	}
	frames := (st.Size() - 32) / (walHeader + page)
	t.Logf("%d frames in the WAL, %d written joined, %d pwrites to the WAL", frames, joined, writes)
	// Other tests' stores left open may write too: at least this store's frames were joined,
	// and its WAL took one pwrite a frame and one for the WAL's header.
	if frames < 10 || joined < frames {
		t.Errorf("%d frames in the WAL, %d of them written by one pwrite", frames, joined)
	}
	if writes-joined > 1 {
		t.Errorf("%d pwrites to the WAL besides the %d joined frames (the WAL's header: 1)", writes-joined, joined)
	}

	// What a crash would leave: the database and its WAL as they are, the store still open.
	crash := filepath.Join(t.TempDir(), "crash.db")
	for _, suffix := range []string{"", "-wal"} {
		copyFile(t, path+suffix, crash+suffix)
	}
	db, err := sql.Open("sqlite", "file:"+crash)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var check string
	var sessions, messages, ended int
	if err := db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity check: %q, %v", check, err)
	}
	if err := db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM messages),
		(SELECT count(*) FROM runs WHERE state = 'ended')`).Scan(&sessions, &messages, &ended); err != nil {
		t.Fatal(err)
	}
	if sessions != chats || messages != 2*chats || ended != chats {
		t.Fatalf("after the crash: %d sessions, %d messages, %d ended runs; want %d, %d, %d", sessions, messages, ended,
			chats, 2*chats, chats)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
