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
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/redact"
	"github.com/parleyhq/parley/runs"
	"golang.org/x/sync/semaphore"
)

// The request pipeline. Seed 003 §1 reads the body first; issue 18 moved the body last, so that a
// caller without a key never gets a byte of its body read (100 keyless 8 MB chats took a server
// to gigabytes when the body came first: docs/benchmarks.md, bench/keyless). In order:
//
//  1. CORS: a preflight from an allowed origin is answered 204; a request that names an origin
//     that is neither allowed nor the server's own is refused 403 (cors, outside the mux, for
//     every path).
//  2. Rate limit per identity: guests (and requests without valid credentials, by client IP) and
//     authenticated users have separate rates: 429 + Retry-After.
//  3. Authentication: no or bad credentials are refused 401; the admin API needs an admin key (403).
//  4. Throttle: a route that starts a run is refused 503 + Retry-After when the server's budget
//     of concurrent runs is spent.
//  5. Body: size limit (a declared Content-Length over it is refused unread), a time limit to
//     receive it, a share of the server-wide budget of body bytes being read and decoded at once
//     (503 + Retry-After when none frees up in time), content type, JSON, then the route's field
//     checks: 400 with the field.
//  6. Ownership, in the handlers: another user's session is 403, an unknown one 404.
//
// pipe runs steps 2 to 5 and hands the handler the identity and the decoded body.

// policy is what the pipeline applies to one route.
type policy struct {
	body  *bodySpec // nil: the route reads no body
	run   bool      // the route starts a run: the throttle applies
	open  bool      // no authentication needed (the guest token endpoint)
	admin bool      // admin identities only
	// fail writes the pipeline's errors; nil: writeError (Parley's shape). The OpenAI-compatible
	// routes write OpenAI's.
	fail func(http.ResponseWriter, error)
}

// writeErr writes err as the route's errors are written.
func (p policy) writeErr(w http.ResponseWriter, err error) {
	if p.fail != nil {
		p.fail(w, err)
		return
	}
	writeError(w, err)
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
		if r, ok := any(v).(*chat.Request); !ok || !fastChatRequest(data, r) {
			if err := decodeStrict(data, v); err != nil {
				return nil, err
			}
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
		// The checks are a function of their own: this frame stays under a streamed response
		// for its whole life (see observe).
		if r = s.admit(p, w, r); r != nil {
			h.ServeHTTP(w, r)
		}
	})
}

// admit runs the pipeline's checks of a request (rate limit, authentication, throttle, body)
// and returns the request to hand on, with its identity and body; nil when it was refused (the
// error is written).
//
//go:noinline
func (s *server) admit(p policy, w http.ResponseWriter, r *http.Request) *http.Request {
	ctx := r.Context()
	// 2. Rate limit, by the identity the credentials name (or the client's address).
	id, authErr := s.identify(r)
	if err := s.rateLimit(r, id, authErr); err != nil {
		p.writeErr(w, err)
		return nil
	}
	// 3. Authentication.
	if authErr != nil && !p.open {
		if parley.CodeOf(authErr) == parley.ECUnauth {
			w.Header().Set("WWW-Authenticate", `Bearer realm="parley"`)
		} else {
			s.Log.Error("authentication failed", "err", authErr)
		}
		p.writeErr(w, authErr)
		return nil
	}
	if p.admin && !id.Admin {
		p.writeErr(w, parley.Errorf(parley.ECForbidden, "this endpoint needs an admin key"))
		return nil
	}
	// 4. Throttle.
	if p.run && s.Runs.Full() {
		s.Log.Warn("throttled: the budget of concurrent runs is spent", "path", r.URL.Path)
		p.writeErr(w, runs.ErrOverloaded)
		return nil
	}
	// 5. Body.
	var body any
	if p.body != nil {
		v, err := s.readBody(w, r, p.body)
		if err != nil {
			p.writeErr(w, err)
			return nil
		}
		body = v
	}
	ctx, changed := withPipeline(ctx, id, body)
	noteUser(ctx, id.User) // for the access log
	if changed {
		r = r.WithContext(ctx)
	}
	return r
}

// withPipeline returns ctx carrying the identity the pipeline established and the body it
// decoded (nil: none). On observe's context, which the request still has, it sets them there, and
// r needs no new context: no layer before the pipeline reads them.
func withPipeline(ctx context.Context, id auth.Identity, body any) (context.Context, bool) {
	if c, ok := ctx.Value(requestCtxKey).(*requestCtx); ok && c == ctx && !c.piped {
		c.id, c.body, c.piped = id, body, true
		return ctx, false
	}
	if body != nil {
		ctx = context.WithValue(ctx, bodyKey, body)
	}
	return context.WithValue(ctx, identityKey, id), true
}

// readBody reads the body whole, within the size limit, the body time limit and a share of the
// server's body budget, and decodes it with spec. The share is given back once the body is
// decoded: it bounds the bytes being read and decoded at once, not what handlers keep.
func (s *server) readBody(w http.ResponseWriter, r *http.Request, spec *bodySpec) (any, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		return nil, parley.Errorf(parley.ECInvalid, "Content-Type must be application/json")
	}
	tooBig := func() error {
		return parley.Errorf(parley.ECInvalid, "request body: larger than %d bytes", s.MaxBodyBytes)
	}
	if r.ContentLength > s.MaxBodyBytes {
		return nil, tooBig() // refused unread
	}
	// What the body may cost: its declared length, or the limit when it declares none.
	need := s.MaxBodyBytes
	if r.ContentLength >= 0 {
		need = r.ContentLength
	}
	reserved, err := s.bodies.acquire(r.Context(), need, s.BodyWait)
	if err != nil {
		return nil, err
	}
	defer s.bodies.release(reserved)
	rc := http.NewResponseController(w)
	// Not every ResponseWriter supports deadlines (httptest's recorder does not); then the
	// server's own timeouts are all there is.
	_ = rc.SetReadDeadline(time.Now().Add(s.BodyTimeout))
	data, err := readAll(http.MaxBytesReader(w, r.Body, s.MaxBodyBytes), r.ContentLength)
	// The body is in: the connection's later reads (the server watching for the client to
	// leave, during a long chat) have no deadline.
	_ = rc.SetReadDeadline(time.Time{})
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			return nil, tooBig()
		case errors.As(err, &ne) && ne.Timeout():
			return nil, parley.Errorf(parley.ECInvalid, "request body: not received within %s", s.BodyTimeout)
		}
		return nil, parley.WrapError(parley.ECInvalid, err, "request body: could not be read")
	}
	if w.Header().Get("Connection") == "close" {
		w.Header().Del("Connection") // the body is read whole: the connection may be kept (observe)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		if !spec.optional {
			return nil, parley.Errorf(parley.ECInvalid, "request body: empty, expected a JSON object")
		}
		data = nil
	}
	return spec.decode(data)
}

// readAll reads r to its end. A body that declared its length (hint ≥ 0) is read into one buffer
// of that size (plus a byte, to see the end), not grown by doubling as io.ReadAll would; a body
// longer than it declared grows it, within what MaxBytesReader allows.
func readAll(r io.Reader, hint int64) ([]byte, error) {
	if hint < 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, 0, hint+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)] // grow
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// bodyBudget bounds the request body bytes being read and decoded at once, all requests
// together: a request reserves its body's size before reading it and gives it back once it is
// decoded. First come, first served.
type bodyBudget struct {
	sem  *semaphore.Weighted
	size int64
}

func newBodyBudget(size int64) *bodyBudget {
	return &bodyBudget{sem: semaphore.NewWeighted(size), size: size}
}

// acquire reserves n bytes, waiting at most wait; past that the server is too busy reading other
// bodies (503 + Retry-After). It returns what it reserved, which release gives back (a count,
// not a closure: nothing allocated a request).
func (b *bodyBudget) acquire(ctx context.Context, n int64, wait time.Duration) (reserved int64, err error) {
	n = min(max(n, 1), b.size)
	if !b.sem.TryAcquire(n) {
		wctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		if err := b.sem.Acquire(wctx, n); err != nil {
			return 0, &parley.Error{Code: parley.ECUnavailable, RetryAfter: max(wait, time.Second),
				Message: "the server is busy reading other requests; try again shortly"}
		}
	}
	return n, nil
}

// release gives back what acquire reserved.
func (b *bodyBudget) release(reserved int64) { b.sem.Release(reserved) }

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

// stillValid checks again, for an open stream, the credentials the request came with: a key
// revoked or expired since is an ECUnauth error. When they cannot be checked (the store is down),
// the stream goes on: it was valid, and ending every stream while the database is away would
// turn its outage into everyone's.
func (s *server) stillValid(ctx context.Context, r *http.Request) error {
	if s.Auth == nil {
		return nil
	}
	secret, err := bearer(r)
	return s.stillValidSecret(ctx, secret, err)
}

// stillValidSecret is stillValid for the secret bearer read (and its error).
func (s *server) stillValidSecret(ctx context.Context, secret string, err error) error {
	if s.Auth == nil {
		return nil
	}
	if err == nil {
		_, err = s.Auth.Authenticate(ctx, secret)
	}
	if err != nil && parley.CodeOf(err) != parley.ECUnauth {
		s.Log.Warn("cannot re-check an open stream's credentials", "err", err)
		return nil
	}
	return err
}

// recheckTicks ticks every AuthRecheck while a stream is open; nil (never) without auth.
func (s *server) recheckTicks() (<-chan time.Time, func()) {
	if s.Auth == nil {
		return nil, func() {}
	}
	t := time.NewTicker(s.AuthRecheck)
	return t.C, t.Stop
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
		// The checks are a function of their own: this frame stays under a streamed response
		// for its whole life (see observe).
		if corsCheck(w, r, cop, anyOrigin, allowed) {
			next.ServeHTTP(w, r)
		}
	})
}

// corsCheck answers a preflight and sets the CORS headers of an allowed origin; it reports
// whether the request goes on (false: answered or refused).
//
//go:noinline
func corsCheck(w http.ResponseWriter, r *http.Request, cop *http.CrossOriginProtection, anyOrigin bool, allowed func(string) bool) bool {
	origin := r.Header.Get("Origin")
	if origin != "" && allowed(origin) {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate, X-Request-Id, X-Parley-Session, X-Parley-Run")
	}
	if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
		if !allowed(origin) {
			writeError(w, parley.Errorf(parley.ECForbidden, "origin %s is not allowed (--cors-origins)", redact.String(truncate(origin, 100))))
			return false
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", "GET, POST, PATCH, DELETE, OPTIONS")
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID, X-Request-Id, traceparent, tracestate, X-Parley-Session")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	// A request that names an origin (a browser's, on every cross-origin request and on
	// same-origin ones other than GET and HEAD) is refused unless that origin is allowed or
	// is the server's own (the web UI it serves): reads too, so that no page of another
	// origin can even probe the API from a user's browser.
	if origin != "" && !allowed(origin) && !sameOrigin(r, origin) {
		writeError(w, parley.Errorf(parley.ECForbidden, "origin %s is not allowed (--cors-origins)", redact.String(truncate(origin, 100))))
		return false
	}
	if !anyOrigin {
		if err := cop.Check(r); err != nil {
			writeError(w, parley.Errorf(parley.ECForbidden, "cross-origin request refused: the origin is not allowed (--cors-origins)"))
			return false
		}
	}
	return true
}

// sameOrigin reports whether origin is the server's own: its host (and port) is the one the
// request was sent to. The scheme is not compared: behind a proxy that ends TLS the request
// arrives over HTTP from a page served over HTTPS. (Go's CrossOriginProtection compares the same way.)
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
