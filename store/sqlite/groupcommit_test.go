package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// Writes that wait together share one transaction: while the writer is held in a batch, 64
// chats' writes queue; they then commit as one batch, each one durable and numbered.
func TestConcurrentWritesShareOneCommit(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	path := filepath.Join(t.TempDir(), "parley.db")
	s, err := Open(context.Background(), path, func(o *options) {
		o.batched = func(n int, err error) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 64
	now := time.Now().UTC().Truncate(time.Microsecond)
	sessions := make([]*parley.Session, n)
	for i := range sessions {
		sessions[i] = &parley.Session{ID: parley.NewID(), Owner: "a", CreatedAt: now, UpdatedAt: now}
		if err := s.CreateSession(context.Background(), sessions[i]); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	sizes = nil
	mu.Unlock()
	entered, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.w.Do(context.Background(), func(context.Context, *sql.Tx) error { close(entered); <-release; return nil })
	}()
	<-entered
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // a failed test must not leave the writer held
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.AppendMessages(context.Background(), sessions[i].ID, &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), CreatedAt: now})
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for s.w.Queued() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d writes queued", s.w.Queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
	releaseOnce.Do(func() { close(release) })
	wg.Wait()
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[1] != n {
		t.Fatalf("batches %v, want [1 %d]: the waiting writes should share one commit", sizes, n)
	}
	// What was acknowledged is in the file, read through a connection of its own.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var count int
	if err := db.QueryRow(`SELECT count(*) FROM messages`).Scan(&count); err != nil || count != n {
		t.Fatalf("%d messages in the file, %v; want %d", count, err, n)
	}
}
