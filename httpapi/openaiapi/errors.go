package openaiapi

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/redact"
)

// errorType is OpenAI's type and code for a Parley error code.
func errorType(code parley.ErrorCode) (typ, oaCode string) {
	switch code {
	case parley.ECInvalid:
		return "invalid_request_error", "invalid_value"
	case parley.ECUnauth:
		return "invalid_request_error", "invalid_api_key"
	case parley.ECForbidden:
		return "invalid_request_error", "permission_denied"
	case parley.ECNotFound:
		return "invalid_request_error", "not_found"
	case parley.ECConflict:
		return "invalid_request_error", "conflict"
	case parley.ECRateLimited:
		return "requests", "rate_limit_exceeded"
	case parley.ECUpstream:
		return "api_error", "upstream_error"
	case parley.ECUnavailable:
		return "server_error", "overloaded"
	case parley.ECTimeout:
		return "server_error", "timeout"
	case parley.ECCanceled:
		return "invalid_request_error", "canceled"
	default:
		return "server_error", "internal_error"
	}
}

// paramRE reads the field a Parley message names first ("messages[2].content: …").
var paramRE = regexp.MustCompile(`^([a-z_]+(\[\d+\])?(\.[a-z_]+(\[\d+\])?)*): `)

// unknownRE reads the field of an "unknown field" refusal.
var unknownRE = regexp.MustCompile(`^unknown field "([^"]+)"`)

// Detail is err as OpenAI's error object: the message redacted as every Parley error is, the
// type and code for its class, and the field it is about (param) when it names one.
func Detail(err error) ErrorDetail {
	code := parley.CodeOf(err)
	typ, c := errorType(code)
	msg := redact.String(parley.MessageOf(err))
	d := ErrorDetail{Message: msg, Type: typ, Code: &c}
	if code == parley.ECInvalid {
		if m := paramRE.FindStringSubmatch(msg); m != nil {
			d.Param = &m[1]
		} else if m := unknownRE.FindStringSubmatch(msg); m != nil {
			d.Param = &m[1]
		}
	}
	return d
}

// WriteError writes err in OpenAI's error shape with the given status; a rate_limited or
// unavailable error carries Retry-After.
func WriteError(w http.ResponseWriter, status int, err error) {
	code := parley.CodeOf(err)
	if ra := parley.RetryAfterOf(err); code == parley.ECRateLimited || code == parley.ECUnavailable {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(ra)))
	}
	writeJSON(w, status, ErrorBody{Detail(err)})
}

// retrySeconds rounds d up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
