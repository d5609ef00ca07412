package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/runs"
)

// The request pipeline of seed 003 §1, in its order:
//
//  1. CORS: a preflight from an allowed origin is answered 204; a state-changing request from a
//     browser on another origin is refused 403 (cors, outside the mux, for every path).
//  2. Body: size limit, content type, JSON, then the route's field checks: 400 with the field.
//  3. Throttle: a route that starts a run is refused 503 + Retry-After when the server's budget
//     of concurrent runs is spent.
//  4. Rate limit per identity: guests (and requests without valid credentials, by client IP) and
//     authenticated users have separate rates: 429 + Retry-After.
//  5. Authentication: no or bad credentials are refused 401.
//  6. Ownership, in the handlers: another user's session is 403, an unknown one 404.
//
// pipe runs steps 2 to 5 and hands the handler the identity and the decoded body.

// policy is what the pipeline applies to one route.
type policy struct {
	body  *bodySpec // nil: the route reads no body
	run   bool      // the route starts a run: the throttle applies
	open  bool      // no authentication needed (the guest token endpoint)
	admin bool      // admin identities only
}

// bodySpec decodes and checks one route's JSON body.
type bodySpec struct {
	optional bool // an empty body is allowed (decode gets nil)
	decode   func(data []byte) (any, error)
}

// jsonBody is the body spec of a T, checked by check (nil: no checks beyond decoding).
func jsonBody[T any](optional bool, check func(*T) error) *bodySpec {
	return &bodySpec{optional: optional, decode: func(data []byte) (any, error) {
		v := new(T)
		if data == nil {
			return v, nil
		}
		if err := decodeStrict(data, v); err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(v); err != nil {
				return nil, err
			}
		}
		return v, nil
	}}
}

type ctxKey int

const (
	identityKey ctxKey = iota
	bodyKey
)

// identityOf is the identity the pipeline established for r.
func identityOf(r *http.Request) auth.Identity {
	id, _ := r.Context().Value(identityKey).(auth.Identity)
	return id
}

// bodyOf is the body the pipeline decoded for r.
func bodyOf[T any](r *http.Request) *T {
	v, _ := r.Context().Value(bodyKey).(*T)
	if v == nil {
		v = new(T)
	}
	return v
}

func (s *server) pipe(p policy, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		// 2. Body.
		if p.body != nil {
			v, err := s.readBody(w, r, p.body)
			if err != nil {
				writeError(w, err)
				return
			}
			ctx = context.WithValue(ctx, bodyKey, v)
		}
		// 3. Throttle.
		if p.run && s.Runs.Full() {
			s.Log.Warn("throttled: the budget of concurrent runs is spent", "path", r.URL.Path)
			writeError(w, runs.ErrOverloaded)
			return
		}
		// 4. Rate limit, by the identity the credentials name (or the client's address).
		id, authErr := s.identify(r)
		if err := s.rateLimit(r, id, authErr); err != nil {
			writeError(w, err)
			return
		}
		// 5. Authentication.
		if authErr != nil && !p.open {
			if parley.CodeOf(authErr) == parley.ECUnauth {
				w.Header().Set("WWW-Authenticate", `Bearer realm="parley"`)
			} else {
				s.Log.Error("authentication failed", "err", authErr)
			}
			writeError(w, authErr)
			return
		}
		if p.admin && !id.Admin {
			writeError(w, parley.Errorf(parley.ECForbidden, "this endpoint needs an admin key"))
			return
		}
		ctx = context.WithValue(ctx, identityKey, id)
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// readBody reads the body whole, within the size limit, and decodes it with spec.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, spec *bodySpec) (any, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, parley.Errorf(parley.ECInvalid, "Content-Type must be application/json")
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, parley.Errorf(parley.ECInvalid, "request body: larger than %d bytes", s.MaxBodyBytes)
		}
		return nil, parley.WrapError(parley.ECInvalid, err, "request body: could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if !spec.optional {
			return nil, parley.Errorf(parley.ECInvalid, "request body: empty, expected a JSON object")
		}
		data = nil
	}
	return spec.decode(data)
}

// decodeStrict decodes one JSON object into v: no unknown fields, nothing after it, and only
// valid UTF-8 (encoding/json would silently replace invalid bytes with U+FFFD).
func decodeStrict(data []byte, v any) error {
	if !utf8.Valid(data) {
		return parley.Errorf(parley.ECInvalid, "request body: not valid UTF-8 at byte %d", invalidUTF8At(data))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return parley.WrapError(parley.ECInvalid, err, describeJSONError(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return parley.Errorf(parley.ECInvalid, "request body: unexpected data after the JSON object")
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of data that is not valid UTF-8.
func invalidUTF8At(data []byte) int {
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n == 1 {
			return i
		}
		i += n
	}
	return len(data)
}

// identify returns the identity the request's credentials name. In single-user mode (no
// Authenticator) every caller is "local", with admin rights.
func (s *server) identify(r *http.Request) (auth.Identity, error) {
	if s.Auth == nil {
		return auth.Identity{User: "local", Admin: true}, nil
	}
	secret, err := bearer(r)
	if err != nil {
		return auth.Identity{}, err
	}
	return s.Auth.Authenticate(r.Context(), secret)
}

// bearer returns the secret of "Authorization: Bearer <secret>" ("" when there is none). A
// browser cannot set that header on a WebSocket; it offers the key as the subprotocol
// "parley.auth.<secret>" instead (next to "parley.v1", the one the server picks).
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return wsAuthProtocol(r), nil
	}
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return "", parley.Errorf(parley.ECUnauth, "Authorization: want \"Bearer <api key>\"")
	}
	return strings.TrimSpace(secret), nil
}

// rateLimit applies the rate of the caller's kind: users by user, guests by guest user, and
// everyone without valid credentials by client address at the guest rate. If the limiter fails
// (Redis down), the request goes ahead and the failure is logged: the limiter guards capacity,
// and refusing everyone while it is down would be the outage it exists to prevent.
func (s *server) rateLimit(r *http.Request, id auth.Identity, authErr error) error {
	if s.Limiter == nil {
		return nil
	}
	return s.limitFor(r.Context(), s.clientIP(r), id, authErr)
}

// limitFor is rateLimit for a request that is not an HTTP request: a WebSocket message.
func (s *server) limitFor(ctx context.Context, ip string, id auth.Identity, authErr error) error {
	if s.Limiter == nil {
		return nil
	}
	key, rate := "u:"+id.User, s.UserRate
	switch {
	case authErr != nil:
		key, rate = "ip:"+ip, s.GuestRate
	case id.Guest:
		rate = s.GuestRate
	}
	d, err := s.Limiter.Allow(ctx, key, rate)
	if err != nil {
		s.Log.Warn("rate limiter unavailable; request let through", "err", err)
		return nil
	}
	if !d.Allowed {
		who := "this user"
		if authErr != nil || id.Guest {
			who = "guests"
		}
		return &parley.Error{Code: parley.ECRateLimited, Message: "rate limit of " + who + " (" + rate.String() + ") reached; retry after " +
			strconv.Itoa(retrySeconds(d.RetryAfter)) + "s", RetryAfter: d.RetryAfter}
	}
	return nil
}

// clientIP is the address requests are counted under: the peer's, or the RealIPHeader's (set
// only behind a proxy that overwrites it). IPv6 addresses count by their /64.
func (s *server) clientIP(r *http.Request) string {
	addr := r.RemoteAddr
	if s.RealIPHeader != "" {
		if v := r.Header.Get(s.RealIPHeader); v != "" {
			parts := strings.Split(v, ",")
			addr = strings.TrimSpace(parts[len(parts)-1]) // the hop our proxy added
		}
	}
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	ip, err := netip.ParseAddr(addr)
	if err != nil {
		return "unknown"
	}
	if ip.Is4() || ip.Is4In6() {
		return ip.Unmap().String()
	}
	p, _ := ip.Prefix(64)
	return p.String()
}

// cors is step 1, in front of the mux for every path.
func (s *server) cors(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	anyOrigin := false
	for _, o := range s.CORSOrigins {
		if o == "*" {
			anyOrigin = true
			continue
		}
		if err := cop.AddTrustedOrigin(o); err != nil {
			s.Log.Error("cors origin ignored", "origin", o, "err", err)
		}
	}
	allowed := func(origin string) bool {
		if anyOrigin {
			return true
		}
		for _, o := range s.CORSOrigins {
			if strings.EqualFold(o, origin) {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && allowed(origin) {
			h := w.Header()
			h.Set("Access-Control-Allow-Origin", origin)
			h.Add("Vary", "Origin")
			h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
		}
		if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			if !allowed(origin) {
				writeError(w, parley.Errorf(parley.ECForbidden, "origin %s is not allowed (--cors-origins)", redact.String(truncate(origin, 100))))
				return
			}
			h := w.Header()
			h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
			h.Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if !anyOrigin {
			if err := cop.Check(r); err != nil {
				writeError(w, parley.Errorf(parley.ECForbidden, "cross-origin request refused: the origin is not allowed (--cors-origins)"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}
