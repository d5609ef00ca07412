package uistream

import (
	"encoding/json"
	"strconv"
	"strings"

	parley "github.com/parleyhq/parley"
)

// UIMessage is the AI SDK's UIMessage: what GET /api/v1/ui/chat/{id}/messages lists.
type UIMessage struct {
	ID       string    `json:"id"`
	Role     string    `json:"role"`
	Metadata *Metadata `json:"metadata,omitempty"`
	Parts    []UIPart  `json:"parts"`
}

// UIPart is one part of a UIMessage: text, reasoning, file, step-start, or tool-<name>.
type UIPart struct {
	Type string `json:"type"`
	// reasoning
	ID string `json:"id,omitempty"`
	// text, reasoning
	Text *string `json:"text,omitempty"`
	// file
	MediaType string `json:"mediaType,omitempty"`
	URL       string `json:"url,omitempty"`
	// tool-<name>
	ToolCallID       string          `json:"toolCallId,omitempty"`
	State            string          `json:"state,omitempty"` // text and reasoning: "done"
	Input            json.RawMessage `json:"input,omitempty"`
	Output           *string         `json:"output,omitempty"`
	ErrorText        string          `json:"errorText,omitempty"`
	ProviderExecuted bool            `json:"providerExecuted,omitempty"`
	// a tool call that asked for approval (WithApprovals)
	Approval *PartApproval `json:"approval,omitempty"`
}

// PartApproval is a tool part's approval, as the AI SDK keeps it: its id (the call's), and once
// answered whether it was approved and the reason given.
type PartApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// WithApprovals marks the tool parts of msgs whose calls asked for approval, as useChat would
// hold them: a call still waiting is "approval-requested" (answer it with
// addToolApprovalResponse), a denied or expired one "output-denied" (with the reason), an
// approved one keeps its output and notes the approval.
func WithApprovals(msgs []UIMessage, recs []parley.ApprovalRecord) []UIMessage {
	if len(recs) == 0 {
		return msgs
	}
	byCall := make(map[string]*parley.ApprovalRecord, len(recs))
	for i := range recs {
		byCall[recs[i].CallID] = &recs[i]
	}
	for i := range msgs {
		for j := range msgs[i].Parts {
			p := &msgs[i].Parts[j]
			rec := byCall[p.ToolCallID]
			if rec == nil || !strings.HasPrefix(p.Type, "tool-") {
				continue
			}
			yes, no := true, false
			switch {
			case rec.State == parley.ApprovalPending && p.State == "input-available":
				p.State, p.Approval = "approval-requested", &PartApproval{ID: rec.CallID}
			case rec.State == parley.ApprovalApproved && p.State == "output-available":
				p.Approval = &PartApproval{ID: rec.CallID, Approved: &yes}
			case (rec.State == parley.ApprovalDenied || rec.State == parley.ApprovalExpired) && p.State == "output-error":
				p.State, p.ErrorText = "output-denied", ""
				p.Approval = &PartApproval{ID: rec.CallID, Approved: &no, Reason: rec.Answer}
			}
		}
	}
	return msgs
}

// FromHistory turns a session's stored messages into UIMessages: each user message is one
// (its id is the stored message's); the assistant and tool messages of one run are one assistant
// UIMessage whose id is the run's (the start chunk's messageId of its stream), with a step per
// stored assistant message. The result is what the run's UI stream assembles to, but for a draft
// that was never stored.
func FromHistory(msgs []parley.Message) []UIMessage {
	out := []UIMessage{}
	var cur *UIMessage // the assistant message being built
	var tools map[string]int
	steps := 0
	var usage parley.Usage
	hasUsage := false
	flush := func() {
		if cur == nil {
			return
		}
		if hasUsage {
			if cur.Metadata == nil {
				cur.Metadata = &Metadata{}
			}
			cur.Metadata.Usage = usageOf(usage)
		}
		out = append(out, *cur)
		cur = nil
	}
	for i := range msgs {
		m := &msgs[i]
		switch m.Role {
		case parley.RoleUser:
			flush()
			out = append(out, UIMessage{ID: m.ID, Role: "user", Parts: userParts(m.Content)})
		case parley.RoleAssistant, parley.RoleTool:
			group := m.RunID
			if group == "" {
				group = m.ID
			}
			if cur == nil || (cur.ID != group && m.RunID != "") {
				flush()
				cur = &UIMessage{ID: group, Role: "assistant", Parts: []UIPart{}}
				tools, steps, usage, hasUsage = map[string]int{}, 0, parley.Usage{}, false
			}
			if m.Role == parley.RoleTool {
				if at, ok := tools[m.ToolCallID]; ok {
					p := &cur.Parts[at]
					out := m.Content.String()
					if m.Success != nil && !*m.Success {
						p.State, p.ErrorText = "output-error", nonEmpty(out, "the tool failed")
					} else {
						p.State, p.Output = "output-available", &out
					}
					delete(tools, m.ToolCallID)
				}
				continue
			}
			steps++
			cur.Parts = append(cur.Parts, UIPart{Type: "step-start"})
			if m.Reasoning != "" {
				cur.Parts = append(cur.Parts, UIPart{Type: "reasoning", ID: "r" + strconv.Itoa(steps), Text: ptr(m.Reasoning), State: "done"})
			}
			if text := m.Content.String(); text != "" {
				cur.Parts = append(cur.Parts, UIPart{Type: "text", Text: ptr(text), State: "done"})
			}
			for _, c := range m.ToolCalls {
				tools[c.ID] = len(cur.Parts)
				cur.Parts = append(cur.Parts, UIPart{Type: "tool-" + c.Function.Name, ToolCallID: c.ID, State: "input-available",
					Input: ToolInput(c.Function.Arguments), ProviderExecuted: true})
			}
			if m.Model != "" {
				cur.Metadata = &Metadata{Model: m.Model}
			}
			if m.Usage != nil {
				usage.Add(*m.Usage)
				hasUsage = true
			}
		}
	}
	flush()
	return out
}

// userParts is a user message's content as parts: its text, and its images as file parts.
func userParts(c parley.Content) []UIPart {
	parts := c.Parts()
	if !c.IsParts() {
		return []UIPart{{Type: "text", Text: ptr(c.String())}}
	}
	out := make([]UIPart, 0, len(parts))
	for _, p := range parts {
		switch {
		case p.Type == "text":
			out = append(out, UIPart{Type: "text", Text: ptr(p.Text)})
		case p.Type == "image_url" && p.ImageURL != nil:
			out = append(out, UIPart{Type: "file", MediaType: imageType(p.ImageURL.URL), URL: p.ImageURL.URL})
		}
	}
	return out
}

// imageType is the media type of an image URL: a data: URL's own, else "image/*".
func imageType(u string) string {
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		if i := strings.IndexAny(rest, ";,"); i > 0 {
			return rest[:i]
		}
	}
	return "image/*"
}

func ptr(s string) *string { return &s }
