package sqlite

import (
	"context"
	"errors"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// BenchmarkDeleteSession deletes a session of one chat from a database that keeps 100,000 ended
// runs of other sessions (what the 72-hour retention keeps at a chat every 2.6 s), with
// runs_session (migration 00019) and without it (the index dropped: the cascade scans runs).
// Each deletion holds the one writer's lock, so its time is every other write's wait.
//
//	go test -run '^$' -bench DeleteSession -benchtime 200x ./store/sqlite
func BenchmarkDeleteSession(b *testing.B) {
	for _, c := range []struct {
		name  string
		index bool
	}{{"runs_session", true}, {"without index", false}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			s := openTemp(b)
			defer s.Close()
			if !c.index {
				if _, err := s.db.ExecContext(ctx, `DROP INDEX runs_session`); err != nil {
					b.Fatal(err)
				}
			}
			const runs = 100_000
			past := micros(time.Now().Add(-time.Hour))
			if _, err := s.db.ExecContext(ctx, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
				INSERT INTO sessions (id, owner, created_at, updated_at) SELECT 's' || i, 'u', ?2, ?2 FROM n`, runs, past); err != nil {
				b.Fatal(err)
			}
			if _, err := s.db.ExecContext(ctx, `INSERT INTO runs (id, session_id, owner, model, state, instance, lease_until, created_at, updated_at)
				SELECT 'r' || substr(id, 2), id, 'u', 'm', 'ended', 'i', ?1, ?1, ?1 FROM sessions`, past); err != nil {
				b.Fatal(err)
			}
			now := time.Now().UTC().Truncate(time.Microsecond)
			ids := make([]string, b.N)
			for i := range ids {
				f, err := beginChat(ctx, s, now)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.FinishRun(ctx, f); err != nil {
					b.Fatal(err)
				}
				ids[i] = f.SessionID
			}
			b.ResetTimer()
			for i := range b.N {
				if err := s.DeleteSession(ctx, ids[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			var n int
			if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM runs`).Scan(&n); err != nil || n != runs {
				b.Fatalf("%d runs left, %v; want the %d of the other sessions", n, err, runs)
			}
			if _, err := s.GetSession(ctx, ids[0]); !errors.Is(err, parley.ErrNotFound) {
				b.Fatalf("a deleted session reads back: %v", err)
			}
		})
	}
}
