// Package groupcommit batches the write operations of many callers into one transaction, so
// that they share one commit and one fsync. A caller that finds no transaction under way leads
// one: it takes the operations waiting in the bounded queue (its own among them), runs each inside
// a savepoint of one transaction (an operation that fails is rolled back alone and its error goes
// to its caller; its batch-mates go on), commits, and only then answers each caller. Nothing is
// acknowledged before the commit returned: a caller told "stored" can rely on it after a crash.
//
// When the queue is full, callers wait for room, bounded by their context: the store slows its
// writers down instead of dropping their writes.
package groupcommit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tx is what a Writer needs of one database: a transaction with savepoints. The savepoint
// methods work on one savepoint name the writer reuses for every operation of a batch.
type Tx[T any] interface {
	// Begin starts a write transaction.
	Begin(ctx context.Context) (T, error)
	// Savepoint sets the savepoint before an operation.
	Savepoint(ctx context.Context, tx T) error
	// Release keeps what the operation since the savepoint did.
	Release(ctx context.Context, tx T) error
	// Next is Release then Savepoint, between two operations (one round trip where the
	// database allows it).
	Next(ctx context.Context, tx T) error
	// RollbackTo undoes what the operation since the savepoint did; the transaction goes on.
	RollbackTo(ctx context.Context, tx T) error
	// Commit makes the transaction durable; Rollback drops it (after a failed commit as well).
	Commit(ctx context.Context, tx T) error
	Rollback(tx T)
}

// Merger is what a database may also offer a Writer whose Options.Optimistic is set: a batch's
// operations given with a part (DoMerge) run together, as few statements for the lot as their
// kinds allow, instead of each on its own. A batch merges the parts of those of its operations
// whose key no other operation of the batch has (so that one key's operations keep their order),
// when there are two or more, and runs them before the others' functions.
type Merger[T any] interface {
	// Merge does in tx what the functions of the parts' operations would do one after another.
	// If it fails, the transaction is rolled back and the batch runs again with a savepoint
	// around each operation, each by its function alone: Merge need not say which part failed,
	// only that one did, and each operation's own error then comes from its function.
	Merge(ctx context.Context, tx T, parts []any) error
}

// ErrApart is what a database's Commit may return (wrapped) in a transaction that ran Merge,
// when the transaction was not committed because a merged statement that Merge left to go with
// the commit (to save the database a round trip) failed: as when Merge itself fails, the batch
// runs again with a savepoint around each operation, each by its function alone. It must not be
// returned for a commit that may have taken effect.
var ErrApart = errors.New("groupcommit: a merged write failed with the commit")

// Options bound a Writer.
type Options struct {
	// Queue is how many operations may wait to be taken (default 1024); a caller beyond it waits.
	Queue int
	// MaxBatch is how many operations one transaction takes at most (default 256).
	MaxBatch int
	// BatchTimeout bounds one transaction, from its start to its commit (default 30s).
	BatchTimeout time.Duration
	// Writers is how many transactions may run at once, each with a batch of its own (default
	// 1: SQLite has one writer; PostgreSQL can commit several at once).
	Writers int
	// Batched, if set, is told the size of each batch once it is done, just before its
	// operations are answered (metrics, tests).
	Batched func(n int, err error)
	// Retry, if set, tells an error that another transaction may not meet (PostgreSQL: a
	// deadlock with a batch on another connection). An operation that failed with one runs again
	// in a transaction of its own kind once its batch-mates are committed and the batches under
	// way on the other slots have ended, twice at most; a batch whose commit failed with one runs
	// again whole, after the same wait. Its operations must then be safe to run
	// again: each sets its results, it does not add to them.
	Retry func(err error) bool
	// Optimistic runs a batch of several operations without savepoints first: where a savepoint
	// costs the database work of its own (PostgreSQL: a statement, and a subtransaction for
	// each operation that writes), a batch that fails nowhere is then just its operations and
	// a commit. If one operation fails, that transaction is rolled back and the batch runs again
	// with a savepoint around each operation, as without this option. Operations must then be
	// safe to run again (as for Retry).
	Optimistic bool
	// MergeAlone, with Optimistic and a database that is a Merger, runs an operation given with
	// a part (DoMerge) through Merge even when it is alone in its batch, if another batch is
	// under way (Writers > 1), where the database's merged statements cost it fewer round trips
	// than its function (PostgreSQL: they go with the COMMIT) but more work for the one row: under
	// load, when half the batches are a lone write that came while the other slot's batch ran,
	// round trips are what a write waits for; a write alone on a quiet writer runs by its function.
	// If Merge or the commit fails (ErrApart), the transaction is rolled back and the operation
	// runs again by its function, whose error is its own. Without it a batch merges two or more
	// parts, and a lone operation runs by its function.
	MergeAlone bool
	// Crowd, with Writers > 1, is how many operations must be waiting (the caller's own among
	// them) for a caller to lead a batch in a free slot while another batch is under way; with
	// fewer, it waits for that batch to hand it its slot, and leads the next batch with the
	// operations that queued meanwhile. Under a moderate load the writes then share fewer, larger
	// transactions (each commit, statement and round trip costs the database the same whatever
	// the batch's size), and the other slots still serve a load that fills the queue faster than
	// one transaction at a time empties it. A caller that finds no batch under way always leads.
	// 0 or 1: any free slot is taken.
	Crowd int
}

// maxRetries bounds how often an operation runs again (Options.Retry).
const maxRetries = 2

// ErrClosed is returned for an operation given to a Writer that was closed.
var ErrClosed = errors.New("groupcommit: the store is closed")

// Writer is one database's group-commit writer. It has no goroutine of its own: a caller that
// finds no batch under way (a free writer slot) leads, and runs the waiting operations, its own
// among them, in one transaction; the others wait for their answer. A lone caller thus runs its
// write on its own goroutine, and under load each commit carries every write that queued during
// the last one. A leader done with its batch hands its slot to the first operation still waiting,
// whose caller leads the next batch: a waiting caller waits on its own operation's channel and
// its context alone, and is woken once, for its answer or for its turn to lead.
type Writer[T any] struct {
	db    Tx[T]
	opts  Options
	queue chan *op[T]
	slots chan struct{} // one token per transaction that may run at once (Options.Writers)
	stop  chan struct{}
	shut  atomic.Bool
	once  sync.Once
	then  atomic.Pointer[func()] // Then's function, for the end of the batch under way

	// With Options.Retry: the batches under way, so that one about to run again after a
	// transient failure waits for the others first (running).
	mu      sync.Mutex
	running map[*batchRun]struct{}
}

// batchRun is a batch under way, as the others see it (Options.Retry).
type batchRun struct {
	ended    chan struct{} // closed once its transaction is over and its callers answered
	retrying bool          // it waits for the others to run again: none waits for it (mu)
}

type op[T any] struct {
	key   string // DoKey: the batch runs its operations in the order of their keys
	fn    func(ctx context.Context, tx T) error
	part  any          // DoMerge: what Merger.Merge is given for the operation
	state atomic.Int32 // opWaiting, opTaken or opGivenUp
	err   chan error   // buffered: a leader never blocks on an answer
}

const (
	opWaiting int32 = iota
	opTaken
	opGivenUp
)

// New returns the writer of db.
func New[T any](db Tx[T], opts Options) *Writer[T] {
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.BatchTimeout <= 0 {
		opts.BatchTimeout = 30 * time.Second
	}
	if opts.Writers <= 0 {
		opts.Writers = 1
	}
	return &Writer[T]{db: db, opts: opts, queue: make(chan *op[T], opts.Queue), slots: make(chan struct{}, opts.Writers),
		stop: make(chan struct{})}
}

// Do runs fn inside a transaction shared with the other operations waiting at the same moment and
// returns once that transaction is durable (nil) or fn's own error, or the commit's. fn gets the
// batch's context, not ctx: ctx bounds the wait for room in the queue and for a batch to take fn;
// once fn was taken, Do waits for its answer (bounded by Options.BatchTimeout), so that a caller is
// never told "failed" about a write that then commits. fn runs once at most unless Options.Retry
// says otherwise; it must not call Do (the writer would wait on itself).
func (w *Writer[T]) Do(ctx context.Context, fn func(ctx context.Context, tx T) error) error {
	return w.DoKey(ctx, "", fn)
}

// DoKey is Do for an operation that locks the rows of key (a session) alone. A batch runs its
// operations in the order of their keys (those without one first, each key's in the order they
// came): batches written at once on several connections then take their locks in one order, and
// do not deadlock over them. Operations given at the same moment have no order of their own.
func (w *Writer[T]) DoKey(ctx context.Context, key string, fn func(ctx context.Context, tx T) error) error {
	return w.do(ctx, &op[T]{key: key, fn: fn})
}

// DoMerge is DoKey for an operation that the database's Merger can run together with others of
// the batch: part is what Merge is given for it. The operation runs as part or as fn, whichever
// its batch chooses (fn alone, in a batch of its own, after a failure, or without a Merger):
// both must do the same, and set the same results.
func (w *Writer[T]) DoMerge(ctx context.Context, key string, part any, fn func(ctx context.Context, tx T) error) error {
	return w.do(ctx, &op[T]{key: key, fn: fn, part: part})
}

func (w *Writer[T]) do(ctx context.Context, o *op[T]) error {
	if w.shut.Load() {
		return ErrClosed
	}
	o.err = make(chan error, 1)
	// Into the queue if it has room; only a full queue makes the caller wait for room, or lead
	// a batch of what is queued if no batch runs. (A select of both cases at once would pick
	// either when both are ready: half the callers that find a slot free would lead a batch of
	// the others' writes, then queue their own for another.)
	queued := false
	select {
	case w.queue <- o:
		queued = true
	default:
	}
	for !queued {
		select {
		case w.queue <- o:
			queued = true
		case w.slots <- struct{}{}: // the queue is full and no batch runs (its callers gave up)
			w.lead(nil)
		case <-ctx.Done():
			return ctx.Err()
		case <-w.stop:
			return ErrClosed
		}
	}
	if w.shut.Load() { // Close may have emptied the queue before o came into it
		if o.state.CompareAndSwap(opWaiting, opGivenUp) {
			return ErrClosed
		}
		return w.answer(o, <-o.err)
	}
	if w.opts.Crowd <= 1 || len(w.slots) == 0 || len(w.queue) >= w.opts.Crowd {
		select {
		case w.slots <- struct{}{}: // no batch runs in this slot: lead one
			w.lead(nil)
		default: // a leader is under way; it hands its slot on to a waiting operation when done
		}
	}
	// Otherwise a batch is under way (Crowd): o was queued before the check, so its leader,
	// passing its slot on, finds o (or an operation queued before it) and hands it the slot.
	// The wait selects on o's own channel and ctx alone: no channel shared with the other
	// waiters, whose lock every waiter's select would take twice.
	done := ctx.Done()
	if done == nil {
		return w.answer(o, <-o.err)
	}
	select {
	case err := <-o.err:
		return w.answer(o, err)
	case <-done:
		if o.state.CompareAndSwap(opWaiting, opGivenUp) {
			return ctx.Err()
		}
		return w.answer(o, <-o.err) // taken: its leader answers it (or hands it the slot)
	}
}

// errLead is what a finishing leader sends an operation it took from the queue, instead of its
// answer: the slot is now that operation's caller's, and its batch starts with the operation.
var errLead = errors.New("groupcommit: lead")

// answer returns err, o's answer, unless it is errLead: the caller then leads the batch that
// starts with o, and returns o's answer from it.
func (w *Writer[T]) answer(o *op[T], err error) error {
	if err != errLead {
		return err
	}
	w.lead(o)
	return <-o.err
}

// lead runs batches of the operations waiting in the queue while holding a slot (first among
// them, if not nil, already taken), then passes the slot on: to the first operation still waiting
// in the queue, whose caller leads the next batch, or back to the slots if the queue is empty.
func (w *Writer[T]) lead(first *op[T]) {
	batch := make([]*op[T], 0, min(w.opts.MaxBatch, len(w.queue)+1))
	if first != nil {
		batch = append(batch, first)
	}
	for len(batch) < w.opts.MaxBatch {
		select {
		case o := <-w.queue:
			if o.state.CompareAndSwap(opWaiting, opTaken) { // else its caller gave up: left out
				batch = append(batch, o)
			}
			continue
		default:
		}
		break
	}
	if len(batch) > 0 {
		w.run(batch)
	}
	if f := w.then.Swap(nil); f != nil { // Then: f holds the slot, then passes it on
		go func() {
			defer w.pass()
			(*f)()
		}()
		return
	}
	w.pass()
}

// pass hands the slot its caller holds to an operation still waiting, so that its caller leads
// the next batch, or back to the slots if none waits.
func (w *Writer[T]) pass() {
	for {
		select {
		case o := <-w.queue:
			if o.state.CompareAndSwap(opWaiting, opTaken) {
				o.err <- errLead
				return
			}
			continue // given up: left out
		default:
		}
		<-w.slots
		// An operation queued before the slot came free, whose caller then found every slot
		// taken, would wait for no leader: look again, and lead it if no one else does.
		if len(w.queue) == 0 {
			return
		}
		select {
		case w.slots <- struct{}{}:
		default:
			return // another caller took the slot: it leads
		}
	}
}

// Then has f run holding the writer's slot once the batch under way has answered its callers,
// before any operation waiting for the writer: on a goroutine of its own (the batch's callers go
// on with their answers), which then lets the waiting operations go on (with Options.Writers 1,
// no transaction of the writer runs beside f). It is for a database's housekeeping that must not
// run beside its writes nor inside one (SQLite's checkpoint), and is called from within a batch
// (Tx.Commit, an operation's function). A second f given in the same batch replaces the first.
// Close waits for f (it holds a slot).
func (w *Writer[T]) Then(f func()) { w.then.Store(&f) }

// Leading reports whether a batch is under way.
func (w *Writer[T]) Leading() bool { return len(w.slots) > 0 }

// Queued returns how many operations wait to be taken.
func (w *Writer[T]) Queued() int { return len(w.queue) }

// Close waits for the batches under way, then answers the operations still queued with
// ErrClosed; Do returns ErrClosed from then on.
func (w *Writer[T]) Close() {
	w.once.Do(func() {
		w.shut.Store(true)
		close(w.stop)
		for range w.opts.Writers { // every slot taken: no batch runs, none will start
			w.slots <- struct{}{}
		}
		for {
			select {
			case o := <-w.queue:
				if o.state.CompareAndSwap(opWaiting, opTaken) {
					o.err <- ErrClosed
				}
			default:
				return
			}
		}
	})
}

// run runs one batch of taken operations in one transaction and answers them.
func (w *Writer[T]) run(live []*op[T]) {
	slices.SortStableFunc(live, func(a, b *op[T]) int { return strings.Compare(a.key, b.key) })
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.BatchTimeout)
	defer cancel()
	var self *batchRun
	if w.opts.Retry != nil {
		self = w.started()
		defer w.ended(self)
	}
	errs := make([]error, len(live))
	err := w.transact(ctx, live, errs)
	for attempt := 0; w.opts.Retry != nil && attempt < maxRetries; attempt++ {
		if err != nil { // nothing of the batch was committed
			if !w.opts.Retry(err) {
				break
			}
			w.awaitOthers(ctx, self)
			clear(errs)
			err = w.transact(ctx, live, errs)
			continue
		}
		var again []*op[T]
		var at []int
		for i, e := range errs {
			if e != nil && w.opts.Retry(e) {
				again, at = append(again, live[i]), append(at, i)
			}
		}
		if len(again) == 0 {
			break
		}
		w.awaitOthers(ctx, self)
		sub := make([]error, len(again))
		if e := w.transact(ctx, again, sub); e != nil {
			for _, i := range at {
				errs[i] = e
			}
			continue
		}
		for j, i := range at {
			errs[i] = sub[j]
		}
	}
	if w.opts.Batched != nil {
		// Before the answers: a caller told its write is done finds its transaction counted.
		w.opts.Batched(len(live), err)
	}
	for i, o := range live {
		if err != nil {
			o.err <- err
		} else {
			o.err <- errs[i]
		}
	}
}

// started registers a batch under way (Options.Retry).
func (w *Writer[T]) started() *batchRun {
	b := &batchRun{ended: make(chan struct{})}
	w.mu.Lock()
	if w.running == nil {
		w.running = make(map[*batchRun]struct{})
	}
	w.running[b] = struct{}{}
	w.mu.Unlock()
	return b
}

// ended removes a batch that is over and tells those waiting for it.
func (w *Writer[T]) ended(b *batchRun) {
	w.mu.Lock()
	delete(w.running, b)
	w.mu.Unlock()
	close(b.ended)
}

// awaitOthers waits, bounded by ctx, until every other batch under way has ended, before self
// runs again after a transient failure. A deadlock's victim that ran again at once could take
// a row back before the batch it deadlocked with, woken by its rollback, had taken it, and
// deadlock with it again (a loaded database schedules that backend late); once that batch has
// committed, the run again meets none of its locks. A batch that waits this way is waited for by
// none (two victims of different deadlocks would otherwise wait for each other): the first to
// wait goes on once the other's batch has ended.
func (w *Writer[T]) awaitOthers(ctx context.Context, self *batchRun) {
	w.mu.Lock()
	self.retrying = true
	var others []chan struct{}
	for b := range w.running {
		if b != self && !b.retrying {
			others = append(others, b.ended)
		}
	}
	w.mu.Unlock()
	for _, ended := range others {
		select {
		case <-ended:
		case <-ctx.Done(): // the run again fails on ctx too, with its own error
			return
		}
	}
}

// transact runs ops in one transaction, each one's own error in errs; it returns the error that
// failed the whole transaction (begin, a savepoint, commit).
func (w *Writer[T]) transact(ctx context.Context, ops []*op[T], errs []error) (err error) {
	if w.opts.Optimistic && (len(ops) > 1 || w.opts.MergeAlone && ops[0].part != nil && len(w.slots) > 1) {
		if done, err := w.optimistic(ctx, ops); done {
			return err
		}
	}
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if p := recover(); p != nil {
			w.db.Rollback(tx)
			err = fmt.Errorf("groupcommit: a write panicked: %v", p)
		}
	}()
	if len(ops) == 1 { // alone: its failure is the transaction's, no savepoint needed
		if errs[0] = ops[0].fn(ctx, tx); errs[0] != nil {
			w.db.Rollback(tx)
			return errs[0]
		}
	} else {
		for i, o := range ops {
			step := w.db.Next
			if i == 0 {
				step = w.db.Savepoint
			}
			if err := step(ctx, tx); err != nil {
				w.db.Rollback(tx)
				return err
			}
			if errs[i] = o.fn(ctx, tx); errs[i] != nil {
				if err := w.db.RollbackTo(ctx, tx); err != nil {
					w.db.Rollback(tx)
					return fmt.Errorf("%w (and the batch it was in could not go on: %v)", errs[i], err)
				}
			}
		}
		if err := w.db.Release(ctx, tx); err != nil {
			w.db.Rollback(tx)
			return err
		}
	}
	if err := w.db.Commit(ctx, tx); err != nil {
		w.db.Rollback(tx)
		return err
	}
	return nil
}

// optimistic runs ops in one transaction without savepoints (Options.Optimistic). It reports
// done = false, having rolled back, if an operation failed: the caller runs them again, each in a
// savepoint. Otherwise every operation succeeded and err is the commit's (or begin's).
func (w *Writer[T]) optimistic(ctx context.Context, ops []*op[T]) (done bool, err error) {
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return true, err
	}
	defer func() {
		if p := recover(); p != nil {
			w.db.Rollback(tx)
			done, err = true, fmt.Errorf("groupcommit: a write panicked: %v", p)
		}
	}()
	rest := ops
	if m, ok := w.db.(Merger[T]); ok {
		var parts []any
		least := 2
		if w.opts.MergeAlone {
			least = 1
		}
		parts, rest = mergeable(ops, least)
		if len(parts) > 0 && m.Merge(ctx, tx, parts) != nil {
			w.db.Rollback(tx)
			return false, nil
		}
	}
	for _, o := range rest {
		if o.fn(ctx, tx) != nil {
			w.db.Rollback(tx)
			return false, nil
		}
	}
	if err := w.db.Commit(ctx, tx); err != nil {
		w.db.Rollback(tx)
		if errors.Is(err, ErrApart) { // not committed: a merged write failed (Merger)
			return false, nil
		}
		return true, err
	}
	return true, nil
}

// mergeable returns the parts of ops (sorted by key) to merge, if there are least or more: those
// of the operations given one whose key no other operation of ops has. rest are the other
// operations, in their order.
func mergeable[T any](ops []*op[T], least int) (parts []any, rest []*op[T]) {
	alone := func(i int) bool {
		k := ops[i].key
		return ops[i].part != nil && k != "" && (i == 0 || ops[i-1].key != k) && (i == len(ops)-1 || ops[i+1].key != k)
	}
	n := 0
	for i := range ops {
		if alone(i) {
			n++
		}
	}
	if n < least {
		return nil, ops
	}
	parts, rest = make([]any, 0, n), make([]*op[T], 0, len(ops)-n)
	for i, o := range ops {
		if alone(i) {
			parts = append(parts, o.part)
		} else {
			rest = append(rest, o)
		}
	}
	return parts, rest
}
