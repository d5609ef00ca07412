package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/parleyhq/parley/metrics"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// TestServerRunsWriteARunsBeginningInOneTransaction: the server's run manager is given the store
// itself, so that a chat's session, event numbers, run record and user message are one write
// before the model is called, and the run's end one after (parley.RunBeginner). Given the
// database wrapper instead, the manager sees only parley.Store's methods and falls back to a
// write each, which is what the server did before (four commits waited for where one does).
func TestServerRunsWriteARunsBeginningInOneTransaction(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			ctx := context.Background()
			path, url := filepath.Join(t.TempDir(), "p.db"), ""
			if kind == "postgres" {
				url = pgtest.Schema(t)
			}
			db, err := openDatabase(ctx, path, url, true)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			c := config{}
			m := runs.NewManager(runOptions(&c, db, "test", slog.New(slog.NewTextHandler(io.Discard, nil)), metrics.New()))
			if !m.OneWrite() {
				t.Fatalf("the run manager of a %s server writes a run's beginning in several transactions", kind)
			}
		})
	}
}
