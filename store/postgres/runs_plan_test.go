package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	parley "github.com/parleyhq/parley"
)

// The statements that end or renew given runs find them by primary key, not through
// runs_one_running. That index is partial (the running runs), and ending a run is a non-HOT
// update (its state is in the predicate), so every run that ever ran leaves a dead entry in it
// until a VACUUM: without autovacuum (as on this project's CI server) or between two of its
// passes, a scan of the whole index reads one entry for every run ended since. A chat's end
// (mergedEndsSQL) read it through a BitmapAnd with the primary key, and its cost grew with the
// database: the gateway benchmark's PostgreSQL backends read 559 entries of runs_one_running a
// chat at 10,000 chats and 5,351 at 40,000 (issue 25, tenth pass). Checked with the table
// unanalyzed (as autovacuum off leaves it) and analyzed.
func TestStatementsThatEndOrRenewGivenRunsReadThemByPrimaryKey(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const ended = 5000
	sessions := make([]string, ended+2)
	runIDs := make([]string, len(sessions))
	for i := range sessions {
		sessions[i], runIDs[i] = parley.NewID(), parley.NewID()
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"sessions"}, []string{"id", "owner", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(sessions), func(i int) ([]any, error) { return []any{sessions[i], "u", now, now}, nil })); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"runs"},
		[]string{"id", "session_id", "owner", "model", "state", "instance", "lease_until", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(sessions), func(i int) ([]any, error) {
			return []any{runIDs[i], sessions[i], "u", "m", "running", "a", now.Add(time.Minute), now, now}, nil
		})); err != nil {
		t.Fatal(err)
	}
	// They ran and ended, as a chat's run does: each leaves a dead entry in runs_one_running.
	if _, err := s.pool.Exec(ctx, `UPDATE runs SET state = 'ended', updated_at = $1 WHERE id = ANY($2)`, now, runIDs[:ended]); err != nil {
		t.Fatal(err)
	}
	two, one := runIDs[ended:], runIDs[ended:ended+1]
	twoSessions := sessions[ended:]
	texts := func(ss []string) []pgtype.Text {
		out := make([]pgtype.Text, len(ss))
		for i, s := range ss {
			out[i] = text(s)
		}
		return out
	}
	mergedEnds := func(n int) (string, []any) {
		args := []any{twoSessions[:n], []int64{1, 1}[:n], []int64{3, 3}[:n], [][]byte{[]byte("[]"), []byte("[]")}[:n],
			[]time.Time{now, now}[:n], []string{"stop", "stop"}[:n], texts(two[:n]), texts([]string{"a", "a"}[:n])}
		q, args, err := mergedStatement(mergedEndsSQL, args)
		if err != nil {
			t.Fatal(err)
		}
		return q, args
	}
	statements := func() []struct {
		name string
		sql  string
		args []any
	} {
		q2, a2 := mergedEnds(2)
		q1, a1 := mergedEnds(1)
		return []struct {
			name string
			sql  string
			args []any
		}{
			{"the merged ends of two runs", q2, a2},
			{"the merged end of one run", q1, a1},
			{"a run's end with its events", endWithEvents, []any{sessions[ended], int64(1), int64(3), []byte("[]"), now, "stop", one[0], "a"}},
			{"EndRun", endRunSQL, []any{"stop", now, one[0], "a"}},
			{"RenewRuns", renewRunsSQL, []any{now.Add(time.Hour), "a", two}},
		}
	}
	// pgx prepares each statement, and after five runs PostgreSQL plans it once for any
	// arguments (a generic plan: an array of unknown length, whose rows it guesses): the plan
	// checked is that one.
	checks := 0
	check := func(t *testing.T) {
		checks++
		for i, q := range statements() {
			tx, err := s.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			if _, err := tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_generic_plan`); err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("plan_%d_%d", checks, i) // a prepared statement outlives its transaction
			if _, err := tx.Exec(ctx, "PREPARE "+name+" AS "+q.sql); err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			// EXECUTE takes its arguments as literals: each is the server's own text of an
			// argument of the type the statement's parameter has.
			var types []string
			if err := tx.QueryRow(ctx, `SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = $1`, name).Scan(&types); err != nil {
				t.Fatal(err)
			}
			literals := make([]string, len(q.args))
			for j, a := range q.args {
				var l string
				if err := tx.QueryRow(ctx, "SELECT quote_nullable($1::"+types[j]+")", a).Scan(&l); err != nil {
					t.Fatalf("%s: argument %d: %v", q.name, j+1, err)
				}
				literals[j] = l + "::" + types[j]
			}
			rows, err := tx.Query(ctx, "EXPLAIN (COSTS OFF) EXECUTE "+name+"("+strings.Join(literals, ", ")+")")
			if err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatalf("%s: %v", q.name, err)
			}
			p := strings.Join(plan, "\n")
			if strings.Contains(p, "runs_one_running") || strings.Contains(p, "Seq Scan on runs") || !strings.Contains(p, "runs_pkey") {
				t.Errorf("%s does not find its runs by primary key alone:\n%s", q.name, p)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Run("unanalyzed", check)
	if _, err := s.pool.Exec(ctx, `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	t.Run("analyzed", check)

	// What they do is unchanged: the renewal and the end take the running runs only.
	renewed, err := s.RenewRuns(ctx, "a", []string{runIDs[0], two[0], two[1]}, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(renewed) != 2 {
		t.Fatalf("RenewRuns renewed %v, want the two running runs", renewed)
	}
	if err := s.EndRun(ctx, runIDs[0], "a", "stop", now); err == nil {
		t.Fatal("EndRun ended a run that had ended")
	}
	if err := s.EndRun(ctx, two[0], "a", "stop", now); err != nil {
		t.Fatal(err)
	}
	var running int
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE state = 'running'`).Scan(&running); err != nil {
		t.Fatal(err)
	}
	if running != 1 {
		t.Fatalf("%d runs running, want 1", running)
	}
}
