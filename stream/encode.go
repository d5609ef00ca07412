package stream

import (
	"encoding/json"
	"math"
	"strconv"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/jsonstr"
)

// encodeEvent returns ev's JSON, as json.Marshal writes it. The events of a streamed answer are
// mostly text deltas (chunk, reasoning) with a few others around them (start, the records of the
// question and the answer, usage, status, done): events whose fields are strings and numbers, a
// usage, or a message of text without tool calls are written here directly, which costs a
// fraction of encoding/json's reflection; the others go through json.Marshal.
func encodeEvent(ev *parley.Event) ([]byte, error) {
	if !directEvent(ev) {
		return marshal(ev)
	}
	n := 64 + len(ev.Type) + len(ev.RunID) + len(ev.SessionID) + len(ev.Model) + len(ev.Content) + len(ev.State) + len(ev.FinishReason)
	if m := ev.Message; m != nil {
		n += 384 + len(m.Content.String()) + len(m.Reasoning) + len(m.Name)
	}
	if ev.Usage != nil {
		n += 128
	}
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
	if ev.Message != nil {
		b = append(b, `,"message":`...)
		var ok bool
		if b, ok = appendMessage(b, ev.Message); !ok {
			return marshal(ev)
		}
	}
	if ev.Usage != nil {
		b = append(b, `,"usage":`...)
		var ok bool
		if b, ok = appendUsage(b, ev.Usage); !ok {
			return marshal(ev)
		}
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

// marshal is json.Marshal of a copy of ev, so that encodeEvent does not make its caller's event
// escape to the heap (a text delta's is never kept whole: Frame).
func marshal(ev *parley.Event) ([]byte, error) {
	e := *ev
	return json.Marshal(&e)
}

// directEvent reports whether ev has none of the fields encodeEvent leaves to json.Marshal: the
// only structures it may hold are a message of text without tool calls or thinking blocks, and
// a usage.
func directEvent(ev *parley.Event) bool {
	if ev.ToolCalls != nil || ev.ToolCall != nil || ev.Error != nil || ev.Todos != nil || ev.Memory != nil ||
		ev.Artifact != nil || ev.WebSearch != nil || ev.Image != nil || ev.Approval != nil {
		return false
	}
	m := ev.Message
	return m == nil || (!m.Content.IsParts() && len(m.ToolCalls) == 0 && len(m.ThinkingBlocks) == 0)
}

// appendMessage appends m as json.Marshal writes it, fields in the struct's order; false when
// one of them cannot be written so (then the caller leaves the event to json.Marshal). m is a
// message directEvent takes: text or null content, no tool calls, no thinking blocks.
func appendMessage(b []byte, m *parley.Message) ([]byte, bool) {
	b = append(b, `{"role":`...)
	b = appendString(b, string(m.Role))
	b = append(b, `,"content":`...)
	if m.Content.IsNull() {
		b = append(b, "null"...)
	} else {
		b = appendString(b, m.Content.String())
	}
	b = appendField(b, `,"name":`, m.Name)
	b = appendField(b, `,"tool_call_id":`, m.ToolCallID)
	b = appendField(b, `,"reasoning_content":`, m.Reasoning)
	b = appendField(b, `,"id":`, m.ID)
	b = appendField(b, `,"session_id":`, m.SessionID)
	if m.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendInt(b, m.Seq, 10)
	}
	b = appendField(b, `,"run_id":`, m.RunID)
	b = appendField(b, `,"model":`, m.Model)
	if m.LatencyMS != 0 {
		b = append(b, `,"latency_ms":`...)
		b = strconv.AppendInt(b, m.LatencyMS, 10)
	}
	if m.Usage != nil {
		b = append(b, `,"usage":`...)
		var ok bool
		if b, ok = appendUsage(b, m.Usage); !ok {
			return b, false
		}
	}
	if m.Success != nil {
		b = append(b, `,"success":`...)
		b = strconv.AppendBool(b, *m.Success)
	}
	b = appendField(b, `,"resource_id":`, m.ResourceID)
	b = appendField(b, `,"server":`, m.Server)
	b = appendField(b, `,"parent_id":`, m.ParentID)
	b = appendField(b, `,"error":`, string(m.Error))
	if !m.CreatedAt.IsZero() {
		b = append(b, `,"created_at":"`...)
		var err error
		// AppendText writes what MarshalJSON quotes, and refuses what it refuses.
		if b, err = m.CreatedAt.AppendText(b); err != nil {
			return b, false
		}
		b = append(b, '"')
	}
	return append(b, '}'), true
}

// appendUsage appends u as json.Marshal writes it; false when its cost is not a finite number
// (json.Marshal refuses it).
func appendUsage(b []byte, u *parley.Usage) ([]byte, bool) {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, u.PromptTokens, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, u.CompletionTokens, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, u.TotalTokens, 10)
	if u.ReasoningTokens != 0 {
		b = append(b, `,"reasoning_tokens":`...)
		b = strconv.AppendInt(b, u.ReasoningTokens, 10)
	}
	if u.CachedTokens != 0 {
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, u.CachedTokens, 10)
	}
	if u.Cost != 0 {
		if math.IsNaN(u.Cost) || math.IsInf(u.Cost, 0) {
			return b, false
		}
		b = append(b, `,"cost":`...)
		b = jsonstr.AppendFloat(b, u.Cost)
	}
	return append(b, '}'), true
}

// appendField appends key and s as a JSON string when s is not empty (omitempty).
func appendField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, key...), s)
}

// appendString appends s as a JSON string, escaped as encoding/json escapes it.
func appendString(b []byte, s string) []byte { return jsonstr.Append(b, s) }
