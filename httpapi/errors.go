package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/redact"
)

// statusOf is the one map from error codes to HTTP statuses.
func statusOf(code parley.ErrorCode) int {
	switch code {
	case parley.ECInvalid:
		return http.StatusBadRequest
	case parley.ECUnauth:
		return http.StatusUnauthorized
	case parley.ECForbidden:
		return http.StatusForbidden
	case parley.ECNotFound:
		return http.StatusNotFound
	case parley.ECConflict:
		return http.StatusConflict
	case parley.ECRateLimited:
		return http.StatusTooManyRequests
	case parley.ECUpstream:
		return http.StatusBadGateway
	case parley.ECUnavailable:
		return http.StatusServiceUnavailable
	case parley.ECTimeout:
		return http.StatusGatewayTimeout
	case parley.ECCanceled:
		return http.StatusConflict
	case parley.ECTooLarge, parley.ECQuota:
		return http.StatusRequestEntityTooLarge
	default:
		return http.StatusInternalServerError
	}
}

// errorBody is the JSON of every error response.
type errorBody struct {
	Error parley.ErrorBody `json:"error"`
}

// writeError writes err as a sanitized JSON error: the code's status and a client-safe message.
// Internal errors carry no detail.
func writeError(w http.ResponseWriter, err error) {
	code := parley.CodeOf(err)
	if n, ok := w.(interface{ noteError(error) }); ok {
		n.noteError(err) // for the log of 5xx answers (observe)
	}
	if ra := parley.RetryAfterOf(err); ra > 0 && (code == parley.ECRateLimited || code == parley.ECUnavailable) {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(ra)))
	}
	writeJSON(w, statusOf(code), errorBody{parley.ErrorBody{Code: code, Message: redact.String(parley.MessageOf(err))}})
}

// retrySeconds rounds d up to whole seconds, at least 1, as Retry-After counts.
func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// describeJSONError turns a decoding error into a reason a client can act on. (The body size is
// checked before decoding, in readBody.)
func describeJSONError(err error) string {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return "request body: empty, expected a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "request body: truncated JSON"
	case errors.As(err, &syn):
		return fmt.Sprintf("request body: invalid JSON at byte %d", syn.Offset)
	case errors.As(err, &typ):
		if typ.Field != "" {
			return fmt.Sprintf("%s: must be %s, not %s", typ.Field, typeName(typ.Type.Kind().String()), typ.Value)
		}
		return fmt.Sprintf("request body: must be a JSON object, not %s", typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	default:
		// Errors from our own UnmarshalJSON methods (e.g. Content) are written to be shown.
		return "request body: " + strings.TrimPrefix(err.Error(), "json: ")
	}
}

func typeName(kind string) string {
	switch kind {
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "int", "int64", "int32", "uint", "float64":
		return "a number"
	case "bool":
		return "a boolean"
	default:
		return "a " + kind
	}
}
