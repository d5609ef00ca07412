package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	parley "github.com/parleyhq/parley"
)

// The indexes of runs are those a query reads: the primary key, runs_one_running (the unique
// index that allows one running run a session, which ClaimRuns and the ledger's clean-up read
// the running runs through) and runs_ended (DeleteEndedRunsBefore). Migration 00015 dropped
// runs_lease, an index of the running runs by lease that every chat's run wrote an entry to and
// that made each renewal of a lease a non-HOT update, and that no query needs. Migration 00016
// added runs_session, the index a session's deletion finds its runs through (the cascade of the
// foreign key: TestEveryForeignKeyHasAnIndex).
func TestRunsHaveOnlyTheIndexesAQueryReads(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	rows, err := s.pool.Query(context.Background(),
		`SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'runs' ORDER BY indexname`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"runs_ended", "runs_one_running", "runs_pkey", "runs_session"}; !slices.Equal(got, want) {
		t.Fatalf("the indexes of runs are %v, want %v", got, want)
	}
}

// Without runs_lease, the queries that look for running runs among many ended ones still read
// them through an index of the running runs, not the whole table: ClaimRuns (leases that ended,
// runs an instance left) and the ledger's clean-up. And ClaimRuns still takes the runs whose
// lease ended first, and the runs an instance left.
func TestRunQueriesReadTheRunningRunsByIndex(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	const ended, running = 20000, 4
	sessions := make([]string, ended+running)
	for i := range sessions {
		sessions[i] = parley.NewID()
	}
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"sessions"}, []string{"id", "owner", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(sessions), func(i int) ([]any, error) {
			return []any{sessions[i], "u", now, now}, nil
		})); err != nil {
		t.Fatal(err)
	}
	// The running runs: two whose lease ended (the older first), one of an instance that left
	// it, one whose lease runs.
	type run struct {
		instance string
		lease    time.Time
	}
	runs := []run{{"a", now.Add(-time.Minute)}, {"a", now.Add(-2 * time.Minute)}, {"gone", now.Add(time.Hour)}, {"a", now.Add(time.Hour)}}
	ids := make([]string, len(sessions))
	if _, err := s.pool.CopyFrom(ctx, pgx.Identifier{"runs"},
		[]string{"id", "session_id", "owner", "model", "state", "instance", "lease_until", "created_at", "updated_at"},
		pgx.CopyFromSlice(len(sessions), func(i int) ([]any, error) {
			ids[i] = parley.NewID()
			state, instance, lease := "ended", "a", now.Add(-time.Hour)
			if i >= ended {
				state, instance, lease = "running", runs[i-ended].instance, runs[i-ended].lease
			}
			return []any{ids[i], sessions[i], "u", "m", state, instance, lease, now.Add(-time.Hour), now.Add(-time.Hour)}, nil
		})); err != nil {
		t.Fatal(err)
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE runs`); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name string
		sql  string
		args []any
	}{
		{"ClaimRuns", claimRunsSQL, []any{"b", now.Add(time.Minute), now, "gone", 10}},
		{"the ledger's clean-up", `DELETE FROM tool_calls WHERE updated_at < $1
			AND run_id NOT IN (SELECT id FROM runs WHERE state = 'running')`, []any{now}},
		// What the foreign key's cascade runs when a session is deleted.
		{"a deleted session's runs", `DELETE FROM ONLY runs WHERE $1 OPERATOR(pg_catalog.=) session_id`, []any{sessions[0]}},
	} {
		t.Run(q.name, func(t *testing.T) {
			rows, err := s.pool.Query(ctx, "EXPLAIN (COSTS OFF) "+q.sql, q.args...)
			if err != nil {
				t.Fatal(err)
			}
			plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			p := strings.Join(plan, "\n")
			if q.name == "a deleted session's runs" {
				if strings.Contains(p, "Seq Scan on runs") || !strings.Contains(p, "runs_session") {
					t.Errorf("the plan does not find the session's runs through runs_session:\n%s", p)
				}
				return
			}
			if strings.Contains(p, "Seq Scan on runs") || !strings.Contains(p, "runs_one_running") {
				t.Errorf("the plan does not read the running runs through runs_one_running:\n%s", p)
			}
		})
	}
	claimed, err := s.ClaimRuns(ctx, "b", "gone", now, now.Add(time.Minute), 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range claimed {
		got = append(got, r.ID)
	}
	slices.Sort(got)
	want := []string{ids[ended], ids[ended+1], ids[ended+2]}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("ClaimRuns took %v, want %v (the two ended leases and the run of the instance that left)", got, want)
	}
	claimed, err = s.ClaimRuns(ctx, "c", "gone", now.Add(2*time.Minute), now.Add(3*time.Minute), 1)
	if err != nil {
		t.Fatal(err)
	}
	// Now every claimed lease ends at now+1m; of those, limit 1 takes one whose lease ended.
	if len(claimed) != 1 || claimed[0].ID == ids[ended+3] {
		t.Fatalf("ClaimRuns with limit 1 took %+v, want one of the runs whose lease ended", claimed)
	}
}

// Every foreign key has an index whose leading columns are its own: deleting (or re-keying) a
// parent row makes PostgreSQL look its children up by those columns, for the cascade or the
// check that none is left, and without such an index it reads the whole child table. A partial
// index serves only if its predicate is "column IS NOT NULL" of a one-column key (what the
// lookup's equality implies). runs.session_id had none before migration 00016 (runs_one_running
// is partial: the running runs).
func TestEveryForeignKeyHasAnIndex(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	rows, err := s.pool.Query(ctx, `
		SELECT c.conrelid::regclass::text, c.conname,
			(SELECT string_agg(a.attname, ',' ORDER BY k.n) FROM unnest(c.conkey) WITH ORDINALITY k(attnum, n)
				JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum),
			EXISTS (SELECT 1 FROM pg_index i
				WHERE i.indrelid = c.conrelid
				AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] = c.conkey
				AND (i.indpred IS NULL OR cardinality(c.conkey) = 1 AND
					pg_get_expr(i.indpred, i.indrelid) = (SELECT '(' || a.attname || ' IS NOT NULL)' FROM pg_attribute a
						WHERE a.attrelid = c.conrelid AND a.attnum = c.conkey[1])))
		FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
		WHERE c.contype = 'f' AND n.nspname = current_schema()
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	type fk struct {
		table, name, cols string
		indexed           bool
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fk, error) {
		var k fk
		err := r.Scan(&k.table, &k.name, &k.cols, &k.indexed)
		return k, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 10 {
		t.Fatalf("found %d foreign keys: is the query right? %v", len(keys), keys)
	}
	for _, k := range keys {
		if !k.indexed {
			t.Errorf("%s.%s (%s): no index leads with its columns", k.table, k.name, k.cols)
		}
	}
}
