package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/store/postgres/pgtest"
	"github.com/parleyhq/parley/store/sqlite"
)

// envOf is a getenv over a map.
func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// keysIn lists the keys of the SQLite file db.
func keysIn(t *testing.T, db string) []parley.APIKey {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys, err := st.ListAPIKeys(context.Background(), "", 100)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// PARLEY_<FLAG> variables are serve's settings: only the database ones reach keys and migrate.
func TestEnvironmentReachesOnlyServeAndTheDatabase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "k.db")
	env := map[string]string{
		"PARLEY_DB":         db,
		"PARLEY_ADMIN":      "true",
		"PARLEY_USER":       "mallory",
		"PARLEY_NAME":       "from the environment",
		"PARLEY_EXPIRES_IN": "1h",
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"keys", "create", "--user", "alice"}, envOf(env), &out, &errOut); err != nil {
		t.Fatalf("keys create: %v (%s)", err, errOut.String())
	}
	keys := keysIn(t, db) // PARLEY_DB did apply
	if len(keys) != 1 {
		t.Fatalf("keys: %+v", keys)
	}
	if k := keys[0]; k.Admin || k.User != "alice" || k.Name != "" || k.ExpiresAt != nil {
		t.Fatalf("the environment set a flag of keys create: %+v", k)
	}
	// keys list --user is not PARLEY_USER either: the listing is everyone's.
	out.Reset()
	if err := run(context.Background(), []string{"keys", "list"}, envOf(env), &out, &errOut); err != nil || !strings.Contains(out.String(), "alice") {
		t.Fatalf("keys list: %v %q", err, out.String())
	}

	// A config file: its db applies to keys, its other keys (serve's, and admin) do not.
	file := filepath.Join(dir, "parley.yaml")
	db2 := filepath.Join(dir, "k2.db")
	if err := os.WriteFile(file, []byte("addr: 0.0.0.0:9000\ndb: "+db2+"\nadmin: true\nmodel: mock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"keys", "create", "--user", "bob"}, envOf(map[string]string{"PARLEY_CONFIG": file}), &out, &errOut); err != nil {
		t.Fatalf("keys create with serve's config file: %v", err)
	}
	if keys := keysIn(t, db2); len(keys) != 1 || keys[0].User != "bob" || keys[0].Admin {
		t.Fatalf("keys in the config file's database: %+v", keys)
	}

	// migrate reads PARLEY_DB too, and mockllm takes nothing from the environment.
	db3 := filepath.Join(dir, "m.db")
	out.Reset()
	if err := run(context.Background(), []string{"migrate", "up"}, envOf(map[string]string{"PARLEY_DB": db3}), &out, &errOut); err != nil || !strings.Contains(out.String(), db3) {
		t.Fatalf("migrate with PARLEY_DB: %v %q", err, out.String())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		errs <- run(ctx, []string{"mockllm", "--addr", "127.0.0.1:0"}, envOf(map[string]string{"PARLEY_TOKEN_DELAY": "soon", "PARLEY_ADDR": "bad"}), &out, &bytes.Buffer{})
	}()
	select {
	case err := <-errs:
		t.Fatalf("mockllm read the environment: %v", err)
	case <-time.After(300 * time.Millisecond): // still serving: it did not read the bad values
	}
	cancel()
	<-errs
}

// serve still takes every flag from the environment.
func TestServeReadsTheEnvironment(t *testing.T) {
	var c config
	fs := flagSet("serve", &bytes.Buffer{}, "")
	serveFlags(fs, &c)
	if err := parseConfig(fs, nil, envOf(map[string]string{"PARLEY_MAX_RUNS": "7", "PARLEY_DB": "x.db"}), nil); err != nil {
		t.Fatal(err)
	}
	if c.MaxRuns != 7 || c.DB != "x.db" {
		t.Fatalf("serve's settings from the environment: %+v", c)
	}
}

// `<command> -h` prints that command's own flags on stdout and succeeds.
func TestHelpShowsTheCommandsOwnFlags(t *testing.T) {
	cases := []struct {
		args       []string
		has, lacks []string
	}{
		{[]string{"keys", "list", "-h"}, []string{"keys list", "-user", "-db", "-database-url"}, []string{"-admin", "-expires-in", "-name"}},
		{[]string{"keys", "create", "--help"}, []string{"keys create", "-user", "-name", "-admin", "-expires-in", "-db"}, nil},
		{[]string{"keys", "revoke", "-h"}, []string{"keys revoke", "-db"}, []string{"-user", "-admin", "-name"}},
		{[]string{"keys", "-h"}, []string{"create", "list", "revoke"}, nil},
		{[]string{"migrate", "-h"}, []string{"migrate", "-db", "PARLEY_DB"}, []string{"-addr"}},
		{[]string{"mockllm", "-h"}, []string{"mockllm", "-token-delay", "-chunks"}, []string{"-config", "-db"}},
		{[]string{"serve", "-h"}, []string{"serve", "-addr", "-max-runs", "PARLEY_<FLAG>"}, nil},
		{[]string{"help"}, []string{"Commands:"}, nil},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		if err := run(context.Background(), c.args, envOf(nil), &out, &errOut); err != nil {
			t.Errorf("%v: %v, want success", c.args, err)
			continue
		}
		for _, s := range c.has {
			if !strings.Contains(out.String(), s) {
				t.Errorf("%v: help lacks %q:\n%s", c.args, s, out.String())
			}
		}
		for _, s := range c.lacks {
			if strings.Contains(out.String(), s) {
				t.Errorf("%v: help shows %q, another command's flag:\n%s", c.args, s, out.String())
			}
		}
	}
	// A wrong flag is still an error.
	if err := run(context.Background(), []string{"keys", "list", "--admin"}, envOf(nil), &bytes.Buffer{}, &bytes.Buffer{}); err == nil {
		t.Fatal("keys list --admin accepted")
	}
}

// keys create checks --user and --name as the API does, before it touches the database; keys list
// shows names stored earlier (before the check) escaped, so they cannot act on the terminal.
func TestKeysNamesAreCheckedAndListedSafely(t *testing.T) {
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			ctx := context.Background()
			var dbArgs []string
			var st interface {
				parley.KeyStore
				Close() error
			}
			if store == "sqlite" {
				db := filepath.Join(t.TempDir(), "k.db")
				dbArgs = []string{"--db", db}
				s, err := sqlite.Open(ctx, db)
				if err != nil {
					t.Fatal(err)
				}
				st = s
			} else {
				url := pgtest.Schema(t)
				dbArgs = []string{"--database-url", url}
				d, err := openDatabase(ctx, "", url, true)
				if err != nil {
					t.Fatal(err)
				}
				st = d.Store.(interface {
					parley.KeyStore
					Close() error
				})
			}
			defer st.Close()
			for _, bad := range []struct {
				args   []string
				reason string
			}{
				{[]string{"--user", "al\x00ice"}, "--user: the NUL character"},
				{[]string{"--user", "\x1b[31malice"}, "--user: a control character"},
				{[]string{"--user", "alice", "--name", "lap\x00top"}, "--name: the NUL character"},
				{[]string{"--user", "alice", "--name", "\x1b]0;pwned\x07"}, "--name: a control character"},
				{[]string{"--user", "alice", "--name", "lap\u202etop"}, "--name: a bidirectional override"},
			} {
				args := append(append([]string{"keys", "create"}, dbArgs...), bad.args...)
				err := run(ctx, args, envOf(nil), &bytes.Buffer{}, &bytes.Buffer{})
				if err == nil || !strings.Contains(err.Error(), bad.reason) {
					t.Errorf("%q: %v, want %q", bad.args, err, bad.reason)
				}
			}
			if keys, err := st.ListAPIKeys(ctx, "", 10); err != nil || len(keys) != 0 {
				t.Fatalf("refused commands stored keys: %+v %v", keys, err)
			}
			// A key stored before names were checked, written here directly (both stores take every
			// control character but NUL).
			_, k := auth.NewKey("eve\u202e", "\x1b[2J\x1b[31mlaptop\u2066", false, false, time.Now(), 0)
			if err := st.CreateAPIKey(ctx, k); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := run(ctx, append([]string{"keys", "list"}, dbArgs...), envOf(nil), &out, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			if strings.ContainsAny(out.String(), "\x1b\u202e\u2066") || !strings.Contains(out.String(), `\x1b[2J\x1b[31mlaptop\u2066`) || !strings.Contains(out.String(), `eve\u202e`) {
				t.Fatalf("keys list printed %q", out.String())
			}
		})
	}
}
