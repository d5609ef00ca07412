package parley

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrorCode is a stable, client-visible classification of an error. httpapi maps each code to one
// HTTP status in one place.
type ErrorCode string

// The error codes.
const (
	ECInvalid     ErrorCode = "invalid"      // bad input: 400
	ECNotFound    ErrorCode = "not_found"    // 404
	ECConflict    ErrorCode = "conflict"     // 409, e.g. a run already active in the session
	ECForbidden   ErrorCode = "forbidden"    // 403
	ECUnauth      ErrorCode = "unauthorized" // 401
	ECRateLimited ErrorCode = "rate_limited" // 429
	ECUnavailable ErrorCode = "unavailable"  // 503: overloaded, shutting down, breaker open
	ECUpstream    ErrorCode = "upstream"     // 502: the model provider failed
	ECTimeout     ErrorCode = "timeout"      // 504
	ECCanceled    ErrorCode = "canceled"     // the run was aborted
	ECInternal    ErrorCode = "internal"     // 500: never carries details to a client
)

// Error is Parley's error type: a code and a message that is safe to show to a client.
// The wrapped error, if any, is for logs only.
type Error struct {
	Code    ErrorCode
	Message string
	Err     error
	// RetryAfter, when set on a rate_limited or unavailable error, tells the client when to try
	// again (the Retry-After header).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with a formatted client-safe message.
func Errorf(code ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WrapError returns an *Error that carries err for the logs and msg for the client.
func WrapError(code ErrorCode, err error, msg string) *Error {
	return &Error{Code: code, Message: msg, Err: err}
}

// RetryAfterOf returns the RetryAfter of the first *Error in err's chain that has one.
func RetryAfterOf(err error) time.Duration {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return 0
		}
		if e.RetryAfter > 0 {
			return e.RetryAfter
		}
		err = e.Err
	}
	return 0
}

// ErrNotFound is returned by stores for a missing session, message or resource.
var ErrNotFound = &Error{Code: ECNotFound, Message: "not found"}

// CodeOf returns the code of the first *Error in err's chain, or ECInternal.
func CodeOf(err error) ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ECInternal
}

// MessageOf returns a client-safe message for err: the message of its *Error, or a generic one.
func MessageOf(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Code != ECInternal {
		return e.Message
	}
	return "internal error"
}

// StatusError is a model provider's answer with a non-2xx HTTP status. It is wrapped in an *Error;
// Message is the provider's own text, for logs only.
type StatusError struct {
	StatusCode int
	RetryAfter time.Duration // from Retry-After (seconds or an HTTP date) or retry-after-ms; 0 if none
	Type       string        // the provider's error type or status, e.g. "overloaded_error", if it sent one
	Code       string        // the provider's error code, e.g. "rate_limit_exceeded", if it sent one
	Message    string        // the provider's error message, truncated, with the API key redacted
}

func (e *StatusError) Error() string {
	s := "HTTP " + strconv.Itoa(e.StatusCode)
	if e.Code != "" {
		s += " (" + e.Code + ")"
	} else if e.Type != "" {
		s += " (" + e.Type + ")"
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}
