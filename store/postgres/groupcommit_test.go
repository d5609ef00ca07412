package postgres

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// Writes that wait together share one transaction: while the writer is held in a batch, 64
// chats' writes queue; they then commit as one batch, each one durable and numbered.
func TestConcurrentWritesShareOneCommit(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	url := pgtest.Schema(t)
	s, err := Open(context.Background(), url, func(o *options) {
		o.batched = func(n int, err error) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }
		o.writers = 1 // the one writer is held below
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
		held <- s.w.Do(context.Background(), func(context.Context, pgx.Tx) error { close(entered); <-release; return nil })
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
	// What was acknowledged is committed: another connection sees it.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var count int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM messages`).Scan(&count); err != nil || count != n {
		t.Fatalf("%d messages committed, %v; want %d", count, err, n)
	}
}

// Two batches written at once that lock two sessions' rows in opposite orders deadlock;
// PostgreSQL fails one of their statements, and that write runs again once its batch-mates are
// committed: every write succeeds.
func TestDeadlockedWritesRunAgain(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ids [2]string
	for i := range ids {
		sess := &parley.Session{ID: parley.NewID(), Owner: "a", CreatedAt: now, UpdatedAt: now}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		ids[i] = sess.ID
	}
	// Each write locks one session's row, meets the other write at a barrier, then locks the
	// other session's row: a deadlock on the first run, none when run again alone.
	var barrier sync.WaitGroup
	barrier.Add(2)
	var met [2]bool
	write := func(i int) func(context.Context, pgx.Tx) error {
		return func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `UPDATE sessions SET title = 'x' WHERE id = $1`, ids[i]); err != nil {
				return err
			}
			if !met[i] {
				met[i] = true
				barrier.Done()
				barrier.Wait()
			}
			_, err := tx.Exec(ctx, `UPDATE sessions SET title = 'y' WHERE id = $1`, ids[1-i])
			return err
		}
	}
	// The second write is given once the first runs, so that it leads a batch of its own on the
	// writer's other connection.
	errs := make(chan error, 2)
	go func() { errs <- s.w.Do(ctx, write(0)) }()
	for deadline := time.Now().Add(time.Minute); !s.w.Leading(); {
		if time.Now().After(deadline) {
			t.Fatal("the first write never ran")
		}
		time.Sleep(time.Millisecond)
	}
	go func() { errs <- s.w.Do(ctx, write(1)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("a deadlocked write failed: %v", err)
		}
	}
}

// A write that hides the failure of its statement leaves the shared transaction aborted: the
// pipelined transaction must then fail its whole batch, not commit it nor tell a batch-mate its
// write is stored. Written alone, the same write fails at the commit.
func TestAWriteThatHidesAFailureFailsItsBatch(t *testing.T) {
	s, err := Open(context.Background(), pgtest.Schema(t), func(o *options) { o.writers = 1 })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	hides := func(ctx context.Context, tx pgx.Tx) error {
		_, _ = tx.Exec(ctx, `INSERT INTO no_such_table VALUES ($1)`, 1) // the error is dropped
		return nil
	}
	if err := s.w.Do(ctx, hides); err == nil {
		t.Error("a lone write that left its transaction aborted was acknowledged")
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	entered, release, held := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		held <- s.w.Do(ctx, func(context.Context, pgx.Tx) error { close(entered); <-release; return nil })
	}()
	<-entered
	errs := make(chan error, 2)
	sess := &parley.Session{ID: parley.NewID(), Owner: "a", CreatedAt: now, UpdatedAt: now}
	go func() { errs <- s.w.DoKey(ctx, "a", hides) }()
	go func() {
		errs <- s.w.DoKey(ctx, "b", func(ctx context.Context, tx pgx.Tx) error { return createSession(ctx, tx, sess) })
	}()
	for deadline := time.Now().Add(time.Minute); s.w.Queued() < 2; {
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of 2 writes queued", s.w.Queued())
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	var acknowledged int
	for range 2 {
		if <-errs == nil {
			acknowledged++
		}
	}
	_, err = s.GetSession(ctx, sess.ID)
	stored := err == nil
	if acknowledged > 0 && !stored {
		t.Errorf("%d writes acknowledged, but the session is not stored", acknowledged)
	}
	if acknowledged == 2 {
		t.Error("the write that hid its failure was acknowledged beside its batch-mate")
	}
}

// A write that runs a statement on the transaction's connection itself (Tx.Conn) runs it inside
// the transaction: the BEGIN waiting to go with the first statement is sent before, and the
// write's failure rolls the statement back.
func TestAStatementOnTheConnectionIsInTheTransaction(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	id := parley.NewID()
	err := s.w.Do(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Conn().Exec(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at) VALUES ($1, '', 'a', now(), now())`, id); err != nil {
			return err
		}
		return errors.New("the write fails after its statement")
	})
	if err == nil {
		t.Fatal("the failing write was acknowledged")
	}
	if _, err := s.GetSession(ctx, id); !errors.Is(err, parley.ErrNotFound) {
		t.Errorf("the failed write's statement was kept (GetSession: %v)", err)
	}
}
