package main

import (
	"context"
	"fmt"
	"io"
	"net/url"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/postgres"
	"github.com/parleyhq/parley/store/sqlite"
)

// database is the opened store with what the commands need besides the Store interface.
type database struct {
	parley.Store
	// Name says which database this is, with no password in it, for logs and errors.
	Name    string
	Ping    func(ctx context.Context) error
	Migrate func(ctx context.Context, command string, out io.Writer) error
}

// openDatabase opens PostgreSQL when databaseURL is set and the SQLite file path otherwise,
// applying pending migrations when migrate is true.
func openDatabase(ctx context.Context, path, databaseURL string, migrate bool) (*database, error) {
	if databaseURL != "" {
		name := "postgres " + redactURL(databaseURL)
		var opts []postgres.Option
		if !migrate {
			opts = append(opts, postgres.WithoutMigrate())
		}
		st, err := postgres.Open(ctx, databaseURL, opts...)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", name, err)
		}
		return &database{Store: st, Name: name, Ping: st.Ping,
			Migrate: func(ctx context.Context, command string, out io.Writer) error {
				db := st.DB()
				defer db.Close()
				return postgres.Migrate(ctx, db, command, out)
			}}, nil
	}
	name := "sqlite " + path
	var opts []sqlite.Option
	if !migrate {
		opts = append(opts, sqlite.WithoutMigrate())
	}
	st, err := sqlite.Open(ctx, path, opts...)
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", name, err)
	}
	return &database{Store: st, Name: name, Ping: st.Ping,
		Migrate: func(ctx context.Context, command string, out io.Writer) error {
			return sqlite.Migrate(ctx, st.DB(), command, out)
		}}, nil
}

// redactURL returns a database URL without its password.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(database URL)"
	}
	return u.Redacted()
}
