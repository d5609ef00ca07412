package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/auth"
	"github.com/parleyhq/parley/chat"
	"github.com/parleyhq/parley/store/sqlite"
)

// fuzzServer is a server whose handlers behind the pipeline only answer 200: the fuzz targets
// exercise the decoders of client input, not the store.
func fuzzServer(t testing.TB) *server {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "f.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &server{Deps: Deps{
		Store: st, MaxBodyBytes: 4096, Auth: &auth.Authenticator{Store: st},
		Chat: &chat.Service{MaxMessage: 1000, ResolveModel: func(m string) (string, error) {
			if m != "mock" {
				return "", parley.Errorf(parley.ECInvalid, "model: unknown model %q", m)
			}
			return m, nil
		}, DefaultModel: "mock"},
	}}
}

var ok200 = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })

// FuzzRequestBodies feeds any bytes, as any route's JSON body, through the pipeline's body step:
// the answer is the route's 200 or a 400 with a reason, never a panic or a 5xx.
func FuzzRequestBodies(f *testing.F) {
	for _, s := range []string{`{"message":"hi"}`, `{"message":"hi","binary_content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}`,
		`{"title":"x"}`, `{"user":"u","expires_in":"1h"}`, ``, `{`, `[]`, `{"message":"\u0000"}`, `{"a":1}{}`, `null`} {
		for route := range uint8(4) {
			f.Add(route, []byte(s))
		}
	}
	s := fuzzServer(f)
	specs := []*bodySpec{
		jsonBody(false, s.checkChat),
		jsonBody(true, checkNewTitle),
		jsonBody(false, checkRename),
		jsonBody(false, checkNewKey),
	}
	s.Auth = nil // single-user: only the body step can refuse
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		h := s.pipe(policy{body: specs[int(route)%len(specs)]}, ok200)
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/x", strings.NewReader(string(body)))
		r.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(w, r)
		if w.Code != 200 && w.Code != 400 {
			t.Fatalf("body %q: status %d: %s", body, w.Code, w.Body)
		}
		if w.Code == 400 && !strings.Contains(w.Body.String(), `"code":"invalid"`) {
			t.Fatalf("body %q: 400 without the invalid code: %s", body, w.Body)
		}
	})
}

// FuzzAuthorization feeds any Authorization header through steps 4 and 5: the answer is 200 for
// a valid key and 401 otherwise, never a panic or another status.
func FuzzAuthorization(f *testing.F) {
	s := fuzzServer(f)
	secret, k := auth.NewKey("alice", "", false, false, time.Now(), 0)
	if err := s.Store.CreateAPIKey(context.Background(), k); err != nil {
		f.Fatal(err)
	}
	for _, h := range []string{"Bearer " + secret, "Bearer", "Bearer ", "bearer " + secret, "Basic abc", "Bearer pk_" + strings.Repeat("A", 43), "Bearer " + secret + "x", "\x00", ""} {
		f.Add(h)
	}
	h := s.pipe(policy{}, ok200)
	f.Fuzz(func(t *testing.T, header string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header["Authorization"] = []string{header}
		h.ServeHTTP(w, r)
		valid := strings.EqualFold(strings.SplitN(header, " ", 2)[0], "Bearer") && strings.TrimSpace(strings.SplitN(header+" ", " ", 2)[1]) == secret
		if valid && w.Code != 200 || !valid && w.Code != 401 {
			t.Fatalf("Authorization %q: status %d (valid %v): %s", header, w.Code, valid, w.Body)
		}
	})
}
