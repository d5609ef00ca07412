package runs

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

// gatedStore holds each BeginRun until release is closed (telling entered first), then returns
// fail if set, else writes it.
type gatedStore struct {
	*sqlite.Store
	entered chan struct{}
	release chan struct{}
	fail    error
}

func (g *gatedStore) BeginRun(ctx context.Context, b *parley.RunBegin) (int64, error) {
	close(g.entered)
	<-g.release
	if g.fail != nil {
		return 0, g.fail
	}
	return g.Store.BeginRun(ctx, b)
}

func gatedManager(t *testing.T, fail error) (*Manager, *gatedStore) {
	t.Helper()
	g := &gatedStore{Store: durableStore(t), entered: make(chan struct{}), release: make(chan struct{}), fail: fail}
	m := NewManager(Options{Events: g, Runs: g, Instance: "a", FlushEvery: time.Millisecond})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	})
	return m, g
}

func newSessionSpec(id string) (Spec, *parley.Message) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), CreatedAt: now}
	return Spec{Session: id, Model: "m", Owner: "alice",
		NewSession: &parley.Session{ID: id, Title: id, Owner: "alice", CreatedAt: now, UpdatedAt: now},
		Messages:   []*parley.Message{user}}, user
}

// The body of a launched run starts while its beginning is being written; what it emits
// meanwhile reaches the stream only after the write committed, after the run's start.
func TestLaunchOverlapsTheWriteAndHoldsEvents(t *testing.T) {
	m, g := gatedManager(t, nil)
	spec, _ := newSessionSpec("s1")
	called := make(chan struct{})
	go func() {
		<-called
		<-g.entered
		// The body runs and the write is under way: nothing of the chat is stored yet.
		if _, err := g.GetSession(context.Background(), "s1"); !errors.Is(err, parley.ErrNotFound) {
			t.Errorf("the session before the write committed: %v, want not found", err)
		}
		close(g.release)
	}()
	r, err := m.Launch(context.Background(), spec, func(r *Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			close(called) // the model call would start here
			emit(parley.Event{Type: parley.EventChunk, Content: "early"})
			if err := r.Begun(); err != nil {
				return "", err
			}
			return parley.FinishStop, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, r)
	evs, err := g.ListEvents(context.Background(), "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, ev := range evs {
		types = append(types, string(ev.Type))
	}
	if len(evs) != 3 || evs[0].Type != parley.EventStart || evs[1].Type != parley.EventChunk || evs[2].Type != parley.EventDone {
		t.Fatalf("events %v, want start, chunk, done", types)
	}
	if _, err := g.ActiveRun(context.Background(), "s1"); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("the run's record after it ended: %v, want ended", err)
	}
}

// When the write of a launched run's beginning fails, its body is cancelled, what it emitted is
// dropped, Launch returns the error once the body has returned, and the session is free.
func TestLaunchFailedWriteCancelsTheBody(t *testing.T) {
	boom := errors.New("disk full")
	m, g := gatedManager(t, boom)
	spec, _ := newSessionSpec("s1")
	bodyErr := make(chan error, 1)
	go func() { <-g.entered; close(g.release) }()
	_, err := m.Launch(context.Background(), spec, func(r *Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			emit(parley.Event{Type: parley.EventChunk, Content: "early"})
			<-ctx.Done() // a model call, cancelled
			bodyErr <- r.Begun()
			return "", ctx.Err()
		}
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Launch: %v, want the write's error", err)
	}
	select {
	case berr := <-bodyErr:
		if !errors.Is(berr, boom) {
			t.Fatalf("Begun in the body: %v, want the write's error", berr)
		}
	default:
		t.Fatal("Launch returned before the body did")
	}
	if evs, err := g.ListEvents(context.Background(), "s1", 0, 100); err != nil || len(evs) != 0 {
		t.Fatalf("events stored: %v %v, want none", evs, err)
	}
	if _, ok := m.Active("s1"); ok {
		t.Fatal("the session still has an active run")
	}
	// The session is not claimed any more: a run can be begun in it (the gate now lets writes
	// through).
	g.fail = nil
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	close(g.release)
	spec2, _ := newSessionSpec("s1")
	r, err := m.Launch(context.Background(), spec2, func(*Run) Func { return chunks(1) })
	if err != nil {
		t.Fatalf("a run after the failed one: %v", err)
	}
	waitDone(t, r)
}

// The events given to Launch (the question) follow the start event before Launch returns,
// whatever the body is doing: a reader that subscribes then finds them together, and a client's
// stream sends them in one write.
func TestLaunchEmitsItsFirstEventsBeforeReturning(t *testing.T) {
	st := durableStore(t)
	m := NewManager(Options{Events: st, Runs: st, Instance: "a", FlushEvery: time.Millisecond})
	defer m.Shutdown(context.Background())
	spec, user := newSessionSpec("s1")
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) }) // before Shutdown waits for the run, on every return
	r, err := m.Launch(context.Background(), spec, func(r *Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			<-release
			return parley.FinishStop, nil
		}
	}, parley.Event{Type: parley.EventRecord, Message: user})
	if err != nil {
		t.Fatal(err)
	}
	sub := m.Subscribe(context.Background(), "s1", r.FirstSeq()-1)
	defer sub.Close()
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 || frames[0].Type != parley.EventStart || frames[1].Type != parley.EventRecord || frames[1].Event().Message.ID != user.ID {
		var got []parley.EventType
		for _, f := range frames {
			got = append(got, f.Type)
		}
		t.Fatalf("frames %v, want start then the record", got)
	}
	once.Do(func() { close(release) })
	waitDone(t, r)
}

// The body of a launched run does not wait for the write of its beginning to emit: what it emits
// meanwhile (the model's first chunks) is kept, and Launch puts it in the stream after the start
// and the question before returning, so that a reader who subscribes then gets the first chunk
// in its first read, without the body's goroutine being woken first.
func TestLaunchAppendsTheBodysEarlyEventsBeforeReturning(t *testing.T) {
	m, g := gatedManager(t, nil)
	spec, user := newSessionSpec("s1")
	emitted := make(chan struct{})
	go func() {
		<-g.entered
		// The write is held until the body has emitted: emitting must not wait for the write.
		select {
		case <-emitted:
		case <-time.After(10 * time.Second):
			t.Error("the body's emit waited for the write of the run's beginning")
		}
		close(g.release)
	}()
	release := make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	r, err := m.Launch(context.Background(), spec, func(r *Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			emit(parley.Event{Type: parley.EventChunk, Content: "one"})
			emit(parley.Event{Type: parley.EventChunk, Content: "two"})
			close(emitted)
			<-release
			emit(parley.Event{Type: parley.EventChunk, Content: "three"})
			return parley.FinishStop, nil
		}
	}, parley.Event{Type: parley.EventRecord, Message: user})
	if err != nil {
		t.Fatal(err)
	}
	sub := m.Subscribe(context.Background(), "s1", r.FirstSeq()-1)
	defer sub.Close()
	frames, err := sub.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range frames {
		got = append(got, string(f.Type)+":"+f.Event().Content)
	}
	if len(frames) != 4 || frames[0].Type != parley.EventStart || frames[1].Type != parley.EventRecord ||
		frames[2].Event().Content != "one" || frames[3].Event().Content != "two" {
		t.Fatalf("first read %v, want start, the record, chunks one and two", got)
	}
	once.Do(func() { close(release) })
	waitDone(t, r)
	evs, err := g.ListEvents(context.Background(), "s1", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for _, ev := range evs {
		got = append(got, string(ev.Type)+":"+ev.Content)
	}
	if len(evs) != 6 || evs[2].Content != "one" || evs[3].Content != "two" || evs[4].Content != "three" || evs[5].Type != parley.EventDone {
		t.Fatalf("stored %v, want start, record, one, two, three, done", got)
	}
}

// Past maxEarly events the body waits for the write (the events kept are bounded), and every
// event is still stored once, in the order emitted.
func TestLaunchBodyWaitsPastTheEarlyBound(t *testing.T) {
	m, g := gatedManager(t, nil)
	spec, _ := newSessionSpec("s1")
	const n = maxEarly + 10
	var emitted atomic.Int64
	go func() {
		<-g.entered
		defer close(g.release)
		for deadline := time.Now().Add(10 * time.Second); emitted.Load() < maxEarly; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Errorf("the body emitted %d events in 10 s while the write was held, want %d", emitted.Load(), maxEarly)
				return
			}
		}
		// An unbounded body would be done by now (a slow machine only lets this pass more often).
		time.Sleep(50 * time.Millisecond)
		if e := emitted.Load(); e != maxEarly {
			t.Errorf("the body emitted %d events while the write was held, want %d", e, maxEarly)
		}
	}()
	r, err := m.Launch(context.Background(), spec, func(r *Run) Func {
		return func(ctx context.Context, emit func(parley.Event)) (string, error) {
			for i := range n {
				emit(parley.Event{Type: parley.EventChunk, Content: strconv.Itoa(i)})
				emitted.Add(1)
			}
			return parley.FinishStop, nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, r)
	evs, err := g.ListEvents(context.Background(), "s1", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != n+2 {
		t.Fatalf("%d events stored, want %d", len(evs), n+2)
	}
	for i := range n {
		if evs[i+1].Content != strconv.Itoa(i) {
			t.Fatalf("event %d is %q, want chunk %d", i+1, evs[i+1].Content, i)
		}
	}
}
