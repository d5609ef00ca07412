package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	parley "github.com/parleyhq/parley"
)

// The round trips of a chat's store calls, counted on the wire (a write answered by a read) on
// a pool of one connection whose statements are already prepared: the group-commit transaction
// sends BEGIN with its first statement and its framing with the next one (pipeTx), a new
// session's run begins in one batch, and a chain's history is one statement.
func TestRoundTripsOfAChat(t *testing.T) {
	var p probe
	s := openOneConn(t, &p)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	begin := func() *parley.RunBegin {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
		return &parley.RunBegin{NewSession: sess, Reserve: 10, Run: run, Messages: []*parley.Message{user}}
	}
	answer := func() *parley.Message {
		return &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("yes"), CreatedAt: now}
	}
	steps := []struct {
		name  string
		trips int64
		do    func(b *parley.RunBegin) error
	}{
		// [BEGIN, session, run and message in one statement, COMMIT]: alone in its
		// transaction, the statement goes with the COMMIT (pipeTx.holdFirst); it was 7, then 2.
		{"BeginRun of a new session", 1, func(b *parley.RunBegin) error { _, err := s.BeginRun(ctx, b); return err }},
		// [BEGIN, the message's insert, the session's update] [COMMIT]; it was 4.
		{"AppendMessages", 2, func(b *parley.RunBegin) error { return s.AppendMessages(ctx, b.NewSession.ID, answer()) }},
		// The tip and the chain in one statement; it was 2.
		{"ModelHistory", 1, func(b *parley.RunBegin) error { _, err := s.ModelHistory(ctx, b.NewSession.ID); return err }},
		{"History", 1, func(b *parley.RunBegin) error { _, err := s.History(ctx, b.NewSession.ID); return err }},
	}
	// A first chat prepares the statements on the connection (a round trip each, once).
	warm := begin()
	for _, st := range steps {
		if err := st.do(warm); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
	}
	b := begin()
	for _, st := range steps {
		before := p.trips.Load()
		if err := st.do(b); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := p.trips.Load() - before; got != st.trips {
			t.Errorf("%s: %d round trips, want %d", st.name, got, st.trips)
		}
	}
	// The next turn of the session, once the run ended: [BEGIN, event numbers, run, message,
	// the session's update] [COMMIT]; it was 6.
	next := func(b *parley.RunBegin) *parley.RunBegin {
		if err := s.FinishRun(ctx, parley.RunFinish{SessionID: b.Run.SessionID, Limit: b.Run.FirstSeq + b.Reserve - 1,
			Last: b.Run.FirstSeq, RunID: b.Run.ID, Instance: "i", Finish: "stop", At: now}); err != nil {
			t.Fatal(err)
		}
		n := begin()
		n.Run.SessionID, n.SessionID, n.NewSession = b.Run.SessionID, b.Run.SessionID, nil
		return n
	}
	if _, err := s.BeginRun(ctx, next(warm)); err != nil {
		t.Fatal(err)
	}
	turn := next(b)
	before := p.trips.Load()
	first, err := s.BeginRun(ctx, turn)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.trips.Load() - before; got != 2 {
		t.Errorf("BeginRun of the next turn: %d round trips, want 2", got)
	}
	if first != b.Run.FirstSeq+1 || turn.Run.FirstSeq != first || turn.Messages[0].Seq != 3 {
		t.Errorf("the next turn's first event number %d (run's %d), its message's seq %d; want %d and 3",
			first, turn.Run.FirstSeq, turn.Messages[0].Seq, b.Run.FirstSeq+1)
	}
	h, err := s.History(ctx, b.NewSession.ID)
	if err != nil || len(h) != 3 || h[2].ParentID != h[1].ID {
		t.Errorf("history of %d messages (%v), want the user's, the answer and the next turn's, chained", len(h), err)
	}
}

// A new session's begin alone in its transaction goes with its COMMIT (pipeTx.holdFirst); when
// its statement fails, the caller gets the error the statement sent at once gave (the same code
// and text), nothing is stored, and the connection goes on to the next write.
func TestALoneBeginThatFailsWithItsCommitGetsItsOwnError(t *testing.T) {
	var p probe
	s := openOneConn(t, &p)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	begin := func(project string) *parley.RunBegin {
		sess := &parley.Session{ID: parley.NewID(), Owner: "o", ProjectID: project, CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID, CreatedAt: now}
		return &parley.RunBegin{NewSession: sess, Reserve: 10, Run: run, Messages: []*parley.Message{user}}
	}
	if _, err := s.BeginRun(ctx, begin("")); err != nil { // prepares the statement
		t.Fatal(err)
	}
	bad := begin("no-such-project")
	before := p.trips.Load()
	_, err := s.BeginRun(ctx, bad)
	// [BEGIN, the statement, COMMIT unrun] [ROLLBACK]
	if trips := p.trips.Load() - before; trips != 2 {
		t.Errorf("a failing lone begin took %d round trips, want 2 (the statement with its COMMIT, then ROLLBACK)", trips)
	}
	if parley.CodeOf(err) != parley.ECNotFound || err.Error() != notFound("project", "no-such-project").Error() {
		t.Errorf("a begin in a project that does not exist: %v (code %s), want %v", err, parley.CodeOf(err), notFound("project", "no-such-project"))
	}
	if _, err := s.GetSession(ctx, bad.NewSession.ID); parley.CodeOf(err) != parley.ECNotFound {
		t.Errorf("the failed begin's session: %v, want none stored", err)
	}
	// A second begin of the same session fails on its key, as its statement sent at once would.
	good := begin("")
	if _, err := s.BeginRun(ctx, good); err != nil {
		t.Fatalf("the next begin on the same connection: %v", err)
	}
	again := begin("")
	again.NewSession.ID, again.Run.SessionID = good.NewSession.ID, good.NewSession.ID
	_, err = s.BeginRun(ctx, again)
	if err == nil || !strings.HasPrefix(err.Error(), "postgres: beginning a run: ") || !isUniqueViolation(err) {
		t.Errorf("a begin of a session that exists: %v, want the statement's unique violation", err)
	}
	if h, err := s.History(ctx, good.NewSession.ID); err != nil || len(h) != 1 || h[0].ID != good.Messages[0].ID {
		t.Errorf("the session begun first holds %d messages (%v), want its own one", len(h), err)
	}
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
