package artifact

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Signer signs the URLs of artifact pages. An iframe cannot send an API key, so the page of an
// artifact is reached by a URL that carries its own short-lived proof: an HMAC over the artifact,
// its version and the expiry. Instances that share a database must share the key.
type Signer struct {
	Key []byte
	TTL time.Duration // how long a URL is valid (default 1h)
	Now func() time.Time
}

func (s *Signer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Signer) mac(id string, version int, exp int64) string {
	m := hmac.New(sha256.New, s.Key)
	fmt.Fprintf(m, "artifact-render\x00%s\x00%d\x00%d", id, version, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// RenderURL returns the path of the page of the artifact's version, signed.
func (s *Signer) RenderURL(id string, version int) string {
	ttl := s.TTL
	if ttl <= 0 {
		ttl = time.Hour
	}
	exp := s.now().Add(ttl).Unix()
	q := url.Values{"version": {strconv.Itoa(version)}, "exp": {strconv.FormatInt(exp, 10)}, "sig": {s.mac(id, version, exp)}}
	return "/api/v1/artifacts/" + url.PathEscape(id) + "/render?" + q.Encode()
}

// Verify checks a render URL's query for the artifact: it returns the version it grants, or why
// it does not.
func (s *Signer) Verify(id string, q url.Values) (int, error) {
	version, err := strconv.Atoi(q.Get("version"))
	if err != nil || version < 1 {
		return 0, fmt.Errorf("version: want a version number of the artifact")
	}
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("exp: want the expiry of the signed URL")
	}
	if !hmac.Equal([]byte(q.Get("sig")), []byte(s.mac(id, version, exp))) {
		return 0, fmt.Errorf("the signature does not match: use the render_url of GET /api/v1/artifacts/{id}")
	}
	if s.now().Unix() > exp {
		return 0, fmt.Errorf("the signed URL has expired: get a new render_url from GET /api/v1/artifacts/{id}")
	}
	return version, nil
}

// The Signer is general: besides artifact pages it signs any resource Parley serves without an
// API key (generated images: package images). Each kind of resource signs under its own purpose,
// so a signature for one never verifies for another.

func (s *Signer) macFor(purpose, id string, exp int64) string {
	m := hmac.New(sha256.New, s.Key)
	fmt.Fprintf(m, "signed-url\x00%s\x00%s\x00%d", purpose, id, exp)
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// Sign returns the query (exp and sig) that authorizes purpose on id until now+ttl.
func (s *Signer) Sign(purpose, id string, ttl time.Duration) url.Values {
	exp := s.now().Add(ttl).Unix()
	return url.Values{"exp": {strconv.FormatInt(exp, 10)}, "sig": {s.macFor(purpose, id, exp)}}
}

// Check verifies a query Sign made for purpose and id: nil, or why it does not authorize.
func (s *Signer) Check(purpose, id string, q url.Values) error {
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	if err != nil {
		return fmt.Errorf("exp: want the expiry of the signed URL")
	}
	if !hmac.Equal([]byte(q.Get("sig")), []byte(s.macFor(purpose, id, exp))) {
		return fmt.Errorf("the signature does not match")
	}
	if s.now().Unix() > exp {
		return fmt.Errorf("the signed URL has expired")
	}
	return nil
}

// Authentic reports whether a query Sign made for purpose and id carries Parley's signature,
// expired or not: proof that Parley issued it for id, without granting access by itself.
func (s *Signer) Authentic(purpose, id string, q url.Values) bool {
	exp, err := strconv.ParseInt(q.Get("exp"), 10, 64)
	return err == nil && hmac.Equal([]byte(q.Get("sig")), []byte(s.macFor(purpose, id, exp)))
}
