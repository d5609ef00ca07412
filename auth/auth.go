// Package auth makes and checks Parley's credentials: API keys ("pk_…") that an operator hands out,
// and guest tokens ("pg_…") that a server in guest mode gives to anyone who asks. Both are bearer
// secrets of 256 random bits of which only the SHA-256 hash is stored.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
)

// The prefixes of the two kinds of secret.
const (
	KeyPrefix   = "pk_"
	GuestPrefix = "pg_"
)

// secretLen is the length of a secret: the prefix and 43 base64url characters (32 bytes).
const secretLen = 3 + 43

// Hash is the stored form of a secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// WellFormed reports whether s could be a secret Parley made: checked before any lookup, so
// that junk costs no database read.
func WellFormed(s string) bool {
	if len(s) != secretLen || !(strings.HasPrefix(s, KeyPrefix) || strings.HasPrefix(s, GuestPrefix)) {
		return false
	}
	for _, c := range s[3:] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// CheckUser checks a user name a key is made for: 1 to 128 bytes of printable UTF-8, and not a
// guest name (guest- names are given to guest tokens only).
func CheckUser(u string) error {
	if err := parley.CheckText("user", u, parley.TextName); err != nil {
		return errors.New(parley.MessageOf(err))
	}
	switch {
	case u == "":
		return errors.New("user: required")
	case len(u) > 128:
		return errors.New("user: at most 128 bytes of printable UTF-8")
	case strings.HasPrefix(u, "guest-"):
		return errors.New("user: names starting with guest- are for guest tokens")
	}
	return nil
}

// NewKey makes a key for user: the secret, to be shown once, and the record to store.
func NewKey(user, name string, admin, guest bool, now time.Time, ttl time.Duration) (string, *parley.APIKey) {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	prefix := KeyPrefix
	if guest {
		prefix = GuestPrefix
	}
	secret := prefix + base64.RawURLEncoding.EncodeToString(b)
	k := &parley.APIKey{
		ID: parley.NewID(), User: user, Name: name, Prefix: secret[:10], Hash: Hash(secret),
		Admin: admin, Guest: guest, CreatedAt: now.UTC().Truncate(time.Microsecond),
	}
	if ttl > 0 {
		exp := k.CreatedAt.Add(ttl)
		k.ExpiresAt = &exp
	}
	return secret, k
}

// Identity is who a request acts as.
type Identity struct {
	User  string // owner of the sessions it creates and reads
	KeyID string // the key it presented; "" in single-user mode
	Admin bool
	Guest bool
}

// Errors of Authenticate. Their messages are the same whether a key is unknown, revoked or
// expired, so that a client learns nothing about keys it does not hold.
var (
	ErrNoCredentials  = parley.Errorf(parley.ECUnauth, "authentication required: send Authorization: Bearer <api key>")
	ErrBadCredentials = parley.Errorf(parley.ECUnauth, "invalid, revoked or expired API key")
)

// Authenticator checks secrets against a KeyStore, with a short cache so that a busy client does
// not cost a database read per request. A revocation made through Revoke takes effect at once on
// this instance, and within CacheTTL on others (open streams re-check their key as often; see
// httpapi's AuthRecheck).
type Authenticator struct {
	Store    parley.KeyStore
	Now      func() time.Time
	CacheTTL time.Duration // default 5s
	// TouchEvery bounds how often a key's last use is written (default 5m).
	TouchEvery time.Duration
	Log        *slog.Logger

	mu    sync.Mutex
	cache map[string]cached // by hash
}

type cached struct {
	key     *parley.APIKey // nil: no such key
	fetched time.Time
}

const maxCache = 10_000

func (a *Authenticator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Authenticate returns the identity of secret.
func (a *Authenticator) Authenticate(ctx context.Context, secret string) (Identity, error) {
	if secret == "" {
		return Identity{}, ErrNoCredentials
	}
	if !WellFormed(secret) {
		return Identity{}, ErrBadCredentials
	}
	hash := string(Hash(secret))
	now := a.now()
	ttl := a.CacheTTL
	if ttl <= 0 {
		ttl = 5 * time.Second
	}
	a.mu.Lock()
	c, ok := a.cache[hash]
	a.mu.Unlock()
	if !ok || now.Sub(c.fetched) >= ttl {
		k, err := a.Store.APIKeyByHash(ctx, []byte(hash))
		switch {
		case parley.CodeOf(err) == parley.ECNotFound:
			k = nil
		case err != nil:
			return Identity{}, parley.WrapError(parley.ECUnavailable, err, "cannot check credentials now; try again")
		}
		c = cached{key: k, fetched: now}
		a.touch(ctx, k, now)
		a.mu.Lock()
		if a.cache == nil || len(a.cache) >= maxCache {
			a.cache = map[string]cached{}
		}
		a.cache[hash] = c
		a.mu.Unlock()
	}
	if c.key == nil || !c.key.Usable(now) {
		return Identity{}, ErrBadCredentials
	}
	return Identity{User: c.key.User, KeyID: c.key.ID, Admin: c.key.Admin, Guest: c.key.Guest}, nil
}

// touch records a key's use, at most once per TouchEvery.
func (a *Authenticator) touch(ctx context.Context, k *parley.APIKey, now time.Time) {
	every := a.TouchEvery
	if every <= 0 {
		every = 5 * time.Minute
	}
	if k == nil || !k.Usable(now) || (k.LastUsedAt != nil && now.Sub(*k.LastUsedAt) < every) {
		return
	}
	if err := a.Store.TouchAPIKey(ctx, k.ID, now); err != nil && a.Log != nil {
		a.Log.Warn("recording an api key's use", "key", k.ID, "err", err)
	}
	t := now
	k.LastUsedAt = &t
}

// Revoke revokes the key and forgets every cached key, so the revocation holds here at once.
func (a *Authenticator) Revoke(ctx context.Context, id string) (*parley.APIKey, error) {
	k, err := a.Store.RevokeAPIKey(ctx, id, a.now().UTC())
	a.mu.Lock()
	a.cache = nil
	a.mu.Unlock()
	return k, err
}
