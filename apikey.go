package parley

import (
	"context"
	"time"
)

// APIKey is a credential a client presents as "Authorization: Bearer <key>". Only the SHA-256
// hash of the secret is stored; the secret itself is shown once, when the key is made.
type APIKey struct {
	ID     string `json:"id"`
	User   string `json:"user"` // the identity the key acts as: the owner of the sessions it creates
	Name   string `json:"name"` // a label for people ("laptop", "ci")
	Prefix string `json:"prefix"`
	// Hash is SHA-256 of the secret. The secret has 256 random bits, so a fast hash is enough: a
	// slow password hash protects guessable secrets, and there is nothing here to guess.
	Hash       []byte     `json:"-"`
	Admin      bool       `json:"admin"` // may manage keys through the admin API
	Guest      bool       `json:"guest"` // a guest token (guest mode): its own, lower rate limit
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
}

// Usable reports whether the key may authenticate a request at now.
func (k *APIKey) Usable(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// KeyStore keeps API keys. Both stores implement it; store/storetest checks them.
type KeyStore interface {
	// CreateAPIKey stores k. ID, User, Hash and CreatedAt must be set; a hash already stored is a
	// conflict.
	CreateAPIKey(ctx context.Context, k *APIKey) error
	// APIKeyByHash returns the key with this hash, revoked or not; ErrNotFound if none.
	APIKeyByHash(ctx context.Context, hash []byte) (*APIKey, error)
	// ListAPIKeys returns the keys that are not guest tokens, oldest first: user's, or everyone's
	// when user is "". At most limit.
	ListAPIKeys(ctx context.Context, user string, limit int) ([]APIKey, error)
	// RevokeAPIKey marks the key revoked at now (a key revoked before keeps its first time) and
	// returns it; ErrNotFound for an unknown id.
	RevokeAPIKey(ctx context.Context, id string, now time.Time) (*APIKey, error)
	// TouchAPIKey records that the key was used at now.
	TouchAPIKey(ctx context.Context, id string, now time.Time) error
	// DeleteExpiredAPIKeys deletes keys that expired before now and returns how many.
	DeleteExpiredAPIKeys(ctx context.Context, now time.Time) (int, error)
}
