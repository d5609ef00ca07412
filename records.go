package parley

import (
	"encoding/json"
	"fmt"
	"time"
)

// Record is seed 000's typed view of a session: a message record, or a tool_call record that joins
// an assistant's tool call with the tool message that answered it.
type Record struct {
	Type string `json:"type"` // "message" or "tool_call"

	// type=message
	ID            string  `json:"id,omitempty"`
	Role          Role    `json:"role,omitempty"`
	Content       *string `json:"content,omitempty"`
	BinaryContent []Part  `json:"binary_content,omitempty"`
	Reasoning     string  `json:"reasoning_content,omitempty"`
	// Error is the code of the failure of a failed turn (Message.Error).
	Error ErrorCode `json:"error,omitempty"`

	// type=tool_call
	ToolCallID string          `json:"tool_call_id,omitempty"`
	ToolName   string          `json:"tool_name,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Result     any             `json:"result,omitempty"`
	Success    *bool           `json:"success,omitempty"`

	Timestamp time.Time `json:"timestamp"`
}

// Records turns a stored history into seed 000's records. An assistant message yields a message
// record when it has text or reasoning, then one tool_call record per call, in order; a call with
// no tool message yet has a nil Result and Success. Tool messages are folded into their records.
func Records(msgs []Message) []Record {
	results := make(map[string]*Message, len(msgs))
	for i := range msgs {
		if msgs[i].Role == RoleTool {
			results[msgs[i].ToolCallID] = &msgs[i]
		}
	}
	out := make([]Record, 0, len(msgs))
	for _, m := range msgs {
		switch {
		case m.Role == RoleTool:
			if !hasCall(msgs, m.ToolCallID) { // an orphan result: keep it visible
				out = append(out, toolRecord(ToolCall{ID: m.ToolCallID, Function: FunctionCall{Name: m.Name}}, &m, m.CreatedAt))
			}
		default:
			if m.Role != RoleAssistant || !m.Content.IsNull() && m.Content.String() != "" || m.Reasoning != "" || len(m.ToolCalls) == 0 {
				r := Record{Type: "message", ID: m.ID, Role: m.Role, Reasoning: m.Reasoning, Error: m.Error, Timestamp: m.CreatedAt}
				if !m.Content.IsNull() {
					s := m.Content.String()
					r.Content = &s
				}
				for _, p := range m.Content.Parts() {
					if p.Type != "text" {
						r.BinaryContent = append(r.BinaryContent, p)
					}
				}
				out = append(out, r)
			}
			for _, c := range m.ToolCalls {
				out = append(out, toolRecord(c, results[c.ID], m.CreatedAt))
			}
		}
	}
	return out
}

func hasCall(msgs []Message, id string) bool {
	for _, m := range msgs {
		for _, c := range m.ToolCalls {
			if c.ID == id {
				return true
			}
		}
	}
	return false
}

func toolRecord(c ToolCall, res *Message, at time.Time) Record {
	r := Record{Type: "tool_call", ToolCallID: c.ID, ToolName: c.Function.Name, Timestamp: at}
	if json.Valid([]byte(c.Function.Arguments)) {
		r.Arguments = json.RawMessage(c.Function.Arguments)
	} else if c.Function.Arguments != "" {
		b, _ := json.Marshal(c.Function.Arguments)
		r.Arguments = b
	}
	if res != nil {
		text := res.Content.String()
		var v any
		if err := json.Unmarshal([]byte(text), &v); err == nil {
			r.Result = v
		} else {
			r.Result = text
		}
		ok := res.Success == nil || *res.Success
		r.Success = &ok
		r.Timestamp = res.CreatedAt
	}
	return r
}

// CheckHistory reports the first way in which msgs is not a valid OpenAI chat history: an unknown
// role, a tool message that answers no pending call, or an assistant tool call that is not followed
// by exactly one tool message with its id before the next non-tool message.
func CheckHistory(msgs []Message) error {
	pending := map[string]bool{}
	for i, m := range msgs {
		if !m.Role.Valid() {
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if m.Role == RoleTool {
			if !pending[m.ToolCallID] {
				return fmt.Errorf("message %d: tool message %q answers no pending tool call", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			continue
		}
		if len(pending) > 0 {
			return fmt.Errorf("message %d: %d tool call(s) left without a tool message", i, len(pending))
		}
		for _, c := range m.ToolCalls {
			if m.Role != RoleAssistant {
				return fmt.Errorf("message %d: tool_calls on a %s message", i, m.Role)
			}
			if c.ID == "" || pending[c.ID] {
				return fmt.Errorf("message %d: tool call id %q empty or repeated", i, c.ID)
			}
			pending[c.ID] = true
		}
	}
	if len(pending) > 0 {
		return fmt.Errorf("history ends with %d tool call(s) left without a tool message", len(pending))
	}
	return nil
}
