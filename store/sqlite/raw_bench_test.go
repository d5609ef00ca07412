package sqlite

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/storetest"
	"testing"
)

// BenchmarkRawScan10k is the limit for BenchmarkHistory10k: the same query through the same
// driver, every column scanned into sql.RawBytes, nothing decoded.
func BenchmarkRawScan10k(b *testing.B) {
	benchRaw(b, messageCols, strings.Count(messageCols, ",")+1)
}

// BenchmarkRawScanModelCols10k is the limit for BenchmarkModelContext10k.
func BenchmarkRawScanModelCols10k(b *testing.B) {
	benchRaw(b, `role, content, name, tool_calls, tool_call_id, reasoning`, 6)
}

func benchRaw(b *testing.B, cols string, ncol int) {
	s, _ := history10k(b)
	defer s.Close()
	sid := onlySession(b, s)
	ctx := context.Background()
	for b.Loop() {
		rows, err := s.DB().QueryContext(ctx, `SELECT `+cols+` FROM messages WHERE session_id = ? ORDER BY seq`, sid)
		if err != nil {
			b.Fatal(err)
		}
		cols := make([]sql.RawBytes, ncol)
		ptrs := make([]any, ncol)
		for i := range cols {
			ptrs[i] = &cols[i]
		}
		n := 0
		for rows.Next() {
			if err := rows.Scan(ptrs...); err != nil {
				b.Fatal(err)
			}
			n++
		}
		rows.Close()
		if n != 10_000 {
			b.Fatal(n)
		}
	}
}

// BenchmarkRawInsert1 and BenchmarkRawInsert100 are the limits for the append benchmarks: the
// same rows inserted with a prepared statement through the same driver and pragmas, 1 or 100 per
// transaction, with none of the store's work (no seq reservation, usage totals or encoding).
func BenchmarkRawInsert1(b *testing.B)   { benchRawInsert(b, 1) }
func BenchmarkRawInsert100(b *testing.B) { benchRawInsert(b, 100) }

func benchRawInsert(b *testing.B, batch int) {
	s := openTemp(b)
	defer s.Close()
	sid := storetest.BenchSession(b, s, "bench")
	ctx := context.Background()
	seq := 0
	for b.Loop() {
		tx, err := s.DB().BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO messages (id, session_id, seq, role, content, run_id, created_at) VALUES (?, ?, ?, 'user', ?, 'run', ?)`)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < batch; i++ {
			seq++
			if _, err := stmt.ExecContext(ctx, parley.NewID(), sid, seq, "message: a typical short chat line", time.Now().UnixMicro()); err != nil {
				b.Fatal(err)
			}
		}
		stmt.Close()
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRawPageAll100k is the limit for BenchmarkPageAll100k: the same keyset query, rows
// scanned into sql.RawBytes.
func BenchmarkRawPageAll100k(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	seedSessions(b, s, "bench", 100_000)
	ctx := context.Background()
	pages := 0
	for b.Loop() {
		var upd int64 = 1 << 62
		id, seen := "~", 0
		for {
			rows, err := s.DB().QueryContext(ctx, `SELECT `+sessionCols+` FROM sessions WHERE owner = ?
				AND (updated_at, id) < (?, ?) ORDER BY updated_at DESC, id DESC LIMIT 101`, "bench", upd, id)
			if err != nil {
				b.Fatal(err)
			}
			cols := make([]sql.RawBytes, 10)
			ptrs := make([]any, 10)
			for i := range cols {
				ptrs[i] = &cols[i]
			}
			n := 0
			for rows.Next() {
				if err := rows.Scan(ptrs...); err != nil {
					b.Fatal(err)
				}
				if n++; n == 100 {
					id = string(cols[0])
					upd, _ = strconv.ParseInt(string(cols[4]), 10, 64)
				}
			}
			rows.Close()
			pages++
			seen += min(n, 100)
			if n <= 100 {
				break
			}
		}
		if seen != 100_000 {
			b.Fatal(seen)
		}
	}
	b.ReportMetric(float64(pages)/b.Elapsed().Seconds(), "pages/s")
}
