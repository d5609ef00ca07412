// Package rowcodec turns messages into the column values both SQL stores write, and cursors into
// the tokens both hand out, so that the stores differ only where their databases do.
package rowcodec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	parley "github.com/parleyhq/parley"
)

// Columns are a message's columns that need encoding. Each is nil for SQL NULL or a string.
type Columns struct {
	Text      any // string-form content
	Parts     any // array-form content, JSON
	ToolCalls any // JSON array
	Usage     any // JSON object
	Thinking  any // JSON array of thinking blocks
}

// Encode returns m's encoded columns.
func Encode(m *parley.Message) (Columns, error) {
	var c Columns
	switch {
	case m.Content.IsParts():
		b, err := json.Marshal(m.Content.Parts())
		if err != nil {
			return c, fmt.Errorf("content: %w", err)
		}
		c.Parts = string(b)
	case !m.Content.IsNull():
		c.Text = m.Content.String()
	}
	if len(m.ToolCalls) > 0 {
		b, err := json.Marshal(m.ToolCalls)
		if err != nil {
			return c, fmt.Errorf("tool_calls: %w", err)
		}
		c.ToolCalls = string(b)
	}
	if m.Usage != nil {
		b, err := json.Marshal(m.Usage)
		if err != nil {
			return c, fmt.Errorf("usage: %w", err)
		}
		c.Usage = string(b)
	}
	if len(m.ThinkingBlocks) > 0 {
		b, err := json.Marshal(m.ThinkingBlocks)
		if err != nil {
			return c, fmt.Errorf("thinking_blocks: %w", err)
		}
		c.Thinking = string(b)
	}
	return c, nil
}

// DecodeThinking fills m's thinking blocks from their column; nil is NULL.
func DecodeThinking(m *parley.Message, thinking []byte) error {
	if thinking == nil {
		return nil
	}
	if err := json.Unmarshal(thinking, &m.ThinkingBlocks); err != nil {
		return fmt.Errorf("message %s: thinking_blocks: %w", m.ID, err)
	}
	return nil
}

// DecodeJSON fills the JSON-encoded fields of m from their columns; a nil slice is NULL.
func DecodeJSON(m *parley.Message, parts, calls, usage []byte) error {
	if parts != nil {
		var ps []parley.Part
		if err := json.Unmarshal(parts, &ps); err != nil {
			return fmt.Errorf("message %s: parts: %w", m.ID, err)
		}
		m.Content = parley.Parts(ps...)
	}
	if calls != nil {
		if err := json.Unmarshal(calls, &m.ToolCalls); err != nil {
			return fmt.Errorf("message %s: tool_calls: %w", m.ID, err)
		}
	}
	if usage != nil {
		m.Usage = new(parley.Usage)
		if err := json.Unmarshal(usage, m.Usage); err != nil {
			return fmt.Errorf("message %s: usage: %w", m.ID, err)
		}
	}
	return nil
}

// Validate checks what every store requires of a message before it is appended.
func Validate(i int, m *parley.Message) error {
	if m.ID == "" || m.CreatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "message %d: id and created_at are required", i)
	}
	if !m.Role.Valid() {
		return parley.Errorf(parley.ECInvalid, "message %d: unknown role %q", i, m.Role)
	}
	if m.ParentID != "" && m.ParentID == m.ID {
		return parley.Errorf(parley.ECInvalid, "message %d: parent_id names the message itself", i)
	}
	if f := nulField(m); f != "" {
		// PostgreSQL's text and jsonb cannot hold U+0000; every store refuses it alike.
		return parley.Errorf(parley.ECInvalid, "message %d: %s contains a NUL character (U+0000)", i, f)
	}
	return nil
}

// nulField names the first field of m that holds a NUL character, or returns "".
func nulField(m *parley.Message) string {
	has := func(s string) bool { return strings.IndexByte(s, 0) >= 0 }
	if m.Content.IsParts() {
		for _, p := range m.Content.Parts() {
			if has(p.Text) || (p.ImageURL != nil && (has(p.ImageURL.URL) || has(p.ImageURL.Detail))) ||
				(p.File != nil && (has(p.File.FileID) || has(p.File.Filename) || has(p.File.FileData))) {
				return "content"
			}
		}
	} else if has(m.Content.String()) {
		return "content"
	}
	for _, c := range m.ToolCalls {
		if has(c.ID) || has(c.Type) || has(c.Function.Name) || has(c.Function.Arguments) || has(c.ThoughtSignature()) {
			return "tool_calls"
		}
	}
	for _, b := range m.ThinkingBlocks {
		if has(b.Type) || has(b.Thinking) || has(b.Signature) || has(b.Data) {
			return "thinking_blocks"
		}
	}
	for _, f := range [...]struct{ name, v string }{{"name", m.Name}, {"tool_call_id", m.ToolCallID},
		{"reasoning_content", m.Reasoning}, {"run_id", m.RunID}, {"model", m.Model}, {"resource_id", m.ResourceID}, {"server", m.Server}, {"id", m.ID}, {"parent_id", m.ParentID}} {
		if has(f.v) {
			return f.name
		}
	}
	return ""
}

// ResourceMeta checks what every store requires of a resource and returns its meta column: nil
// for SQL NULL, or the JSON text.
func ResourceMeta(r *parley.Resource) (any, error) {
	if r.ID == "" || r.SessionID == "" || r.Kind == "" || r.CreatedAt.IsZero() {
		return nil, parley.Errorf(parley.ECInvalid, "resource: id, session_id, kind and created_at are required")
	}
	if len(r.Meta) == 0 {
		return nil, nil
	}
	if !json.Valid(r.Meta) {
		return nil, parley.Errorf(parley.ECInvalid, "resource: meta is not valid JSON")
	}
	return string(r.Meta), nil
}

// TotalUsage sums the usage of msgs.
func TotalUsage(msgs []*parley.Message) parley.Usage {
	var total parley.Usage
	for _, m := range msgs {
		if m.Usage != nil {
			total.Add(*m.Usage)
		}
	}
	return total
}

// OpenCallsDelta is how msgs change a session's count of tool calls without a tool message: each
// assistant tool call adds one, each tool message takes one away.
func OpenCallsDelta(msgs []*parley.Message) int {
	n := 0
	for _, m := range msgs {
		switch {
		case m.Role == parley.RoleAssistant:
			n += len(m.ToolCalls)
		case m.Role == parley.RoleTool && m.ToolCallID != "":
			n--
		}
	}
	return n
}

// EncodeCursor returns the cursor of the session listing page that follows the session updated
// at upd (unix microseconds) with id.
func EncodeCursor(upd int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(upd, 10) + "/" + id))
}

// DecodeCursor reads a cursor EncodeCursor made; any other string is ECInvalid.
func DecodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if ts, id, ok := strings.Cut(string(b), "/"); ok && id != "" {
			if v, err := strconv.ParseInt(ts, 10, 64); err == nil {
				return v, id, nil
			}
		}
	}
	return 0, "", parley.Errorf(parley.ECInvalid, "cursor: not a cursor this server issued")
}

// Links are the parents AppendMessages gives a batch of messages.
type Links struct {
	// Parents[i] is the parent of message i ("" for none).
	Parents []string
	// Outside are the parents given explicitly that are not in the batch: the store checks that
	// each is a message of the session.
	Outside []string
	// Branches is true when the batch does not simply extend the session's chain: a message's
	// parent is not the message before it (the session's leaf, for the first).
	Branches bool
}

// LinkParents resolves the parents of msgs, appended to a session whose active leaf is leaf
// ("" when it has no message): a message's ParentID when given (parley.ParentRoot for none),
// else the message before it in the batch, or leaf for the first. It does not change msgs.
func LinkParents(msgs []*parley.Message, leaf string) Links {
	l := Links{Parents: make([]string, len(msgs))}
	prev := leaf
	var batch map[string]bool
	for i, m := range msgs {
		p := m.ParentID
		switch p {
		case "":
			p = prev
		case parley.ParentRoot:
			p = ""
		default:
			if !batch[p] {
				l.Outside = append(l.Outside, p)
			}
		}
		if p != prev {
			l.Branches = true
		}
		l.Parents[i] = p
		prev = m.ID
		if len(msgs) > 1 {
			if batch == nil {
				batch = make(map[string]bool, len(msgs))
			}
			batch[m.ID] = true
		}
	}
	return l
}

// Distinct returns ids without repeats, in their first order.
func Distinct(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// NewestInSubtree returns the newest message (the last in nodes, which are in seq order) of the
// subtree of id, id itself included: the most recent leaf under it. It returns "" when id is not
// in nodes.
func NewestInSubtree(nodes []parley.TreeNode, id string) string {
	in := map[string]bool{}
	newest := ""
	for _, n := range nodes {
		if n.ID == id || (n.ParentID != "" && in[n.ParentID]) {
			in[n.ID] = true
			newest = n.ID
		}
	}
	return newest
}

// Copies returns copies of a branch (in order) for a new session: new ids, each the parent of the
// next (parents[i] is the parent of copy i), Seq and SessionID cleared for the store to set.
func Copies(branch []parley.Message) (copies []parley.Message, parents []string) {
	copies = make([]parley.Message, len(branch))
	parents = make([]string, len(branch))
	for i, m := range branch {
		m.ID, m.Seq, m.SessionID, m.ParentID = parley.NewID(), 0, "", ""
		if i > 0 {
			parents[i] = copies[i-1].ID
		}
		copies[i] = m
	}
	return copies, parents
}

// ForkBranch is what both stores' Fork do before they write: it checks the new session into,
// reads with list (the store's ListBranch) the branch of sessionID that ends at messageID, and
// returns its copies for the new session (Copies), with a pointer to each. An unknown message,
// or a session deleted between list's reads (which then finds no message), is not found.
func ForkBranch(ctx context.Context, list func(ctx context.Context, sessionID, leaf string, afterSeq int64, limit int) ([]parley.Message, parley.BranchTip, error),
	sessionID, messageID string, into *parley.Session) (copies []parley.Message, parents []string, ptrs []*parley.Message, err error) {
	if into.ID == "" || into.CreatedAt.IsZero() || into.UpdatedAt.IsZero() {
		return nil, nil, nil, parley.Errorf(parley.ECInvalid, "session: id, created_at and updated_at are required")
	}
	if messageID == "" {
		return nil, nil, nil, fmt.Errorf("message %q: %w", messageID, parley.ErrNotFound)
	}
	path, _, err := list(ctx, sessionID, messageID, 0, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	if len(path) == 0 {
		// The session was deleted between ListBranch's reads (a fork racing a delete).
		return nil, nil, nil, fmt.Errorf("message %q: %w", messageID, parley.ErrNotFound)
	}
	copies, parents = Copies(path)
	ptrs = make([]*parley.Message, len(copies))
	for i := range copies {
		ptrs[i] = &copies[i]
	}
	return copies, parents, ptrs, nil
}

// ErrRunning refuses a switch of branch while a run is running in the session.
var ErrRunning = parley.Errorf(parley.ECConflict, "a run is in progress in this session: switch branches when it has ended")
