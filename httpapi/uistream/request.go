package uistream

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/chat"
)

// Triggers of a request, as DefaultChatTransport sends them.
const (
	TriggerSubmit     = "submit-message"
	TriggerRegenerate = "regenerate-message"
)

// MaxChatID bounds a chat id's length.
const MaxChatID = 64

// Request is the body of POST /api/v1/ui/chat: useChat's default body (id, messages, trigger,
// messageId) and what an app adds to it with the transport's body option. Fields Parley does not
// know are ignored (an app's own extras), except model and selected_tools, which it honours as
// POST /api/v1/chat does.
type Request struct {
	ID            string      `json:"id"`
	Messages      []UIRequest `json:"messages"`
	Trigger       string      `json:"trigger"`
	MessageID     string      `json:"messageId"`
	Model         string      `json:"model"`
	SelectedTools []string    `json:"selected_tools"`

	// Turn is the chat request the last user message makes (set by Check).
	Turn chat.Request `json:"-"`
	// Answers are the user's answers to tool approvals when the last message is the assistant's
	// with tool parts in state "approval-responded" (useChat's request after
	// addToolApprovalResponse; set by Check): no turn then, the run goes on.
	Answers []Answer `json:"-"`
}

// Answer is a user's answer to one tool approval, as useChat sends it.
type Answer struct {
	CallID   string
	Approved bool
	Reason   string
}

// UIRequest is a UIMessage as a client sends it; only what Parley reads of it.
type UIRequest struct {
	ID    string          `json:"id"`
	Role  string          `json:"role"`
	Parts []UIRequestPart `json:"parts"`
}

// UIRequestPart is one part of a sent UIMessage.
type UIRequestPart struct {
	Type      string `json:"type"`
	Text      string `json:"text"`
	MediaType string `json:"mediaType"`
	URL       string `json:"url"`
	// tool parts (type "tool-<name>" or "dynamic-tool")
	ToolCallID string      `json:"toolCallId"`
	State      string      `json:"state"`
	Approval   *UIApproval `json:"approval"`
}

// UIApproval is a tool part's approval; Approved is set once the user answered.
type UIApproval struct {
	ID       string `json:"id"`
	Approved *bool  `json:"approved"`
	Reason   string `json:"reason"`
}

// UnmarshalJSON decodes leniently: an app's extra fields, and the many fields of a UIMessage that
// Parley does not read, are not errors.
func (r *Request) UnmarshalJSON(b []byte) error {
	type plain Request
	return json.Unmarshal(b, (*plain)(r))
}

// Check validates the request and builds its Turn from the last message, which must be the
// user's: its text parts, joined by newlines, are the message, and its image file parts (data:
// or http(s) URLs) are attachments. Other parts (data-*, sources) are ignored; a file that is not
// an image is refused.
func (r *Request) Check() error {
	if err := CheckChatID(r.ID); err != nil {
		return err
	}
	switch r.Trigger {
	case "", TriggerSubmit, TriggerRegenerate:
	default:
		return parley.Errorf(parley.ECInvalid, "trigger: must be %q or %q", TriggerSubmit, TriggerRegenerate)
	}
	if err := parley.CheckText("messageId", r.MessageID, parley.TextName); err != nil {
		return err
	}
	if len(r.Messages) == 0 {
		return parley.Errorf(parley.ECInvalid, "messages: must hold at least the user's message")
	}
	n := len(r.Messages) - 1
	last := r.Messages[n]
	if last.Role == "assistant" && r.Trigger != TriggerRegenerate {
		return r.checkAnswers(n, last)
	}
	if r.Trigger != TriggerRegenerate && r.MessageID != "" {
		return parley.Errorf(parley.ECInvalid, "messageId: editing an earlier message is not supported (Parley keeps every turn); send a new message instead")
	}
	if last.Role != "user" {
		return parley.Errorf(parley.ECInvalid, "messages[%d].role: the last message must be the user's (role \"user\"), not %q", n, truncate(last.Role, 20))
	}
	var text []string
	var files []parley.Part
	for i, p := range last.Parts {
		switch p.Type {
		case "text":
			text = append(text, p.Text)
		case "file":
			if !strings.HasPrefix(p.MediaType, "image/") {
				return parley.Errorf(parley.ECInvalid, "messages[%d].parts[%d]: a file of type %q; only images are supported", n, i, truncate(p.MediaType, 40))
			}
			files = append(files, parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: p.URL}})
		}
	}
	r.Turn = chat.Request{Message: strings.Join(text, "\n"), BinaryContent: files, Model: r.Model, SelectedTools: r.SelectedTools}
	return nil
}

// checkAnswers reads the answers to tool approvals of the last message, the assistant's.
func (r *Request) checkAnswers(n int, last UIRequest) error {
	for i, p := range last.Parts {
		if p.State != "approval-responded" {
			continue
		}
		a := p.Approval
		if a == nil || a.Approved == nil {
			return parley.Errorf(parley.ECInvalid, "messages[%d].parts[%d].approval: approved is required in state approval-responded", n, i)
		}
		id := a.ID
		if id == "" {
			id = p.ToolCallID
		}
		if id == "" || len(id) > 128 {
			return parley.Errorf(parley.ECInvalid, "messages[%d].parts[%d].approval.id: not a tool call id", n, i)
		}
		if err := parley.CheckText(fmt.Sprintf("messages[%d].parts[%d].approval.id", n, i), id, parley.TextName); err != nil {
			return err
		}
		if err := parley.CheckText(fmt.Sprintf("messages[%d].parts[%d].approval.reason", n, i), a.Reason, parley.TextMessage); err != nil {
			return err
		}
		if utf8.RuneCountInString(a.Reason) > 2000 {
			return parley.Errorf(parley.ECInvalid, "messages[%d].parts[%d].approval.reason: at most 2000 characters", n, i)
		}
		r.Answers = append(r.Answers, Answer{CallID: id, Approved: *a.Approved, Reason: a.Reason})
	}
	if len(r.Answers) == 0 {
		return parley.Errorf(parley.ECInvalid, "messages[%d]: the last message must be the user's, or the assistant's with tool approvals answered (state approval-responded)", n)
	}
	return nil
}

// CheckChatID validates a chat id: 1 to MaxChatID letters, digits, '-' or '_' (useChat's
// generated ids, and Parley's session ids, are such).
func CheckChatID(id string) error {
	if !ValidChatID(id) {
		return parley.Errorf(parley.ECInvalid, "id: the chat id must be 1 to %d letters, digits, '-' or '_'", MaxChatID)
	}
	return nil
}

// ValidChatID reports whether CheckChatID accepts id.
func ValidChatID(id string) bool {
	if id == "" || len(id) > MaxChatID {
		return false
	}
	for _, c := range id {
		if !(c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}

// chatNamespace is the UUID namespace of session ids derived from chat ids.
var chatNamespace = uuid.MustParse("6f1c3c2e-8a55-4d0b-9b8e-2f7e0d5a91c4")

// SessionID maps a client's chat id to the Parley session that holds the chat, for owner:
//   - a chat id that is a UUID is the session's own id, so a client can open any of its sessions
//     (those made by Parley's other APIs too) by id;
//   - any other chat id (useChat generates 16 letters and digits) names the session whose id is
//     the name-based UUID (version 5) of owner and the chat id: two users' chats with the same id
//     are two sessions, and nobody reaches another's chat by guessing its id.
func SessionID(owner, chatID string) string {
	if u, err := uuid.Parse(chatID); err == nil && len(chatID) == 36 {
		return u.String()
	}
	return uuid.NewSHA1(chatNamespace, []byte(owner+"\x00"+chatID)).String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
