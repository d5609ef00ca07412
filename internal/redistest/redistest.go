// Package redistest gives tests a real Redis server.
//
// The server is PARLEY_TEST_REDIS_URL, or redis://127.0.0.1:6379/0 by default. Where none answers,
// tests skip with a message saying so, unless PARLEY_TEST_REQUIRE_REDIS=1 (as CI sets it), where
// they fail. Each test gets its own key prefix, and its keys are deleted when it ends.
package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is the server tests use when PARLEY_TEST_REDIS_URL is not set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL returns the test server's URL.
func URL() string {
	if u := os.Getenv("PARLEY_TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Client returns a client of the test server and a key prefix private to t. It skips t, or fails
// it where Redis is required, when no server answers.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("PARLEY_TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		if os.Getenv("PARLEY_TEST_REQUIRE_REDIS") == "1" {
			t.Fatalf("Redis is required (PARLEY_TEST_REQUIRE_REDIS=1) but %s does not answer: %v", opts.Addr, err)
		}
		t.Skipf("skipping: no Redis answers at %s (set PARLEY_TEST_REDIS_URL): %v", opts.Addr, err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	prefix := "parley-test:" + hex.EncodeToString(b) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}
