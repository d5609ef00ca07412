package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/parleyhq/parley/store/sqlite"
)

// runBackup copies a SQLite database to a new file with VACUUM INTO: online (the server may be
// running; the copy is one consistent snapshot, taken in a read transaction that does not block
// its writers), compacted, and checked before it is given its name.
func runBackup(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flagSet("backup", stderr, "Copies the SQLite database to a new file, online: parley backup [--db FILE] DEST\n"+
		"DEST must not exist. For PostgreSQL (--database-url) use pg_dump instead.\n"+databaseNote)
	db, databaseURL := databaseFlags(fs)
	if err := parsed(fs, parseFlags(fs, args, getenv, nil, databaseFlag), stdout); err != nil {
		return err
	}
	if *databaseURL != "" {
		return errors.New("backup: this copies a SQLite file; back up PostgreSQL with pg_dump (see README, Running it in production)")
	}
	if fs.NArg() != 1 {
		return errors.New("backup: name one destination file: parley backup [--db FILE] DEST")
	}
	dest := fs.Arg(0)
	if _, err := os.Stat(*db); err != nil {
		return fmt.Errorf("backup: the database %s: %w", *db, err)
	}
	if _, err := os.Stat(dest); err == nil {
		return fmt.Errorf("backup: %s already exists; name a new file", dest)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("backup: %w", err)
	}
	st, err := sqlite.Open(ctx, *db, sqlite.WithoutMigrate())
	if err != nil {
		return err
	}
	defer st.Close()
	// Written beside the destination under another name, and renamed once checked: a backup
	// cut short never looks like a good one.
	partial := filepath.Join(filepath.Dir(dest), "."+filepath.Base(dest)+".partial")
	os.Remove(partial)
	start := time.Now()
	if _, err := st.DB().ExecContext(ctx, "VACUUM INTO ?", partial); err != nil {
		os.Remove(partial)
		return fmt.Errorf("backup: VACUUM INTO: %w", err)
	}
	if err := checkSQLite(ctx, partial); err != nil {
		os.Remove(partial)
		return fmt.Errorf("backup: the copy failed its check: %w", err)
	}
	if err := os.Rename(partial, dest); err != nil {
		os.Remove(partial)
		return fmt.Errorf("backup: %w", err)
	}
	info, err := os.Stat(dest)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	fmt.Fprintf(stdout, "backed up %s to %s (%d bytes, %s)\n", *db, dest, info.Size(), time.Since(start).Round(time.Millisecond))
	return nil
}

// checkSQLite runs SQLite's quick_check on the file at path, read-only.
func checkSQLite(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		return err
	}
	defer db.Close()
	var res string
	if err := db.QueryRowContext(ctx, "PRAGMA quick_check").Scan(&res); err != nil {
		return err
	}
	if res != "ok" {
		return fmt.Errorf("quick_check: %s", res)
	}
	return nil
}

// runHealthcheck GETs a URL (the server's /readyz by default) and succeeds on a 2xx: the probe of
// a container image without a shell or curl.
func runHealthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flagSet("healthcheck", stderr, "Checks a running server: succeeds when GET --url answers 2xx (for container health checks).")
	url := fs.String("url", "http://127.0.0.1:8080/readyz", "URL to GET")
	timeout := fs.Duration("timeout", 5*time.Second, "time limit of the check")
	if err := parsed(fs, parseFlags(fs, args, getenv, nil, nil), stdout); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", *url, nil)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("healthcheck: %s answered %s", *url, resp.Status)
	}
	fmt.Fprintf(stdout, "%s: %s\n", *url, resp.Status)
	return nil
}
