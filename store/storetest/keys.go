package storetest

import (
	"bytes"
	"crypto/sha256"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func newKey(user, secret string, at time.Time) *parley.APIKey {
	h := sha256.Sum256([]byte(secret))
	return &parley.APIKey{ID: parley.NewID(), User: user, Name: "n-" + secret, Prefix: secret[:4], Hash: h[:], CreatedAt: at}
}

func testAPIKeys(t *testing.T, s parley.Store) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	a := newKey("alice", "secret-a", now)
	a.Admin = true
	b := newKey("bob", "secret-b", now.Add(time.Second))
	g := newKey("guest-1", "secret-g", now.Add(2*time.Second))
	g.Guest = true
	exp := now.Add(time.Hour)
	g.ExpiresAt = &exp
	for _, k := range []*parley.APIKey{a, b, g} {
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	// The same secret twice is a conflict; a key without a hash is invalid.
	if err := s.CreateAPIKey(ctx, newKey("carol", "secret-a", now)); parley.CodeOf(err) != parley.ECConflict {
		t.Errorf("duplicate hash: %v, want conflict", err)
	}
	if err := s.CreateAPIKey(ctx, &parley.APIKey{ID: "x", User: "u", CreatedAt: now}); parley.CodeOf(err) != parley.ECInvalid {
		t.Errorf("no hash: %v, want invalid", err)
	}

	got, err := s.APIKeyByHash(ctx, a.Hash)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != a.ID || got.User != "alice" || !got.Admin || got.Guest || got.Name != a.Name || got.Prefix != "secr" ||
		!bytes.Equal(got.Hash, a.Hash) || !got.CreatedAt.Equal(now) || got.RevokedAt != nil || got.ExpiresAt != nil {
		t.Errorf("APIKeyByHash = %+v, want %+v", got, a)
	}
	gg, err := s.APIKeyByHash(ctx, g.Hash)
	if err != nil || !gg.Guest || gg.ExpiresAt == nil || !gg.ExpiresAt.Equal(exp) {
		t.Errorf("guest key = %+v, %v", gg, err)
	}
	other := sha256.Sum256([]byte("nobody"))
	if _, err := s.APIKeyByHash(ctx, other[:]); parley.CodeOf(err) != parley.ECNotFound {
		t.Errorf("unknown hash: %v, want not found", err)
	}

	// Listing leaves guest tokens out, and filters by user.
	all, err := s.ListAPIKeys(ctx, "", 100)
	if err != nil || len(all) != 2 || all[0].ID != a.ID || all[1].ID != b.ID {
		t.Errorf("ListAPIKeys(all) = %+v, %v", all, err)
	}
	bobs, err := s.ListAPIKeys(ctx, "bob", 100)
	if err != nil || len(bobs) != 1 || bobs[0].ID != b.ID {
		t.Errorf("ListAPIKeys(bob) = %+v, %v", bobs, err)
	}
	if one, err := s.ListAPIKeys(ctx, "", 1); err != nil || len(one) != 1 {
		t.Errorf("ListAPIKeys(limit 1) = %d keys, %v", len(one), err)
	}

	used := now.Add(time.Minute)
	if err := s.TouchAPIKey(ctx, b.ID, used); err != nil {
		t.Fatal(err)
	}
	rev, err := s.RevokeAPIKey(ctx, b.ID, now.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if rev.RevokedAt == nil || !rev.RevokedAt.Equal(now.Add(2*time.Minute)) || rev.LastUsedAt == nil || !rev.LastUsedAt.Equal(used) {
		t.Errorf("revoked = %+v", rev)
	}
	if rev.Usable(now.Add(3 * time.Minute)) {
		t.Error("a revoked key is usable")
	}
	// Revoking again keeps the first time.
	again, err := s.RevokeAPIKey(ctx, b.ID, now.Add(time.Hour))
	if err != nil || !again.RevokedAt.Equal(*rev.RevokedAt) {
		t.Errorf("second revoke = %+v, %v", again, err)
	}
	if _, err := s.RevokeAPIKey(ctx, "no-such-key", now); parley.CodeOf(err) != parley.ECNotFound {
		t.Errorf("revoke unknown: %v, want not found", err)
	}
	if k, _ := s.APIKeyByHash(ctx, b.Hash); k == nil || k.RevokedAt == nil {
		t.Errorf("revocation not stored: %+v", k)
	}
}

func testAPIKeyExpiry(t *testing.T, s parley.Store) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	old := newKey("guest-old", "secret-old", now.Add(-2*time.Hour))
	past := now.Add(-time.Hour)
	old.ExpiresAt, old.Guest = &past, true
	fresh := newKey("guest-new", "secret-new", now)
	future := now.Add(time.Hour)
	fresh.ExpiresAt, fresh.Guest = &future, true
	forever := newKey("alice", "secret-forever", now)
	for _, k := range []*parley.APIKey{old, fresh, forever} {
		if err := s.CreateAPIKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if old.Usable(now) || !fresh.Usable(now) || !forever.Usable(now) {
		t.Error("Usable disagrees with the expiry times")
	}
	n, err := s.DeleteExpiredAPIKeys(ctx, now)
	if err != nil || n != 1 {
		t.Fatalf("DeleteExpiredAPIKeys = %d, %v; want 1", n, err)
	}
	if _, err := s.APIKeyByHash(ctx, old.Hash); parley.CodeOf(err) != parley.ECNotFound {
		t.Errorf("expired key still there: %v", err)
	}
	for _, k := range []*parley.APIKey{fresh, forever} {
		if _, err := s.APIKeyByHash(ctx, k.Hash); err != nil {
			t.Errorf("key %s deleted: %v", k.User, err)
		}
	}
}
