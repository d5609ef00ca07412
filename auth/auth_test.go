package auth

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

// countingStore counts key lookups.
type countingStore struct {
	parley.Store
	lookups int
}

func (c *countingStore) APIKeyByHash(ctx context.Context, h []byte) (*parley.APIKey, error) {
	c.lookups++
	return c.Store.APIKeyByHash(ctx, h)
}

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Unix(1_700_000_000, 0).UTC()
	cs := &countingStore{Store: st}
	a := &Authenticator{Store: cs, Now: func() time.Time { return now }, CacheTTL: time.Minute}

	secret, k := NewKey("alice", "laptop", true, false, now, 0)
	if !strings.HasPrefix(secret, KeyPrefix) || !WellFormed(secret) || k.Prefix != secret[:10] || string(k.Hash) != string(Hash(secret)) {
		t.Fatalf("NewKey = %q, %+v", secret, k)
	}
	if strings.Contains(string(k.Hash), secret) {
		t.Fatal("the secret is in the stored record")
	}
	if err := st.CreateAPIKey(ctx, k); err != nil {
		t.Fatal(err)
	}
	guestSecret, g := NewKey("guest-x", "", false, true, now, time.Hour)
	if !strings.HasPrefix(guestSecret, GuestPrefix) || g.ExpiresAt == nil {
		t.Fatalf("guest key = %q, %+v", guestSecret, g)
	}
	if err := st.CreateAPIKey(ctx, g); err != nil {
		t.Fatal(err)
	}

	id, err := a.Authenticate(ctx, secret)
	if err != nil || id != (Identity{User: "alice", KeyID: k.ID, Admin: true}) {
		t.Fatalf("Authenticate = %+v, %v", id, err)
	}
	// The second request is served from the cache, and the first recorded the key's use.
	if _, err := a.Authenticate(ctx, secret); err != nil || cs.lookups != 1 {
		t.Fatalf("second Authenticate: %v, %d lookups", err, cs.lookups)
	}
	if got, _ := st.APIKeyByHash(ctx, k.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(now) {
		t.Errorf("last use not recorded: %+v", got.LastUsedAt)
	}

	for name, s := range map[string]string{
		"malformed":      "hello",
		"wrong prefix":   "sk_" + secret[3:],
		"bad characters": secret[:20] + "!!" + secret[22:],
		"unknown":        KeyPrefix + strings.Repeat("A", 43),
	} {
		if _, err := a.Authenticate(ctx, s); err != ErrBadCredentials {
			t.Errorf("%s: %v, want ErrBadCredentials", name, err)
		}
	}
	if _, err := a.Authenticate(ctx, ""); err != ErrNoCredentials {
		t.Errorf("no secret: %v", err)
	}
	// Malformed secrets never reach the store.
	if cs.lookups != 2 {
		t.Errorf("%d lookups, want 2 (alice, the unknown well-formed key)", cs.lookups)
	}

	gid, err := a.Authenticate(ctx, guestSecret)
	if err != nil || !gid.Guest || gid.User != "guest-x" {
		t.Fatalf("guest: %+v, %v", gid, err)
	}
	// A guest token expires.
	now = now.Add(2 * time.Hour)
	if _, err := a.Authenticate(ctx, guestSecret); err != ErrBadCredentials {
		t.Errorf("expired guest token: %v", err)
	}

	// Revocation through the Authenticator holds at once, cache or not.
	if _, err := a.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Revoke(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, secret); err != ErrBadCredentials {
		t.Errorf("revoked key: %v", err)
	}
}

func TestRevokedElsewhereWithinTTL(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Unix(1_700_000_000, 0).UTC()
	a := &Authenticator{Store: st, Now: func() time.Time { return now }, CacheTTL: 30 * time.Second}
	secret, k := NewKey("bob", "", false, false, now, 0)
	st.CreateAPIKey(ctx, k)
	if _, err := a.Authenticate(ctx, secret); err != nil {
		t.Fatal(err)
	}
	// Another instance revokes it in the store: this one notices once its cache entry is stale.
	if _, err := st.RevokeAPIKey(ctx, k.ID, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(30 * time.Second)
	if _, err := a.Authenticate(ctx, secret); err != ErrBadCredentials {
		t.Fatalf("after the cache TTL: %v, want ErrBadCredentials", err)
	}
}

func TestCheckUser(t *testing.T) {
	for u, ok := range map[string]bool{"alice": true, "Ünïcode name": true, "": false, "a\nb": false, "\x7f": false,
		"guest-1": false, strings.Repeat("x", 129): false, "\xff": false} {
		if err := CheckUser(u); (err == nil) != ok {
			t.Errorf("CheckUser(%q) = %v, want ok=%v", u, err, ok)
		}
	}
}
