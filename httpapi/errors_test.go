package httpapi

import (
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// TestErrorResponsesAreSanitized: the one error writer keeps internal detail out entirely and
// redacts what a client-safe message may still carry.
func TestErrorResponsesAreSanitized(t *testing.T) {
	for _, tt := range []struct {
		err        error
		status     int
		want, leak string
	}{
		{errors.New("open /var/lib/parley/parley.db: disk I/O error"), 500, `{"error":{"code":"internal","message":"internal error"}}`, "/var/lib"},
		{parley.WrapError(parley.ECUpstream, errors.New(`{"error":{"message":"bad key sk-abcdefghijklmnopqr"}}`), "the model provider failed"), 502,
			`{"error":{"code":"upstream","message":"the model provider failed"}}`, "sk-"},
		{parley.Errorf(parley.ECInvalid, "message: no account for jane@example.com at https://x.example/a/b?token=1"), 400,
			`{"error":{"code":"invalid","message":"message: no account for [email] at https://x.example/…"}}`, "jane"},
	} {
		w := httptest.NewRecorder()
		writeError(w, tt.err)
		body := strings.TrimSpace(w.Body.String())
		if w.Code != tt.status || body != tt.want || strings.Contains(body, tt.leak) {
			t.Errorf("%v: %d %s, want %d %s", tt.err, w.Code, body, tt.status, tt.want)
		}
	}
}
