package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// TestPostgresConnectionsAreReused runs 100 streamed chats on PostgreSQL and counts the
// connections the server opened: with a pool of 4, at most 4. A query cancelled mid-flight makes
// pgx close its connection (the next query then waits for a new one); a chat must not cause one.
// The server gets a database of its own, so that PostgreSQL's count of the sessions established to
// it (pg_stat_database.sessions) is the server's alone; it is read after the server stopped, when
// every backend has reported its statistics.
func TestPostgresConnectionsAreReused(t *testing.T) {
	const chats, workers, pool = 100, 4, 4
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := pgtest.ServerURL()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("PARLEY_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL is required (PARLEY_TEST_REQUIRE_POSTGRES=1) but does not answer: %v", err)
		}
		t.Skipf("skipping: no PostgreSQL answers (set PARLEY_TEST_POSTGRES_URL): %v", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	db := "parley_conns_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		admin.Close(ctx)
		t.Skipf("skipping: cannot create a database of the test's own: %v", err)
	}
	// Runs after the server has stopped (cleanups run last first).
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		defer admin.Close(ctx)
		defer admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		for {
			var n int
			if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", db).Scan(&n); err != nil {
				t.Errorf("pg_stat_activity: %v", err)
				return
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				t.Errorf("%d backends of the stopped server are still there", n)
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
		admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()")
		var sessions int64
		if err := admin.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = $1", db).Scan(&sessions); err != nil {
			t.Errorf("pg_stat_database: %v", err)
			return
		}
		t.Logf("%d chats opened %d PostgreSQL connections (pool of %d)", chats, sessions, pool)
		if sessions > pool {
			t.Errorf("%d chats opened %d PostgreSQL connections, want at most the pool's %d: connections are not reused", chats, sessions, pool)
		}
	})

	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	q := u.Query()
	q.Set("pool_max_conns", "4")
	u.RawQuery = q.Encode()
	srv := startInProcess(t, nil, "--database-url", u.String(), "--rate-limit", "off")

	var wg sync.WaitGroup
	errs := make(chan error, chats)
	work := make(chan int, chats)
	for i := range chats {
		work <- i
	}
	close(work)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				req, _ := http.NewRequestWithContext(ctx, "POST", srv+"/api/v1/chat/stream", strings.NewReader(`{"message":"Hello"}`))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err == nil && resp.StatusCode != 200 {
					resp.Body.Close()
					err = fmt.Errorf("chat/stream: %s", resp.Status)
				}
				if err != nil {
					errs <- err
					return
				}
				done := false
				err = scanSSE(resp.Body, func(ev sseEvent) bool {
					done = ev.Data.Type == "done"
					return !done
				})
				resp.Body.Close()
				if err == nil && !done {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// The server is up and answers (its pool is in use) before it is stopped by the cleanup.
	resp, err := http.Get(srv + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "ready") {
		t.Fatalf("readyz: %s", body)
	}
}
