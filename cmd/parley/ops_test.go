package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `parley backup` copies the SQLite file of a running server (VACUUM INTO); a server started on
// the copy serves the same conversation. It refuses an existing destination, a missing database
// and PostgreSQL, and leaves no file behind when it fails.
func TestBackupOfARunningServer(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "live.db")
	url := startInProcess(t, nil, "--db", db, "--rate-limit", "off")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, url, map[string]any{"message": "What is 12*(3+4)?"})
	var session string
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		session = ev.Data.SessionID
		return ev.Event != "done"
	})
	resp.Body.Close()
	want := getMessages(t, url, session)
	if len(want) != 4 { // user, assistant with the tool call, tool, answer
		t.Fatalf("the chat stored %d messages, want 4", len(want))
	}

	dest := filepath.Join(dir, "backup.db")
	var out, errOut bytes.Buffer
	if err := run(ctx, []string{"backup", "--db", db, dest}, envOf(nil), &out, &errOut); err != nil {
		t.Fatalf("backup: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "backed up "+db+" to "+dest) {
		t.Errorf("backup said %q", out.String())
	}
	copyURL := startInProcess(t, nil, "--db", dest)
	got := getMessages(t, copyURL, session)
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if !bytes.Equal(wj, gj) {
		t.Errorf("the copy serves other messages:\n%s\nwant\n%s", gj, wj)
	}

	for _, c := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"backup", "--db", db, dest}, nil, "already exists"},
		{[]string{"backup", "--db", filepath.Join(dir, "none.db"), filepath.Join(dir, "b2.db")}, nil, "none.db"},
		{[]string{"backup", "--database-url", "postgres://x@127.0.0.1/test", filepath.Join(dir, "b3.db")}, nil, "pg_dump"},
		{[]string{"backup", filepath.Join(dir, "b4.db")}, map[string]string{"PARLEY_DATABASE_URL": "postgres://x@127.0.0.1/test"}, "pg_dump"},
		{[]string{"backup", "--db", db}, nil, "one destination"},
	} {
		err := run(ctx, c.args, envOf(c.env), &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error about %q", c.args, err, c.want)
		}
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		switch e.Name() {
		case "live.db", "live.db-wal", "live.db-shm", "backup.db", "backup.db-wal", "backup.db-shm":
		default:
			t.Errorf("a failed backup left %s behind", e.Name())
		}
	}
}

// `parley healthcheck` succeeds on a ready server and fails on one that answers 503 or none.
func TestHealthcheckCommand(t *testing.T) {
	url := startInProcess(t, nil)
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"healthcheck", "--url", url + "/readyz"}, envOf(nil), &out, &errOut); err != nil {
		t.Fatalf("healthcheck of a ready server: %v", err)
	}
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if err := run(context.Background(), []string{"healthcheck", "--url", down.URL + "/readyz"}, envOf(nil), &out, &errOut); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("healthcheck of a server answering 503: %v", err)
	}
	closed := down.URL
	down.Close()
	if err := run(context.Background(), []string{"healthcheck", "--url", closed + "/readyz", "--timeout", "2s"}, envOf(nil), &out, &errOut); err == nil {
		t.Errorf("healthcheck of a closed port succeeded")
	}
}
