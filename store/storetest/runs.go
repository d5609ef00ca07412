package storetest

import (
	"slices"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func newRun(t *testing.T, s parley.Store, sessionID, instance string, lease time.Time) *parley.RunRecord {
	t.Helper()
	r := &parley.RunRecord{ID: parley.NewID(), SessionID: sessionID, Owner: "alice", Model: "mock/echo",
		Instance: instance, LeaseUntil: lease, CreatedAt: base}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatalf("CreateRun: %v", err)
	}
	return r
}

func testRuns(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	r := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "mock/echo",
		SelectedTools: []string{"calculator", "mcp:fs/read_file"}, Instance: "a", LeaseUntil: base.Add(30 * time.Second), FirstSeq: 1025, CreatedAt: base}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.ActiveRun(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.State, want.UpdatedAt = parley.RunStateRunning, base
	if got.ID != want.ID || got.SessionID != want.SessionID || got.Owner != want.Owner || got.Model != want.Model ||
		!slices.Equal(got.SelectedTools, want.SelectedTools) || got.State != want.State || got.Instance != "a" ||
		!got.LeaseUntil.Equal(want.LeaseUntil) || !got.CreatedAt.Equal(base) || got.Attempts != 0 || got.FirstSeq != 1025 {
		t.Fatalf("ActiveRun = %+v, want %+v", got, want)
	}

	// One running run per session, whichever instance asks.
	second := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "alice", Model: "m", Instance: "b",
		LeaseUntil: base.Add(time.Minute), CreatedAt: base}
	if err := s.CreateRun(ctx, second); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("a second running run: %v, want conflict", err)
	}
	if err := s.CreateRun(ctx, &parley.RunRecord{ID: parley.NewID(), SessionID: "no-such-session", Instance: "a", CreatedAt: base}); !isNotFound(err) {
		t.Fatalf("a run of an unknown session: %v, want not found", err)
	}

	// Renewal: only the instance running the run renews it.
	if ids, err := s.RenewRuns(ctx, "b", []string{r.ID}, base.Add(time.Hour)); err != nil || len(ids) != 0 {
		t.Fatalf("renewal by another instance: %v %v, want none", ids, err)
	}
	if ids, err := s.RenewRuns(ctx, "a", []string{r.ID, "unknown"}, base.Add(time.Minute)); err != nil || !slices.Equal(ids, []string{r.ID}) {
		t.Fatalf("renewal: %v %v, want [%s]", ids, err, r.ID)
	}
	if got, _ := s.ActiveRun(ctx, sess.ID); !got.LeaseUntil.Equal(base.Add(time.Minute)) {
		t.Fatalf("lease after renewal: %v", got.LeaseUntil)
	}

	// Ending: only by the instance running it; then the session is free.
	if err := s.EndRun(ctx, r.ID, "b", parley.FinishStop, base.Add(time.Second)); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("ending another instance's run: %v, want conflict", err)
	}
	if err := s.EndRun(ctx, r.ID, "a", parley.FinishAborted, base.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveRun(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("ActiveRun after the end: %v, want not found", err)
	}
	if err := s.EndRun(ctx, r.ID, "a", parley.FinishStop, base.Add(time.Second)); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("ending twice: %v, want conflict", err)
	}
	if err := s.CreateRun(ctx, second); err != nil {
		t.Fatalf("the next run: %v", err)
	}
	if ids, _ := s.RenewRuns(ctx, "a", []string{r.ID}, base.Add(time.Hour)); len(ids) != 0 {
		t.Fatalf("an ended run was renewed: %v", ids)
	}

	// A run begun and given back leaves nothing.
	if err := s.DeleteRun(ctx, second.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ActiveRun(ctx, sess.ID); !isNotFound(err) {
		t.Fatalf("ActiveRun after DeleteRun: %v, want not found", err)
	}

	// Old ended runs are swept; running ones never.
	running := newRun(t, s, sess.ID, "a", base)
	if n, err := s.DeleteEndedRunsBefore(ctx, base.Add(time.Hour)); err != nil || n != 1 {
		t.Fatalf("DeleteEndedRunsBefore = %d, %v; want 1 (the ended run)", n, err)
	}
	if got, err := s.ActiveRun(ctx, sess.ID); err != nil || got.ID != running.ID {
		t.Fatalf("the running run after the sweep: %v %v", got, err)
	}
	// Deleting the session deletes its runs.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if claimed, err := s.ClaimRuns(ctx, "z", "a", base.Add(time.Hour), base.Add(2*time.Hour), 10); err != nil || len(claimed) != 0 {
		t.Fatalf("runs of a deleted session: %v %v", claimed, err)
	}
}

func testRunClaims(t *testing.T, s parley.Store) {
	now := base.Add(time.Minute)
	s1, s2, s3 := newSession(t, s, "alice", base), newSession(t, s, "alice", base), newSession(t, s, "alice", base)
	expired := newRun(t, s, s1.ID, "a", now.Add(-time.Second))
	live := newRun(t, s, s2.ID, "b", now.Add(time.Minute))
	mine := newRun(t, s, s3.ID, "c", now.Add(time.Minute)) // c restarted: its runs are orphans

	claimed, err := s.ClaimRuns(ctx, "c", "", now, now.Add(30*time.Second), 10)
	if err != nil || len(claimed) != 1 || claimed[0].ID != expired.ID {
		t.Fatalf("claim of expired leases: %v %v, want [%s]", claimed, err, expired.ID)
	}
	c := claimed[0]
	if c.Instance != "c" || c.Attempts != 1 || !c.LeaseUntil.Equal(now.Add(30*time.Second)) || c.SessionID != s1.ID || c.State != parley.RunStateRunning {
		t.Fatalf("claimed run: %+v", c)
	}
	// The old instance can no longer end or renew what was taken from it.
	if err := s.EndRun(ctx, expired.ID, "a", parley.FinishStop, now); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("the old instance ends a claimed run: %v, want conflict", err)
	}
	if ids, _ := s.RenewRuns(ctx, "a", []string{expired.ID}, now.Add(time.Hour)); len(ids) != 0 {
		t.Fatalf("the old instance renewed a claimed run: %v", ids)
	}
	// Nothing else has expired; the live run of b stays with b.
	if claimed, err := s.ClaimRuns(ctx, "d", "", now, now.Add(30*time.Second), 10); err != nil || len(claimed) != 0 {
		t.Fatalf("second claim: %v %v, want none", claimed, err)
	}
	// An instance restarting under its name (a moment later) takes its own runs back at once.
	claimed, err = s.ClaimRuns(ctx, "c", "c", now.Add(time.Second), now.Add(30*time.Second), 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, r := range claimed {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	want := []string{expired.ID, mine.ID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Fatalf("orphan claim: %v, want %v (not b's live %s)", ids, want, live.ID)
	}
	// limit bounds a claim.
	if claimed, err := s.ClaimRuns(ctx, "e", "", now.Add(time.Hour), now.Add(2*time.Hour), 2); err != nil || len(claimed) != 2 {
		t.Fatalf("limited claim: %d runs, %v; want 2", len(claimed), err)
	}
}

// testRestartClaims: an instance restarting under its name pages through the runs it left, with
// the moment it started as now: each is claimed once (one more attempt each), however many calls
// it takes, and a run it began since is never among them.
func testRestartClaims(t *testing.T, s parley.Store) {
	started := base.Add(time.Hour) // the restart
	left := map[string]bool{}
	for range 5 {
		sess := newSession(t, s, "alice", base)
		r := newRun(t, s, sess.ID, "r", started.Add(time.Minute)) // created at base, lease still running
		left[r.ID] = true
	}
	// A run the restarted instance began after it started: its own, not an orphan.
	fresh := newSession(t, s, "alice", base)
	begun := &parley.RunRecord{ID: parley.NewID(), SessionID: fresh.ID, Owner: "alice", Instance: "r",
		LeaseUntil: started.Add(time.Minute), CreatedAt: started.Add(time.Millisecond)}
	if err := s.CreateRun(ctx, begun); err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for calls := 0; ; calls++ {
		if calls > len(left)+1 {
			t.Fatalf("still claiming after %d calls of 2 runs: %v", calls, seen)
		}
		// Each call a little later, as the passes of a restart are: its lease too.
		claimed, err := s.ClaimRuns(ctx, "r", "r", started, started.Add(time.Duration(calls+1)*time.Minute), 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range claimed {
			seen[c.ID]++
			if c.Attempts != 1 || c.Instance != "r" || !c.UpdatedAt.Equal(started) {
				t.Fatalf("claimed run: %+v, want attempts 1, instance r, updated at the restart", c)
			}
		}
		if len(claimed) < 2 {
			break
		}
	}
	if len(seen) != len(left) {
		t.Fatalf("claimed %v, want each of %v once", seen, left)
	}
	for id, n := range seen {
		if !left[id] || n != 1 {
			t.Fatalf("run %s claimed %d times (left by the old process: %v)", id, n, left[id])
		}
	}
	if got, err := s.ActiveRun(ctx, fresh.ID); err != nil || got.Attempts != 0 || !got.UpdatedAt.Equal(begun.CreatedAt) {
		t.Fatalf("the run begun after the restart: %+v %v, want untouched", got, err)
	}
	// The next restart (a later now) takes them all back again, one more attempt each.
	again, err := s.ClaimRuns(ctx, "r", "r", started.Add(time.Hour), started.Add(2*time.Hour), 10)
	if err != nil || len(again) != len(left)+1 {
		t.Fatalf("the next restart claimed %d runs, %v; want %d", len(again), err, len(left)+1)
	}
	for _, c := range again {
		if want := 2; left[c.ID] && c.Attempts != want {
			t.Fatalf("run %s: attempts %d after two restarts, want %d", c.ID, c.Attempts, want)
		}
	}
}

func testToolCallLedger(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	other := newSession(t, s, "alice", base)
	mark := func(sessionID, call, state string) {
		t.Helper()
		run := "run1"
		if sessionID != sess.ID {
			run = "run2"
		}
		if err := s.MarkToolCall(ctx, sessionID, run, call, "f", state, base); err != nil {
			t.Fatalf("MarkToolCall(%s, %s): %v", call, state, err)
		}
	}
	mark(sess.ID, "c1", parley.ToolCallStarted)
	mark(sess.ID, "c2", parley.ToolCallStarted)
	mark(sess.ID, "c2", parley.ToolCallDone)
	mark(sess.ID, "c2", parley.ToolCallStarted) // done stays done
	mark(other.ID, "c1", parley.ToolCallDone)   // ids are per session
	got, err := s.ToolCallStates(ctx, sess.ID, []string{"c1", "c2", "c3"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"c1": parley.ToolCallStarted, "c2": parley.ToolCallDone}
	if len(got) != len(want) || got["c1"] != want["c1"] || got["c2"] != want["c2"] {
		t.Fatalf("ToolCallStates = %v, want %v", got, want)
	}
	if got, err := s.ToolCallStates(ctx, sess.ID, nil); err != nil || len(got) != 0 {
		t.Fatalf("no ids: %v %v", got, err)
	}
	if err := s.MarkToolCall(ctx, sess.ID, "run1", "c4", "f", "maybe", base); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("unknown state: %v, want invalid", err)
	}
	if err := s.MarkToolCall(ctx, "no-such-session", "run1", "c1", "f", parley.ToolCallStarted, base); !isNotFound(err) {
		t.Fatalf("unknown session: %v, want not found", err)
	}
	// The sweep keeps the calls of a running run and drops old ones of others.
	newRunWithID(t, s, sess.ID, "run1")
	mark(other.ID, "c9", parley.ToolCallStarted)
	if _, err := s.DeleteEndedRunsBefore(ctx, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ToolCallStates(ctx, sess.ID, []string{"c1", "c2"}); len(got) != 2 {
		t.Fatalf("the sweep dropped a running run's calls: %v", got)
	}
	if got, _ := s.ToolCallStates(ctx, other.ID, []string{"c1", "c9"}); len(got) != 0 {
		t.Fatalf("the sweep kept old calls of no running run: %v", got)
	}
}

func newRunWithID(t *testing.T, s parley.Store, sessionID, id string) {
	t.Helper()
	r := &parley.RunRecord{ID: id, SessionID: sessionID, Owner: "alice", Model: "m", Instance: "a", LeaseUntil: base, CreatedAt: base}
	if err := s.CreateRun(ctx, r); err != nil {
		t.Fatal(err)
	}
}

// A session whose run is running is not one of the sessions with open calls: its calls are that
// run's to answer.
func testOpenToolCallsOfRunningRun(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	ask := msg(parley.RoleAssistant, "", base)
	ask.ToolCalls = []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{}"}}}
	if err := s.AppendMessages(ctx, sess.ID, msg(parley.RoleUser, "go", base), ask); err != nil {
		t.Fatal(err)
	}
	r := newRun(t, s, sess.ID, "a", base.Add(time.Minute))
	if ids, err := s.SessionsWithOpenToolCalls(ctx, "", 10); err != nil || len(ids) != 0 {
		t.Fatalf("open calls of a running run: %v %v, want none", ids, err)
	}
	if err := s.EndRun(ctx, r.ID, "a", parley.FinishInterrupted, base); err != nil {
		t.Fatal(err)
	}
	if ids, err := s.SessionsWithOpenToolCalls(ctx, "", 10); err != nil || len(ids) != 1 {
		t.Fatalf("open calls once the run ended: %v %v, want [%s]", ids, err, sess.ID)
	}
}
