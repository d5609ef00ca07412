package runs

import (
	"context"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

// ctxStore keeps the contexts a run's beginning and end were written with.
type ctxStore struct {
	*sqlite.Store
	mu    sync.Mutex
	begin []context.Context
	end   []context.Context
}

func (s *ctxStore) BeginRun(ctx context.Context, b *parley.RunBegin) (int64, error) {
	s.mu.Lock()
	s.begin = append(s.begin, ctx)
	s.mu.Unlock()
	return s.Store.BeginRun(ctx, b)
}

func (s *ctxStore) FinishRun(ctx context.Context, f parley.RunFinish) error {
	s.mu.Lock()
	s.end = append(s.end, ctx)
	s.mu.Unlock()
	return s.Store.FinishRun(ctx, f)
}

type reqKey struct{}

// The writes of a run's beginning and end are bounded by storeTimeout (ending no earlier, and
// at most 1/64 later: internal/deadline's slots), carry the request's values and outlive the
// request's cancellation.
func TestStoreWritesAreBoundedNotCancelledByTheRequest(t *testing.T) {
	st := &ctxStore{Store: durableStore(t)}
	m := NewManager(Options{Events: st, Runs: st, Instance: "i1", FlushEvery: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	start := time.Now()
	for _, id := range []string{"s1", "s2", "s3"} {
		req, cancel := context.WithCancel(context.WithValue(context.Background(), reqKey{}, id))
		spec, _ := newSessionSpec(id)
		r, err := m.Launch(req, spec, func(r *Run) Func { return chunks(1) })
		if err != nil {
			t.Fatal(err)
		}
		cancel() // the client leaves: the run's writes go on
		waitDone(t, r)
	}
	end := time.Now()
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.begin) != 3 || len(st.end) != 3 {
		t.Fatalf("%d beginnings and %d ends written, want 3 each", len(st.begin), len(st.end))
	}
	for i, ctx := range append(append([]context.Context{}, st.begin...), st.end...) {
		at, ok := ctx.Deadline()
		if !ok || at.Before(start.Add(storeTimeout)) || at.After(end.Add(storeTimeout+storeTimeout/64)) {
			t.Errorf("write %d: deadline %v (%v), want %v to %v after the start", i, at.Sub(start), ok, storeTimeout, end.Sub(start)+storeTimeout+storeTimeout/64)
		}
		if err := ctx.Err(); err != nil {
			t.Errorf("write %d: its context ended (%v) with the request's", i, err)
		}
		if i < 3 && ctx.Value(reqKey{}) == nil {
			t.Errorf("beginning %d: the request's values are not there", i)
		}
	}
}
