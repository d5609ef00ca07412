package artifact

import (
	"net/url"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func TestSignedRenderURL(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	s := &Signer{Key: []byte("k-0123456789abcdef0123456789abcdef"), TTL: time.Hour, Now: func() time.Time { return now }}
	raw := s.RenderURL("a1", 3)
	u, err := url.Parse(raw)
	if err != nil || u.Path != "/api/v1/artifacts/a1/render" {
		t.Fatalf("url %q: %v", raw, err)
	}
	if v, err := s.Verify("a1", u.Query()); err != nil || v != 3 {
		t.Fatalf("fresh: %d %v", v, err)
	}
	if _, err := s.Verify("a2", u.Query()); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Fatalf("another artifact: %v", err)
	}
	other := &Signer{Key: []byte("another-key-0123456789abcdef01234567"), Now: s.Now}
	if _, err := other.Verify("a1", u.Query()); err == nil {
		t.Fatal("verified with another key")
	}
	now = now.Add(time.Hour + time.Second)
	if _, err := s.Verify("a1", u.Query()); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("after the TTL: %v", err)
	}
}

func TestRenderPolicies(t *testing.T) {
	for _, c := range []struct {
		typ     parley.ArtifactType
		content string
		script  string // the script-src the page gets
		body    string
	}{
		{parley.ArtifactHTML, "<h1>hi</h1><script>document.title='x'</script>", "script-src 'unsafe-inline'", "<h1>hi</h1>"},
		{parley.ArtifactSVG, `<svg xmlns="http://www.w3.org/2000/svg"><circle r="1"></circle></svg>`, "script-src 'none'", "<circle"},
		{parley.ArtifactCode, "if a < b { return }", "script-src 'none'", "if a &lt; b"},
		{parley.ArtifactMarkdown, "# <script>x</script>", "script-src 'none'", "# &lt;script&gt;"},
	} {
		p, err := Render(&parley.Artifact{ID: "a", Version: 1, Type: c.typ, Title: "<T>", Content: c.content})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(p.CSP, "sandbox allow-scripts; default-src 'none'; connect-src 'none';") || !strings.HasSuffix(p.CSP, c.script) ||
			strings.Contains(p.CSP, "allow-same-origin") {
			t.Errorf("%s: CSP %q", c.typ, p.CSP)
		}
		if !strings.Contains(string(p.HTML), c.body) || strings.Contains(string(p.HTML), "<title><T>") {
			t.Errorf("%s: page %s", c.typ, p.HTML)
		}
	}
}

func TestSignCheck(t *testing.T) {
	now := time.Date(2026, 11, 24, 6, 0, 0, 0, time.UTC)
	s := &Signer{Key: []byte("k-0123456789abcdef0123456789abcdef"), Now: func() time.Time { return now }}
	q := s.Sign("image", "f1", 7*24*time.Hour)
	if err := s.Check("image", "f1", q); err != nil {
		t.Fatalf("fresh: %v", err)
	}
	for name, c := range map[string]struct {
		purpose, id string
		q           url.Values
	}{
		"other id":        {"image", "f2", q},
		"other purpose":   {"other", "f1", q},
		"altered sig":     {"image", "f1", url.Values{"exp": q["exp"], "sig": {"A" + q.Get("sig")[1:]}}},
		"extended expiry": {"image", "f1", url.Values{"exp": {"99999999999"}, "sig": q["sig"]}},
		"no sig":          {"image", "f1", url.Values{"exp": q["exp"]}},
	} {
		if err := s.Check(c.purpose, c.id, c.q); err == nil || !strings.Contains(err.Error(), "signature") {
			t.Errorf("%s: %v", name, err)
		}
	}
	// An artifact render signature is not an image signature, and the other way round.
	if _, err := s.Verify("f1", url.Values{"version": {"1"}, "exp": q["exp"], "sig": q["sig"]}); err == nil {
		t.Error("an image signature opened an artifact page")
	}
	now = now.Add(7*24*time.Hour + time.Second)
	if err := s.Check("image", "f1", q); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired: %v", err)
	}
}
