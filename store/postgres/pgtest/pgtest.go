// Package pgtest gives tests a private schema on a real PostgreSQL server.
//
// The server is PARLEY_TEST_POSTGRES_URL, or postgres://127.0.0.1:5432/test?sslmode=disable by
// default. Where none answers, tests skip with a message saying so, unless
// PARLEY_TEST_REQUIRE_POSTGRES=1 (as CI sets it), where they fail.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server tests use when PARLEY_TEST_POSTGRES_URL is not set.
const DefaultURL = "postgres://127.0.0.1:5432/test?sslmode=disable"

// ServerURL returns the URL of the test server, without a schema.
func ServerURL() string {
	if u := os.Getenv("PARLEY_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Schema creates an empty schema for t, dropped with everything in it when t ends, and returns
// a URL whose connections use it (search_path). It skips t, or fails it where PostgreSQL is
// required, when no server answers.
func Schema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := ServerURL()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		if os.Getenv("PARLEY_TEST_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL is required (PARLEY_TEST_REQUIRE_POSTGRES=1) but %s does not answer: %v", redact(base), err)
		}
		t.Skipf("skipping: no PostgreSQL answers at %s (set PARLEY_TEST_POSTGRES_URL): %v", redact(base), err)
	}
	defer conn.Close(ctx)
	b := make([]byte, 6)
	rand.Read(b)
	schema := "parley_test_" + hex.EncodeToString(b)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("creating schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("PARLEY_TEST_POSTGRES_URL: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
