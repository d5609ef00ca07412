package openaiapi

import (
	"context"
	"sync"
	"time"

	parley "github.com/parleyhq/parley"
)

// memConversation is the conversation of one stateless request, in memory: the agent loop
// (agent.Agent.WithStore) reads the history from it and appends its answers and tool results to
// it. It has the one session of its request, and implements only what the loop's Run calls
// (AppendMessages, ModelHistory, History, MarkToolCall, ToolCallStates); the rest of
// parley.Store is the embedded nil interface, never called on this path (a call would panic,
// which the HTTP server's recoverer answers 500, and the tests would catch).
type memConversation struct {
	parley.Store
	id string

	mu   sync.Mutex
	msgs []parley.Message
}

func newMemConversation(id string, msgs []parley.Message) *memConversation {
	c := &memConversation{id: id}
	for i := range msgs {
		m := msgs[i]
		m.SessionID, m.Seq = id, int64(i+1)
		c.msgs = append(c.msgs, m)
	}
	return c
}

func (c *memConversation) check(sessionID string) error {
	if sessionID != c.id {
		return parley.ErrNotFound
	}
	return nil
}

func (c *memConversation) AppendMessages(_ context.Context, sessionID string, msgs ...*parley.Message) error {
	if err := c.check(sessionID); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range msgs {
		m.SessionID, m.Seq = sessionID, int64(len(c.msgs)+1)
		c.msgs = append(c.msgs, *m)
	}
	return nil
}

func (c *memConversation) History(_ context.Context, sessionID string) ([]parley.Message, error) {
	if err := c.check(sessionID); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]parley.Message(nil), c.msgs...), nil
}

func (c *memConversation) ModelHistory(ctx context.Context, sessionID string) ([]parley.Message, error) {
	h, err := c.History(ctx, sessionID)
	for i := range h {
		h[i] = h[i].ModelView()
	}
	return h, err
}

// MarkToolCall keeps no ledger: a stateless request is not resumed after a crash.
func (c *memConversation) MarkToolCall(_ context.Context, sessionID, _, _, _, _ string, _ time.Time) error {
	return c.check(sessionID)
}

func (c *memConversation) ToolCallStates(_ context.Context, sessionID string, _ []string) (map[string]string, error) {
	return map[string]string{}, c.check(sessionID)
}
