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
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// BenchmarkMergedOneRow measures what one merged write costs the backend, sent as its merged
// statement of arrays (unnest) and as that statement's one-row twin (onerow.go): the begin of a
// new session's run and a write of a row of events, each in a transaction of its own ([BEGIN,
// the merge's settings, the statement, ROLLBACK], one round trip), on one connection whose plans
// were first made by batches of 1 to 30 writes, as under load. It reports the backend's CPU per
// statement (/proc, Linux).
//
//	PARLEY_TEST_REQUIRE_POSTGRES=1 go test -run '^$' -bench MergedOneRow -count 3 ./store/postgres
func BenchmarkMergedOneRow(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	ctx := context.Background()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	stat := fmt.Sprintf("/proc/%d/stat", conn.Conn().PgConn().PID())
	begin := func() *beginPart {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Owner: "bench", Title: "bench", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "bench", Model: "m", Instance: "bench",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Tell me something, please."),
			RunID: run.ID, CreatedAt: now}
		p, err := newBeginPart(&parley.RunBegin{NewSession: sess, Reserve: 1024, Run: run, Messages: []*parley.Message{user}})
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	begins := func(n int) []any {
		ps := make([]*beginPart, n)
		for i := range ps {
			ps[i] = begin()
		}
		return beginArgs(ps)
	}
	// The events' rows go to sessions committed here, at numbers no row has.
	var sessions []string
	for range 30 {
		p := begin()
		if _, err := conn.Exec(ctx, mergedBeginSQL, beginArgs([]*beginPart{p})...); err != nil {
			b.Fatal(err)
		}
		sessions = append(sessions, p.b.NewSession.ID)
	}
	data := []byte(`[{"type":"chunk","content":"` + strings.Repeat("x", 1500) + `"}]`)
	seq := int64(0)
	events := func(n int) []any {
		sid, fs, ls, d := make([]string, n), make([]int64, n), make([]int64, n), make([][]byte, n)
		at, finish, rid, inst := make([]time.Time, n), make([]string, n), make([]pgtype.Text, n), make([]pgtype.Text, n)
		for i := range n {
			seq += 2
			sid[i], fs[i], ls[i], d[i], at[i] = sessions[i%len(sessions)], seq, seq+1, data, time.Now().UTC()
		}
		return []any{sid, fs, ls, d, at, finish, rid, inst}
	}
	send := func(q string, args []any) {
		batch := &pgx.Batch{}
		batch.Queue("BEGIN")
		batch.Queue(mergeSettings)
		batch.Queue(q, args...)
		batch.Queue("ROLLBACK")
		if err := conn.SendBatch(ctx, batch).Close(); err != nil {
			b.Fatal(err)
		}
	}
	for i := range 40 { // the plans, as batches of 1 to 30 make them
		n := 1 + i*7%30
		send(mergedBeginSQL, begins(n))
		send(mergedEndsSQL, events(n))
	}
	// The begin's own statement (beginNewSessionOne), as a lone begin on a quiet writer sends
	// it: without the merge's settings.
	own := func() []any {
		p := begin()
		links := rowcodec.LinkParents(p.b.Messages, "")
		sessArgs, runArgs := newSessionArgs(p.b, p.tools, 1, links)
		return append(append(messageArgs(p.b.Messages[0], p.cols[0], p.b.NewSession.ID, 1, nullStr(links.Parents[0])), sessArgs...), runArgs...)
	}
	b.Run("begin/own", func(b *testing.B) {
		cpu0 := procCPU(stat)
		for range b.N {
			batch := &pgx.Batch{}
			batch.Queue("BEGIN")
			batch.Queue(beginNewSessionOne, own()...)
			batch.Queue("ROLLBACK")
			if err := conn.SendBatch(ctx, batch).Close(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(procCPU(stat)-cpu0)/float64(time.Microsecond)/float64(b.N), "pg-cpu-µs/op")
	})
	for _, w := range []struct {
		name string
		sql  string
		args func(int) []any
	}{{"begin", mergedBeginSQL, begins}, {"events", mergedEndsSQL, events}} {
		for _, shape := range []string{"arrays", "one-row"} {
			b.Run(w.name+"/"+shape, func(b *testing.B) {
				cpu0 := procCPU(stat)
				for range b.N {
					q, args := w.sql, w.args(1)
					if shape == "one-row" {
						var err error
						if q, args, err = mergedStatement(q, args); err != nil {
							b.Fatal(err)
						}
					}
					send(q, args)
				}
				b.ReportMetric(float64(procCPU(stat)-cpu0)/float64(time.Microsecond)/float64(b.N), "pg-cpu-µs/op")
			})
		}
	}
}
