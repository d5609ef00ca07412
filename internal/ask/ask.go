// Package ask makes one model call outside a run's conversation, through the provider layer:
// the artifact model writing an artifact, the small model rewriting a search query.
package ask

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	parley "github.com/parleyhq/parley"
)

// Resolver maps a model name ("provider/model") to its provider and the name it knows.
type Resolver func(model string) (parley.Provider, string, error)

// Model is a configured model to ask.
type Model struct {
	Resolve Resolver
	Name    string
	// Timeout bounds one call (default 2 minutes).
	Timeout time.Duration
}

// Answer is a model's answer: its text and its reasoning, if it showed any.
type Answer struct {
	Content   string
	Reasoning string
	Usage     *parley.Usage
}

// Ask sends system and user to the model and returns its whole answer.
func (m Model) Ask(ctx context.Context, system, user string) (*Answer, error) {
	if m.Resolve == nil || m.Name == "" {
		return nil, errors.New("ask: no model configured")
	}
	prov, name, err := m.Resolve(m.Name)
	if err != nil {
		return nil, err
	}
	timeout := m.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := &parley.ChatRequest{Model: name, Messages: []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text(system)},
		{Role: parley.RoleUser, Content: parley.Text(user)},
	}}
	st, err := prov.Stream(ctx, req)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var b parley.ResponseBuilder
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ask %s: %w", m.Name, err)
		}
		b.Add(ev)
	}
	r := b.Response()
	return &Answer{Content: r.Content, Reasoning: r.Reasoning, Usage: r.Usage}, nil
}
