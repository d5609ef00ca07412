package stream

import (
	"encoding/json"
	"strconv"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/jsonstr"
)

// encodeEvent returns ev's JSON, as json.Marshal writes it. The events of a streamed answer are
// mostly text deltas (chunk, reasoning) with a few plain ones around them (start, status, done):
// events whose only fields are strings and numbers are written here directly, which costs a
// fraction of encoding/json's reflection; the others go through json.Marshal.
func encodeEvent(ev *parley.Event) ([]byte, error) {
	if !plainEvent(ev) {
		return json.Marshal(ev)
	}
	n := 64 + len(ev.Type) + len(ev.RunID) + len(ev.SessionID) + len(ev.Model) + len(ev.Content) + len(ev.State) + len(ev.FinishReason)
	b := make([]byte, 0, n+n/8)
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, ev.Seq, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, string(ev.Type))
	b = append(b, `,"run_id":`...)
	b = appendString(b, ev.RunID)
	b = append(b, `,"session_id":`...)
	b = appendString(b, ev.SessionID)
	if ev.Model != "" {
		b = append(b, `,"model":`...)
		b = appendString(b, ev.Model)
	}
	if ev.Content != "" {
		b = append(b, `,"content":`...)
		b = appendString(b, ev.Content)
	}
	if ev.State != "" {
		b = append(b, `,"state":`...)
		b = appendString(b, ev.State)
	}
	if ev.FinishReason != "" {
		b = append(b, `,"finish_reason":`...)
		b = appendString(b, ev.FinishReason)
	}
	if ev.Iterations != 0 {
		b = append(b, `,"iterations":`...)
		b = strconv.AppendInt(b, int64(ev.Iterations), 10)
	}
	return append(b, '}'), nil
}

// plainEvent reports whether ev has none of the fields encodeEvent leaves to json.Marshal.
func plainEvent(ev *parley.Event) bool {
	return ev.Message == nil && ev.ToolCalls == nil && ev.ToolCall == nil && ev.Usage == nil && ev.Error == nil &&
		ev.Todos == nil && ev.Memory == nil && ev.Artifact == nil && ev.WebSearch == nil && ev.Image == nil && ev.Approval == nil
}

// appendString appends s as a JSON string, escaped as encoding/json escapes it.
func appendString(b []byte, s string) []byte { return jsonstr.Append(b, s) }
