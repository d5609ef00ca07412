// Package migrate runs a store's embedded goose migrations, the same way for every dialect.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
)

// Run applies ("up"), reverts the newest ("down") or lists ("status") the migrations in fsys,
// writing what it did to out. db stays open: it belongs to the caller.
func Run(ctx context.Context, dialect goose.Dialect, db *sql.DB, fsys fs.FS, command string, out io.Writer) error {
	p, err := goose.NewProvider(dialect, db, fsys)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	switch command {
	case "up":
		res, err := p.Up(ctx)
		for _, r := range res {
			fmt.Fprintf(out, "applied %d %s (%s)\n", r.Source.Version, r.Source.Path, r.Duration.Round(time.Microsecond))
		}
		if err != nil {
			return fmt.Errorf("migrating up: %w", err)
		}
		if len(res) == 0 {
			fmt.Fprintln(out, "no pending migrations")
		}
	case "down":
		r, err := p.Down(ctx)
		if err != nil {
			return fmt.Errorf("migrating down: %w", err)
		}
		fmt.Fprintf(out, "reverted %d %s\n", r.Source.Version, r.Source.Path)
	case "status":
		st, err := p.Status(ctx)
		if err != nil {
			return fmt.Errorf("migration status: %w", err)
		}
		for _, m := range st {
			state := "pending"
			if m.State == goose.StateApplied {
				state = "applied " + m.AppliedAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(out, "%05d %-30s %s\n", m.Source.Version, m.Source.Path, state)
		}
	default:
		return fmt.Errorf("migrate: unknown command %q (want up, down or status)", command)
	}
	return nil
}
