package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/testlog"
	"github.com/parleyhq/parley/store/sqlite"
)

// seedOpenRuns stores n sessions, each with a user message and a run that instance left
// running when it died, and returns the sessions.
func seedOpenRuns(t *testing.T, db, instance string, n int) []string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	sessions := make([]string, n)
	for i := range sessions {
		s := &parley.Session{ID: parley.NewID(), Title: fmt.Sprintf("open run %d", i), Owner: "alice", CreatedAt: at, UpdatedAt: at}
		if err := st.CreateSession(ctx, s); err != nil {
			t.Fatal(err)
		}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: s.ID, Owner: "alice", Instance: instance,
			LeaseUntil: time.Now().Add(time.Hour), CreatedAt: at}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Say hello in a long sentence, please, with many words in it."),
			RunID: run.ID, CreatedAt: at}
		if err := st.AppendMessages(ctx, s.ID, user); err != nil {
			t.Fatal(err)
		}
		if err := st.CreateRun(ctx, run); err != nil {
			t.Fatal(err)
		}
		sessions[i] = s.ID
	}
	return sessions
}

// serverGoroutines returns the stacks of this process's goroutines running Parley code, by
// goroutine id, but for the tests' own.
func serverGoroutines() map[string]string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "github.com/parleyhq/parley/") || strings.Contains(g, "testing.tRunner") {
			continue
		}
		if f := strings.Fields(g); len(f) > 1 {
			out[f[1]] = g
		}
	}
	return out
}

// noGoroutinesLeft waits until every Parley goroutine but those of before has ended.
func noGoroutinesLeft(t *testing.T, before map[string]string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var left []string
		for id, g := range serverGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still running after serve returned:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// failingListener listens, but its Accept fails once every one of sessions has a run going on
// (its recovered event is stored): a step that fails after the runs are started.
type failingListener struct {
	net.Listener
	ready func() bool
}

func (l failingListener) Accept() (net.Conn, error) {
	deadline := time.Now().Add(30 * time.Second)
	for !l.ready() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return nil, errors.New("injected: accept failed")
}

// recovering reports whether each session's run was taken back and goes on: its recovered
// status is stored.
func recovering(st *sqlite.Store, sessions []string) bool {
	for _, s := range sessions {
		evs, err := st.ListEvents(context.Background(), s, 0, 10)
		if err != nil || len(evs) == 0 || evs[0].State != parley.RunRecovered {
			return false
		}
	}
	return true
}

// watch opens a second handle on the server's database, for the test to look.
func watch(t *testing.T, db string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Issue 18 point 18: when serving fails after the runs were taken back, serve stops everything it
// started before it returns, the store last: no goroutine of it is left, and every run's end is
// stored (its record ended, its done event written), which needs the store still open.
func TestServeFailureReleasesEverything(t *testing.T) {
	const open = 6
	db := filepath.Join(t.TempDir(), "p.db")
	sessions := seedOpenRuns(t, db, "fail", open)
	w := watch(t, db)
	before := serverGoroutines()
	logs := &testlog.Buffer{}
	listen := func(network, addr string) (net.Listener, error) {
		ln, err := net.Listen(network, addr)
		return failingListener{Listener: ln, ready: func() bool { return recovering(w, sessions) }}, err
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--instance-id", "fail",
		"--mock-token-delay", "100ms", "--shutdown-grace", "0s"}
	err := serve(context.Background(), args[1:], func(string) string { return "" }, io.Discard, logs, listen)
	if err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("serve returned %v, want the accept failure\n%s", err, logs)
	}
	noGoroutinesLeft(t, before)
	checkRunsEnded(t, db, sessions)
}

// checkRunsEnded checks that no session has a running run and that each one's last stored event
// is a done.
func checkRunsEnded(t *testing.T, db string, sessions []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	finish := map[string]string{}
	for _, s := range sessions {
		if rec, err := st.ActiveRun(ctx, s); !errors.Is(err, parley.ErrNotFound) {
			t.Fatalf("session %s: run still running after serve returned: %+v %v", s, rec, err)
		}
		var last parley.Event
		for after := int64(0); ; {
			evs, err := st.ListEvents(ctx, s, after, 500)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 0 {
				break
			}
			last, after = evs[len(evs)-1], evs[len(evs)-1].Seq
		}
		if last.Type != parley.EventDone {
			t.Fatalf("session %s: last stored event %+v, want done", s, last)
		}
		finish[s] = last.FinishReason
	}
	return finish
}

// Issue 18 point 18: an address in use fails before any run is taken back: the runs are left as
// they were (for the next start), and nothing is left running.
func TestServeOnTakenAddressTouchesNoRun(t *testing.T) {
	db := filepath.Join(t.TempDir(), "p.db")
	sessions := seedOpenRuns(t, db, "taken", 3)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	before := serverGoroutines()
	logs := &testlog.Buffer{}
	err = run(context.Background(), []string{"serve", "--addr", taken.Addr().String(), "--db", db, "--instance-id", "taken"},
		func(string) string { return "" }, io.Discard, logs)
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("serve on a taken address: %v", err)
	}
	noGoroutinesLeft(t, before)
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range sessions {
		rec, err := st.ActiveRun(context.Background(), s)
		if err != nil || rec.Attempts != 0 || rec.Instance != "taken" {
			t.Fatalf("session %s: run %+v %v, want it untouched", s, rec, err)
		}
	}
}

// Issue 18 point 2: a server restarted with many runs open listens before it takes any back, takes
// each back once (one attempt each, no conflict), and they go on to their end.
func TestRestartWithManyOpenRuns(t *testing.T) {
	const open = 20
	db := filepath.Join(t.TempDir(), "p.db")
	sessions := seedOpenRuns(t, db, "many", open)
	logs := &testlog.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--instance-id", "many", "--mock-token-delay", "0s"},
			func(string) string { return "" }, io.Discard, logs)
	}()
	// Once every run has gone on to its end, stop.
	w := watch(t, db)
	deadline := time.Now().Add(60 * time.Second)
	for {
		running := 0
		for _, s := range sessions {
			if _, err := w.ActiveRun(ctx, s); err == nil {
				running++
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs still running after 60s:\n%s", running, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	out := logs.String()
	listening, firstTake := strings.Index(out, "msg=listening"), strings.Index(out, "taking over a run")
	if listening < 0 || listening > firstTake {
		t.Fatalf("runs were taken back before the server listened:\n%s", out)
	}
	attempts := regexp.MustCompile(`taking over a run.* attempt=(\d+)`).FindAllStringSubmatch(out, -1)
	if len(attempts) != open || strings.Contains(out, "could not take over") {
		t.Fatalf("%d runs taken over, want each of %d once, without conflict:\n%s", len(attempts), open, out)
	}
	for _, a := range attempts {
		if a[1] != "1" {
			t.Fatalf("a run taken over at attempt %s, want 1:\n%s", a[1], out)
		}
	}
	for s, f := range checkRunsEnded(t, db, sessions) {
		if f != parley.FinishStop {
			t.Fatalf("session %s: the run taken back ended %q, want stop:\n%s", s, f, out)
		}
	}
}
