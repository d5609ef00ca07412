package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// memDB is a database in memory with transactions and one savepoint, enough to check what a
// Writer commits. Hooks let a test hold the writer inside a commit.
type memDB struct {
	mu        sync.Mutex
	committed map[string]int
	commits   int
	// savepoints counts the savepoints set (Savepoint and Next); rollbacks the transactions
	// rolled back.
	savepoints, rollbacks int
	// beforeCommit runs inside Commit, before the data is committed.
	beforeCommit func()
}

type memTx struct {
	data, save map[string]int
	late       bool // lateDB: a merged write left to the commit fails there
}

func (d *memDB) Begin(context.Context) (*memTx, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return &memTx{data: maps.Clone(d.committed)}, nil
}
func (d *memDB) Savepoint(_ context.Context, tx *memTx) error {
	d.mu.Lock()
	d.savepoints++
	d.mu.Unlock()
	tx.save = maps.Clone(tx.data)
	return nil
}
func (d *memDB) Release(context.Context, *memTx) error { return nil }
func (d *memDB) Next(ctx context.Context, tx *memTx) error {
	return d.Savepoint(ctx, tx)
}
func (d *memDB) RollbackTo(_ context.Context, tx *memTx) error {
	tx.data = maps.Clone(tx.save)
	return nil
}
func (d *memDB) Commit(_ context.Context, tx *memTx) error {
	if d.beforeCommit != nil {
		d.beforeCommit()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.committed = tx.data
	d.commits++
	return nil
}
func (d *memDB) Rollback(*memTx) {
	d.mu.Lock()
	d.rollbacks++
	d.mu.Unlock()
}

func (d *memDB) get(k string) (int, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	v, ok := d.committed[k]
	return v, ok
}

// insert is an operation that fails on a key already there, after writing another key (so that
// a failure must be rolled back).
func insert(key string) func(context.Context, *memTx) error {
	return func(_ context.Context, tx *memTx) error {
		tx.data["touched:"+key]++
		if _, ok := tx.data[key]; ok {
			return fmt.Errorf("%s: duplicate", key)
		}
		tx.data[key] = 1
		return nil
	}
}

const wait = time.Minute // generous: the machine is shared

// hold makes the writer's first batch wait in its operation until release is closed, so that
// the operations given meanwhile queue up and make the next batch together.
func hold(t *testing.T, w *Writer[*memTx]) (release chan struct{}, done chan error) {
	t.Helper()
	entered, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- w.Do(context.Background(), func(_ context.Context, tx *memTx) error {
			close(entered)
			<-release
			tx.data["held"] = 1
			return nil
		})
	}()
	select {
	case <-entered:
	case <-time.After(wait):
		t.Fatal("the first operation never ran")
	}
	return release, done
}

func TestConcurrentWritesShareOneCommitAndAFailureStaysItsOwn(t *testing.T) {
	db := &memDB{committed: map[string]int{"dup": 1}}
	var mu sync.Mutex
	var sizes []int
	w := New[*memTx](db, Options{Batched: func(n int, err error) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}})
	defer w.Close()
	release, heldDone := hold(t, w)

	const n = 50
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i)
			if i == 17 {
				key = "dup" // fails: already there
			}
			errs[i] = w.Do(context.Background(), insert(key))
		}()
	}
	// Every operation is queued behind the held batch before it goes on.
	deadline := time.Now().Add(wait)
	for len(w.queue) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d operations queued", len(w.queue), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if i == 17 {
			if err == nil || err.Error() != "dup: duplicate" {
				t.Errorf("the failing operation got %v, want its own error", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("operation %d failed beside a failing batch-mate: %v", i, err)
		}
		if v, ok := db.get(fmt.Sprintf("k%d", i)); !ok || v != 1 {
			t.Errorf("operation %d acknowledged but not committed", i)
		}
	}
	if v, _ := db.get("touched:dup"); v != 0 {
		t.Errorf("the failing operation's partial write was committed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != n {
		t.Errorf("batches of %v, want [1 %d]: the queued writes should share one transaction", sizes, n)
	}
	if db.commits != 2 {
		t.Errorf("%d commits, want 2", db.commits)
	}
}

func TestNothingIsAcknowledgedBeforeTheCommit(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	// Each commit waits a moment, so that callers would see their answer early if it came
	// before the commit.
	db.beforeCommit = func() { runtime.Gosched() }
	w := New[*memTx](db, Options{})
	defer w.Close()
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Do(context.Background(), insert(fmt.Sprintf("k%d", i))); err != nil {
				t.Error(err)
				return
			}
			if _, ok := db.get(fmt.Sprintf("k%d", i)); !ok {
				t.Errorf("k%d acknowledged before it was committed", i)
			}
		}()
	}
	wg.Wait()
}

func TestAFullQueueMakesProducersWaitWithinTheirBound(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{Queue: 1})
	defer w.Close()
	release, heldDone := hold(t, w)
	queued := make(chan error, 1)
	go func() { queued <- w.Do(context.Background(), insert("queued")) }()
	deadline := time.Now().Add(wait)
	for len(w.queue) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second operation never queued")
		}
		time.Sleep(time.Millisecond)
	}
	// The queue is full: this producer waits, and gives up at its own deadline without its
	// operation running.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	ran := false
	err := w.Do(ctx, func(context.Context, *memTx) error { ran = true; return nil })
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Do with a full queue: %v, want the deadline", err)
	}
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
	// One more write goes through the writer after the refused one: the refused one never ran.
	if err := w.Do(context.Background(), insert("after")); err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("an operation whose caller gave up ran")
	}
}

func TestAGivenUpOperationIsNotRun(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{})
	defer w.Close()
	release, heldDone := hold(t, w)
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- w.Do(ctx, insert("gave-up")) }()
	deadline := time.Now().Add(wait)
	for len(w.queue) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("never queued")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	close(release)
	<-heldDone
	if err := w.Do(context.Background(), insert("after")); err != nil {
		t.Fatal(err)
	}
	if _, ok := db.get("gave-up"); ok {
		t.Error("the operation of a caller told it failed was committed")
	}
}

func TestCloseAnswersQueuedOperations(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{})
	release, heldDone := hold(t, w)
	queued := make(chan error, 1)
	go func() { queued <- w.Do(context.Background(), insert("queued")) }()
	deadline := time.Now().Add(wait)
	for len(w.queue) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("never queued")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { w.Close(); close(closed) }()
	close(release)
	<-closed
	if err := <-heldDone; err != nil {
		t.Errorf("the batch under way at Close: %v", err)
	}
	if err := <-queued; !errors.Is(err, ErrClosed) && err != nil {
		t.Errorf("a queued operation at Close: %v", err)
	}
	if err := w.Do(context.Background(), insert("late")); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close: %v, want ErrClosed", err)
	}
}

func TestAPanickingOperationFailsItsBatchNotTheWriter(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{})
	defer w.Close()
	err := w.Do(context.Background(), func(context.Context, *memTx) error { panic("boom") })
	if err == nil {
		t.Fatal("a panicking operation succeeded")
	}
	if err := w.Do(context.Background(), insert("after")); err != nil {
		t.Fatalf("the writer after a panic: %v", err)
	}
}

// With Writers: 2, two transactions run at once: each operation below waits for the other to
// have begun, which only two writers allow.
func TestTwoWritersRunTwoBatchesAtOnce(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{Writers: 2})
	defer w.Close()
	a, b := make(chan struct{}), make(chan struct{})
	meet := func(mine, other chan struct{}) func(context.Context, *memTx) error {
		return func(context.Context, *memTx) error {
			close(mine)
			select {
			case <-other:
				return nil
			case <-time.After(wait):
				return errors.New("the other writer never ran")
			}
		}
	}
	errs := make(chan error, 2)
	go func() { errs <- w.Do(context.Background(), meet(a, b)) }()
	// The second write is sent once the first one runs, so that it cannot join the first's batch
	// (where it would run only after the first had given up waiting for it).
	select {
	case <-a:
	case <-time.After(wait):
		t.Fatal("the first write never ran")
	}
	go func() { errs <- w.Do(context.Background(), meet(b, a)) }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

var errDeadlock = errors.New("deadlock detected")

// flaky fails with errDeadlock the first fails times it runs, after writing (which the savepoint
// must undo), then inserts key.
func flaky(key string, fails int) (func(context.Context, *memTx) error, *atomic.Int32) {
	var runs atomic.Int32
	return func(ctx context.Context, tx *memTx) error {
		tx.data["partial:"+key]++
		if int(runs.Add(1)) <= fails {
			return errDeadlock
		}
		return insert(key)(ctx, tx)
	}, &runs
}

// An operation that failed with an error Options.Retry names runs again once its batch-mates are
// committed; its caller sees only the outcome of the last run. One that keeps failing gets the
// error after the retries.
func TestARetryableFailureRunsAgain(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{Retry: func(err error) bool { return errors.Is(err, errDeadlock) }})
	defer w.Close()
	release, heldDone := hold(t, w)
	once, onceRuns := flaky("once", 1)
	always, alwaysRuns := flaky("always", 100)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, fn := range []func(context.Context, *memTx) error{insert("plain"), once, always} {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = w.Do(context.Background(), fn) }()
	}
	deadline := time.Now().Add(wait)
	for w.Queued() < 3 {
		if time.Now().After(deadline) {
			t.Fatal("never queued")
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	<-heldDone
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("plain: %v, once: %v; want both stored", errs[0], errs[1])
	}
	if !errors.Is(errs[2], errDeadlock) {
		t.Fatalf("always: %v, want the deadlock after the retries", errs[2])
	}
	if n := onceRuns.Load(); n != 2 {
		t.Errorf("once ran %d times, want 2", n)
	}
	if n := alwaysRuns.Load(); n != 1+maxRetries {
		t.Errorf("always ran %d times, want %d", n, 1+maxRetries)
	}
	for key, want := range map[string]int{"plain": 1, "once": 1, "partial:once": 1, "partial:always": 0} {
		if got, _ := db.get(key); got != want {
			t.Errorf("%s = %d, want %d", key, got, want)
		}
	}
	// Alone in its batch (its failure is the transaction's): it runs again too.
	alone, aloneRuns := flaky("alone", 1)
	if err := w.Do(context.Background(), alone); err != nil || aloneRuns.Load() != 2 {
		t.Fatalf("alone: %v after %d runs", err, aloneRuns.Load())
	}
}

// An operation that failed with an error Options.Retry names runs again only once the batch
// under way on the other slot has ended: run again at once, a deadlock's victim can take a row
// back before the batch it deadlocked with has taken it, and deadlock with it again.
func TestARetryWaitsForTheOtherBatchesUnderWay(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{Writers: 2, Retry: func(err error) bool { return errors.Is(err, errDeadlock) }})
	defer w.Close()
	release, heldDone := hold(t, w)
	var early atomic.Bool // the retry ran before the held batch committed
	fn, runs := flaky("victim", 1)
	victim := func(ctx context.Context, tx *memTx) error {
		if _, held := db.get("held"); runs.Load() >= 1 && !held {
			early.Store(true)
		}
		return fn(ctx, tx)
	}
	done := make(chan error, 1)
	go func() { done <- w.Do(context.Background(), victim) }()
	deadline := time.Now().Add(wait)
	for runs.Load() < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second batch never ran")
		}
		time.Sleep(time.Millisecond)
	}
	// Run again at once, it would have run a second time well within this; it must not, as
	// long as the held batch has not ended.
	for end := time.Now().Add(200 * time.Millisecond); time.Now().Before(end) && runs.Load() < 2; {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the retried write: %v", err)
	}
	if early.Load() {
		t.Error("the write ran again while the batch on the other slot was still under way")
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the write ran %d times, want 2", n)
	}
	if got, _ := db.get("victim"); got != 1 {
		t.Errorf("victim = %d, want 1", got)
	}
}

// A batch runs its operations in the order of their keys (none first), each key's in the order
// they were given.
func TestABatchRunsItsOperationsInKeyOrder(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{})
	defer w.Close()
	release, heldDone := hold(t, w)
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	for i, key := range []string{"b", "a", "", "b"} {
		name := fmt.Sprintf("%s%d", key, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.DoKey(context.Background(), key, func(context.Context, *memTx) error {
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				return nil
			}); err != nil {
				t.Error(err)
			}
		}()
		// One at a time into the queue, so that their order there is known.
		for deadline := time.Now().Add(wait); w.Queued() < i+1; {
			if time.Now().After(deadline) {
				t.Fatal("never queued")
			}
			time.Sleep(time.Millisecond)
		}
	}
	close(release)
	wg.Wait()
	<-heldDone
	if got := fmt.Sprint(order); got != "[2 a1 b0 b3]" {
		t.Fatalf("ran in the order %s, want [2 a1 b0 b3]", got)
	}
}

// With Optimistic, a batch where nothing fails sets no savepoint; one where an operation fails
// runs again with savepoints, the failure rolled back alone and every other operation committed
// once.
func TestOptimisticBatchesSetSavepointsOnlyAfterAFailure(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failure=%v", fail), func(t *testing.T) {
			db := &memDB{committed: map[string]int{"dup": 1}}
			w := New[*memTx](db, Options{Optimistic: true})
			defer w.Close()
			release, heldDone := hold(t, w)
			const n = 20
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := fmt.Sprintf("k%d", i)
					if fail && i == 7 {
						key = "dup"
					}
					errs[i] = w.Do(context.Background(), insert(key))
				}()
			}
			deadline := time.Now().Add(wait)
			for len(w.queue) < n {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d operations queued", len(w.queue), n)
				}
				time.Sleep(time.Millisecond)
			}
			close(release)
			wg.Wait()
			if err := <-heldDone; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if fail && i == 7 {
					if err == nil || err.Error() != "dup: duplicate" {
						t.Errorf("the failing operation got %v, want its own error", err)
					}
					continue
				}
				if err != nil {
					t.Errorf("operation %d: %v", i, err)
				}
				key := fmt.Sprintf("k%d", i)
				if v, _ := db.get(key); v != 1 {
					t.Errorf("operation %d acknowledged but not committed", i)
				}
				if v, _ := db.get("touched:" + key); v != 1 {
					t.Errorf("operation %d committed %d times, want once", i, v)
				}
			}
			if v, _ := db.get("touched:dup"); v != 0 {
				t.Errorf("the failing operation's partial write was committed")
			}
			db.mu.Lock()
			defer db.mu.Unlock()
			switch {
			case !fail && (db.savepoints != 0 || db.rollbacks != 0):
				t.Errorf("%d savepoints and %d rollbacks for batches without a failure, want none", db.savepoints, db.rollbacks)
			case fail && (db.savepoints != n || db.rollbacks != 1):
				t.Errorf("%d savepoints and %d rollbacks, want %d (the batch again, one per operation) and 1", db.savepoints, db.rollbacks, n)
			}
		})
	}
}

func TestAFinishingLeaderHandsItsSlotToTheNextWaitingOperation(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{MaxBatch: 1}) // one operation a batch: a batch per waiting caller
	defer w.Close()
	release, heldDone := hold(t, w)
	queued := func(n int) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for len(w.queue) < n {
			if time.Now().After(deadline) {
				t.Fatal("never queued")
			}
			time.Sleep(time.Millisecond)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- w.Do(ctx, insert("gave-up")) }()
	queued(1)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	// Behind the given-up operation (still in the queue): one caller that can give up, one that
	// cannot (no Done channel), each waiting for its batch with no leader of its own.
	errs := make(chan error, 2)
	go func() { errs <- w.Do(context.WithoutCancel(ctx), insert("a")) }()
	queued(2)
	live, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { errs <- w.Do(live, insert("b")) }()
	queued(3)
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			t.Fatal("a waiting operation was never run: the slot was not passed on")
		}
	}
	for _, k := range []string{"a", "b"} {
		if _, ok := db.get(k); !ok {
			t.Errorf("%s was acknowledged but not committed", k)
		}
	}
	if _, ok := db.get("gave-up"); ok {
		t.Error("the operation of a caller told it failed was committed")
	}
	if w.Leading() || w.Queued() != 0 {
		t.Errorf("leading %v, %d queued after every operation was answered", w.Leading(), w.Queued())
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.commits != 3 {
		t.Errorf("%d commits, want 3 (the held one, a, b)", db.commits)
	}
}

// nopDB is a database whose transactions cost nothing: BenchmarkDo measures the writer alone.
type nopDB struct{}

func (nopDB) Begin(context.Context) (struct{}, error)    { return struct{}{}, nil }
func (nopDB) Savepoint(context.Context, struct{}) error  { return nil }
func (nopDB) Release(context.Context, struct{}) error    { return nil }
func (nopDB) Next(context.Context, struct{}) error       { return nil }
func (nopDB) RollbackTo(context.Context, struct{}) error { return nil }
func (nopDB) Commit(context.Context, struct{}) error     { runtime.Gosched(); return nil }
func (nopDB) Rollback(struct{})                          {}

// BenchmarkDo gives the writer operations from 1, 32 and 128 goroutines at once (each with a
// context that can end, as a request's), so that most of them wait for a batch led by another:
// ns/op and allocs/op are the writer's own cost of an operation, its wait included.
func BenchmarkDo(b *testing.B) {
	for _, callers := range []int{1, 32, 128} {
		b.Run(fmt.Sprint(callers), func(b *testing.B) {
			w := New[struct{}](nopDB{}, Options{Optimistic: true})
			defer w.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fn := func(context.Context, struct{}) error { return nil }
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ReportAllocs()
			b.ResetTimer()
			for range callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= int64(b.N) {
						if err := w.DoKey(ctx, "k", fn); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}

// mergeDB is memDB with a Merger: it records the parts of each Merge and inserts their keys as
// insert would, one after another.
type mergeDB struct {
	*memDB
	merges [][]any
}

func (d *mergeDB) Merge(ctx context.Context, tx *memTx, parts []any) error {
	d.mu.Lock()
	d.merges = append(d.merges, parts)
	d.mu.Unlock()
	for _, p := range parts {
		if err := insert(p.(string))(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

func TestABatchMergesThePartsOfOperationsWhoseKeyIsTheirOwn(t *testing.T) {
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("failure=%v", fail), func(t *testing.T) {
			db := &mergeDB{memDB: &memDB{committed: map[string]int{"dup": 1}}}
			w := New[*memTx](db, Options{Optimistic: true})
			defer w.Close()
			release, heldDone := hold(t, w)
			// Operations 0-9 have keys of their own, 10 and 11 share one, 12 gives no part.
			const n = 13
			keys := make([]string, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				keys[i] = fmt.Sprintf("k%02d", i)
				if fail && i == 7 {
					keys[i] = "dup"
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					switch {
					case i == 10 || i == 11:
						errs[i] = w.DoMerge(context.Background(), "shared", keys[i], insert(keys[i]))
					case i == 12:
						errs[i] = w.DoKey(context.Background(), keys[i], insert(keys[i]))
					default:
						errs[i] = w.DoMerge(context.Background(), keys[i], keys[i], insert(keys[i]))
					}
				}()
			}
			deadline := time.Now().Add(wait)
			for len(w.queue) < n {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d operations queued", len(w.queue), n)
				}
				time.Sleep(time.Millisecond)
			}
			close(release)
			wg.Wait()
			if err := <-heldDone; err != nil {
				t.Fatal(err)
			}
			for i, err := range errs {
				if fail && i == 7 {
					if err == nil || err.Error() != "dup: duplicate" {
						t.Errorf("the failing operation got %v, want its own error", err)
					}
					continue
				}
				if err != nil {
					t.Errorf("operation %d: %v", i, err)
				}
				if v, _ := db.get(keys[i]); v != 1 {
					t.Errorf("operation %d acknowledged but not committed", i)
				}
				if v, _ := db.get("touched:" + keys[i]); v != 1 {
					t.Errorf("operation %d committed %d times, want once", i, v)
				}
			}
			if v, _ := db.get("touched:dup"); v != 0 {
				t.Errorf("the failing operation's partial write was committed")
			}
			db.mu.Lock()
			defer db.mu.Unlock()
			if len(db.merges) != 1 {
				t.Fatalf("%d merges, want 1 (the batch's)", len(db.merges))
			}
			want := []any{"k00", "k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09"}
			if fail {
				want = []any{"dup", "k00", "k01", "k02", "k03", "k04", "k05", "k06", "k08", "k09"}
			}
			if fmt.Sprint(db.merges[0]) != fmt.Sprint(want) {
				t.Errorf("merged %v, want %v (in key order; not the shared key's, not the one without a part)", db.merges[0], want)
			}
			if fail && (db.savepoints != n || db.rollbacks != 1) {
				t.Errorf("%d savepoints and %d rollbacks, want %d (the batch again, each by its function) and 1", db.savepoints, db.rollbacks, n)
			}
		})
	}
}

// lateDB is mergeDB whose Merge leaves a part's failure to the commit, as a database that sends
// its last merged statement with COMMIT does: the part "dup" marks the transaction, whose Commit
// then commits nothing and returns ErrApart.
type lateDB struct{ *mergeDB }

func (d *lateDB) Merge(ctx context.Context, tx *memTx, parts []any) error {
	d.mu.Lock()
	d.merges = append(d.merges, parts)
	d.mu.Unlock()
	for _, p := range parts {
		if p == "dup" {
			tx.late = true
			continue
		}
		if err := insert(p.(string))(ctx, tx); err != nil {
			return err
		}
	}
	return nil
}

func (d *lateDB) Commit(ctx context.Context, tx *memTx) error {
	if tx.late {
		return fmt.Errorf("commit: the merged statement failed: %w", ErrApart)
	}
	return d.memDB.Commit(ctx, tx)
}

func TestACommitThatFailsAMergedWriteRunsTheBatchApart(t *testing.T) {
	db := &lateDB{&mergeDB{memDB: &memDB{committed: map[string]int{"dup": 1}}}}
	w := New[*memTx](db, Options{Optimistic: true})
	defer w.Close()
	release, heldDone := hold(t, w)
	const n = 6
	keys := []string{"k00", "k01", "dup", "k03", "k04", "k05"}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = w.DoMerge(context.Background(), keys[i], keys[i], insert(keys[i]))
		}()
	}
	deadline := time.Now().Add(wait)
	for len(w.queue) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d operations queued", len(w.queue), n)
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if keys[i] == "dup" {
			if err == nil || err.Error() != "dup: duplicate" {
				t.Errorf("the failing operation got %v, want its own error", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("operation %d: %v (a batch-mate's failure at the commit is not its own)", i, err)
		}
		if v, _ := db.get("touched:" + keys[i]); v != 1 {
			t.Errorf("operation %d committed %d times, want once", i, v)
		}
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(db.merges) != 1 || db.savepoints != n || db.rollbacks != 1 {
		t.Errorf("%d merges, %d savepoints, %d rollbacks; want 1, %d (the batch again, each by its function) and 1",
			len(db.merges), db.savepoints, db.rollbacks, n)
	}
	if db.commits != 2 { // the held batch's and the batch run apart
		t.Errorf("%d commits, want 2", db.commits)
	}
}

// Then runs its function once the batch that gave it has answered its callers, holding the
// writer: an operation given meanwhile waits for it, then commits.
func TestThenRunsAfterTheBatchHoldingTheWriter(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	w := New[*memTx](db, Options{})
	defer w.Close()
	inside, release, after := make(chan struct{}), make(chan struct{}), make(chan struct{})
	err := w.DoKey(context.Background(), "a", func(ctx context.Context, tx *memTx) error {
		w.Then(func() { close(inside); <-release; close(after) })
		return insert("a")(ctx, tx)
	})
	if err != nil {
		t.Fatal(err)
	}
	// The caller has its answer while Then's function runs.
	select {
	case <-inside:
	case <-time.After(wait):
		t.Fatal("Then's function did not run after the batch")
	}
	done := make(chan error, 1)
	go func() { done <- w.DoKey(context.Background(), "b", insert("b")) }()
	deadline := time.Now().Add(wait)
	for w.Queued() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	select {
	case err := <-done:
		t.Fatalf("a write was answered (%v) while Then's function held the writer", err)
	default:
	}
	if _, ok := db.get("b"); ok {
		t.Fatal("a write committed while Then's function held the writer")
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("the write waiting for Then's function never ran")
	}
	<-after
	if v, _ := db.get("b"); v != 1 {
		t.Fatal("the write was answered but not committed")
	}
}

// With MergeAlone, an operation alone in its batch while another batch runs goes through Merge;
// if Merge or the commit (ErrApart) fails, it runs again by its function and gets its own error.
// Alone on a quiet writer, or without the option, a lone operation runs by its function.
func TestALoneOperationMergesWithMergeAlone(t *testing.T) {
	ctx := context.Background()
	for _, late := range []bool{false, true} {
		t.Run(fmt.Sprintf("late=%v", late), func(t *testing.T) {
			md := &mergeDB{memDB: &memDB{committed: map[string]int{"dup": 1}}}
			var db Tx[*memTx] = md
			if late {
				db = &lateDB{md}
			}
			w := New[*memTx](db, Options{Optimistic: true, MergeAlone: true, Writers: 2})
			defer w.Close()
			release, heldDone := hold(t, w) // a batch under way in one slot
			if err := w.DoMerge(ctx, "k", "k", insert("k")); err != nil {
				t.Fatal(err)
			}
			if err := w.DoMerge(ctx, "dup", "dup", insert("dup")); err == nil || err.Error() != "dup: duplicate" {
				t.Errorf("the failing operation got %v, want its own error", err)
			}
			// Checked before the held batch commits (memDB's commit replaces what is stored).
			if v, _ := md.get("touched:k"); v != 1 {
				t.Errorf("k committed %d times, want once", v)
			}
			if v, _ := md.get("touched:dup"); v != 0 {
				t.Errorf("the failing operation's partial write was committed")
			}
			close(release)
			if err := <-heldDone; err != nil {
				t.Fatal(err)
			}
			if err := w.DoMerge(ctx, "quiet", "quiet", insert("quiet")); err != nil { // no other batch now
				t.Fatal(err)
			}
			md.mu.Lock()
			defer md.mu.Unlock()
			if fmt.Sprint(md.merges) != "[[k] [dup]]" {
				t.Errorf("merged %v, want [[k] [dup]] (each alone, beside the held batch; not the one on a quiet writer)", md.merges)
			}
			if md.committed["quiet"] != 1 {
				t.Errorf("quiet not committed: %v", md.committed)
			}
			if md.commits != 3 || md.rollbacks != 2 || md.savepoints != 0 {
				t.Errorf("%d commits, %d rollbacks, %d savepoints; want 3, 2 (dup's merge, then its function's failure) and 0",
					md.commits, md.rollbacks, md.savepoints)
			}
		})
	}
	md := &mergeDB{memDB: &memDB{committed: map[string]int{}}}
	w := New[*memTx](md, Options{Optimistic: true, Writers: 2})
	defer w.Close()
	release, heldDone := hold(t, w)
	if err := w.DoMerge(ctx, "k", "k", insert("k")); err != nil {
		t.Fatal(err)
	}
	v, _ := md.get("k")
	close(release)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	md.mu.Lock()
	defer md.mu.Unlock()
	if len(md.merges) != 0 || v != 1 {
		t.Errorf("without MergeAlone: merges %v, k committed %d times; want none, and k once by its function", md.merges, v)
	}
}

// A caller that finds room in the queue queues its operation before it looks for a free slot:
// it then leads one batch holding its own operation and those already waiting. (It used to
// choose at random between queueing and leading when both could go: half the time it led a
// batch of the others' operations, then queued its own for a second transaction.)
func TestACallerWithRoomInTheQueueLeadsOneBatchWithItsOwnOperation(t *testing.T) {
	for i := range 20 {
		db := &memDB{committed: map[string]int{}}
		var mu sync.Mutex
		var sizes []int
		w := New[*memTx](db, Options{Batched: func(n int, _ error) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }})
		// An operation already waiting, as one whose caller was handed no slot yet.
		waiting := &op[*memTx]{key: "", fn: insert(fmt.Sprint("waiting", i)), err: make(chan error, 1)}
		w.queue <- waiting
		if err := w.Do(context.Background(), insert(fmt.Sprint("mine", i))); err != nil {
			t.Fatal(err)
		}
		if err := <-waiting.err; err != nil {
			t.Fatal(err)
		}
		w.Close()
		mu.Lock()
		if len(sizes) != 1 || sizes[0] != 2 {
			t.Fatalf("run %d: batches of %v, want one batch of the waiting operation and the caller's", i, sizes)
		}
		mu.Unlock()
	}
}

// With Crowd, a write that comes while a batch is under way waits for it instead of leading a
// batch of its own in the other slot, until Crowd writes wait: those then go in one batch beside
// the one under way.
func TestACrowdStartsASecondBatchOnlyWhenEnoughWait(t *testing.T) {
	db := &memDB{committed: map[string]int{}}
	var mu sync.Mutex
	var sizes []int
	w := New[*memTx](db, Options{Writers: 2, Crowd: 3, Batched: func(n int, _ error) { mu.Lock(); sizes = append(sizes, n); mu.Unlock() }})
	defer w.Close()
	release, heldDone := hold(t, w)
	released := false
	defer func() { // a failure must not leave Close waiting for the held batch
		if !released {
			close(release)
		}
	}()
	ran := make(chan string, 3)
	mark := func(key string) func(context.Context, *memTx) error {
		return func(ctx context.Context, tx *memTx) error {
			ran <- key
			return insert(key)(ctx, tx)
		}
	}
	queued := func(n int) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for w.Queued() < n {
			select {
			case k := <-ran:
				t.Fatalf("%s ran beside the held batch with fewer than 3 writes waiting", k)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("never queued")
			}
			time.Sleep(time.Millisecond)
		}
	}
	errs := make(chan error, 3)
	go func() { errs <- w.Do(context.Background(), mark("a")) }()
	queued(1)
	go func() { errs <- w.Do(context.Background(), mark("b")) }()
	queued(2)
	go func() { errs <- w.Do(context.Background(), mark("c")) }() // the third: a batch of a, b, c
	for range 3 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			t.Fatal("the waiting writes did not run beside the held batch once three waited")
		}
	}
	close(release)
	released = true
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 3 || sizes[1] != 1 {
		t.Errorf("batches of %v, want one of the three waiting writes, then the held one", sizes)
	}
}
