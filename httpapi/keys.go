package httpapi

import (
	"net/http"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
)

// handleMe tells the caller who it is.
func (s *server) handleMe() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := identityOf(r)
		writeJSON(w, http.StatusOK, map[string]any{"user": id.User, "key_id": id.KeyID, "admin": id.Admin, "guest": id.Guest, "auth": s.Auth != nil})
	})
}

// handleGuest gives a guest token: a new identity with its own sessions, the guest rate limit
// and an expiry. Its cost is bounded by the guest rate limit on the caller's address.
func (s *server) handleGuest() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.Auth == nil || !s.Guests {
			writeError(w, parley.Errorf(parley.ECNotFound, "guest mode is off"))
			return
		}
		user := "guest-" + parley.NewID()
		secret, k := auth.NewKey(user, "guest", false, true, time.Now(), s.GuestTTL)
		if err := s.Auth.Store.CreateAPIKey(r.Context(), k); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, map[string]any{"token": secret, "user": user, "expires_at": k.ExpiresAt})
	})
}

// newKeyBody is the body of POST /api/v1/admin/keys.
type newKeyBody struct {
	User      string `json:"user"`
	Name      string `json:"name"`
	Admin     bool   `json:"admin"`
	ExpiresIn string `json:"expires_in"` // a Go duration such as "720h"; empty: never
	ttl       time.Duration
}

func checkNewKey(b *newKeyBody) error {
	if err := auth.CheckUser(b.User); err != nil {
		return parley.Errorf(parley.ECInvalid, "%v", err)
	}
	if err := parley.CheckText("name", b.Name, parley.TextName); err != nil {
		return err
	}
	if len(b.Name) > 200 {
		return parley.Errorf(parley.ECInvalid, "name: at most 200 bytes of UTF-8")
	}
	if b.ExpiresIn != "" {
		d, err := time.ParseDuration(b.ExpiresIn)
		if err != nil || d <= 0 {
			return parley.Errorf(parley.ECInvalid, "expires_in: want a positive duration such as 720h")
		}
		b.ttl = d
	}
	return nil
}

func (s *server) needAuth(w http.ResponseWriter) bool {
	if s.Auth == nil {
		writeError(w, parley.Errorf(parley.ECNotFound, "API keys are off: the server runs in single-user mode (--auth off)"))
		return false
	}
	return true
}

func (s *server) handleCreateKey() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.needAuth(w) {
			return
		}
		b := bodyOf[newKeyBody](r)
		secret, k := auth.NewKey(b.User, b.Name, b.Admin, false, time.Now(), b.ttl)
		if err := s.Auth.Store.CreateAPIKey(r.Context(), k); err != nil {
			writeError(w, err)
			return
		}
		s.Log.Info("api key created", "key", k.ID, "user", k.User, "admin", k.Admin, "by", identityOf(r).User)
		writeJSON(w, http.StatusCreated, map[string]any{"key": secret, "api_key": k})
	})
}

func (s *server) handleListKeys() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.needAuth(w) {
			return
		}
		user := r.URL.Query().Get("user")
		if err := parley.CheckText("user", user, parley.TextName); err != nil {
			writeError(w, err)
			return
		}
		keys, err := s.Auth.Store.ListAPIKeys(r.Context(), user, 1000)
		if err != nil {
			writeError(w, err)
			return
		}
		if keys == nil {
			keys = []parley.APIKey{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"keys": keys})
	})
}

func (s *server) handleRevokeKey() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.needAuth(w) {
			return
		}
		id := r.PathValue("id")
		if !validID(id) {
			writeError(w, parley.Errorf(parley.ECNotFound, "api key %q not found", truncate(id, 80)))
			return
		}
		k, err := s.Auth.Revoke(r.Context(), id)
		if err != nil {
			if parley.CodeOf(err) == parley.ECNotFound {
				err = parley.Errorf(parley.ECNotFound, "api key %q not found", id)
			}
			writeError(w, err)
			return
		}
		s.Log.Info("api key revoked", "key", k.ID, "user", k.User, "by", identityOf(r).User)
		writeJSON(w, http.StatusOK, map[string]any{"api_key": k})
	})
}
