package sqlite

import (
	"context"
	"database/sql"
	"strings"
	"testing"
)

// BenchmarkRawScan10k is the limit for BenchmarkHistory10k: the same query, every column scanned
// into sql.RawBytes, nothing decoded.
func BenchmarkRawScan10k(b *testing.B) {
	benchRaw(b, messageCols, strings.Count(messageCols, ",")+1)
}

func BenchmarkRawScanModelCols10k(b *testing.B) {
	benchRaw(b, `role, content, name, tool_calls, tool_call_id, reasoning`, 6)
}

func benchRaw(b *testing.B, cols string, ncol int) {
	s := history10k(b)
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		rows, err := s.DB().QueryContext(ctx, `SELECT `+cols+` FROM messages ORDER BY seq`)
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
