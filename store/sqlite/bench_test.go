package sqlite

import (
	"context"
	"fmt"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

func benchSession(b *testing.B, s *Store, owner string) string {
	b.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: owner, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(context.Background(), sess); err != nil {
		b.Fatal(err)
	}
	return sess.ID
}

func benchMessage(i int) *parley.Message {
	return &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(fmt.Sprintf("message %d: a typical short chat line", i)),
		RunID: "run", CreatedAt: time.Now().UTC()}
}

// BenchmarkAppendOne appends one message per durable transaction (fsync on commit).
func BenchmarkAppendOne(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	sid := benchSession(b, s, "bench")
	ctx := context.Background()
	i := 0
	for b.Loop() {
		if err := s.AppendMessages(ctx, sid, benchMessage(i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkAppendBatch100 appends 100 messages per durable transaction.
func BenchmarkAppendBatch100(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	sid := benchSession(b, s, "bench")
	ctx := context.Background()
	batch := make([]*parley.Message, 100)
	for b.Loop() {
		for i := range batch {
			batch[i] = benchMessage(i)
		}
		if err := s.AppendMessages(ctx, sid, batch...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*len(batch))/b.Elapsed().Seconds(), "records/s")
}

// history10k returns a store holding one session of 10,000 messages: 2,500 rounds of a user
// question, an assistant tool call, its result and the answer.
func history10k(b *testing.B) *Store {
	b.Helper()
	s := openTemp(b)
	sid := benchSession(b, s, "bench")
	ok := true
	var batch []*parley.Message
	for i := 0; len(batch) < 10_000; i++ {
		id := fmt.Sprintf("call_%d", i)
		now := time.Now().UTC()
		batch = append(batch, benchMessage(i),
			&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: now, Usage: &parley.Usage{TotalTokens: 10},
				ToolCalls: []parley.ToolCall{{ID: id, Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"1+2"}`}}}},
			&parley.Message{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: id, Name: "calculator", Content: parley.Text("3"), Success: &ok, CreatedAt: now},
			&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("The answer is 3."), CreatedAt: now})
	}
	if err := s.AppendMessages(context.Background(), sid, batch...); err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkHistory10k loads a session of 10,000 messages.
func BenchmarkHistory10k(b *testing.B) {
	s := history10k(b)
	defer s.Close()
	sid := onlySession(b, s)
	b.ReportAllocs()
	for b.Loop() {
		h, err := s.History(context.Background(), sid)
		if err != nil || len(h) != 10_000 {
			b.Fatalf("%d %v", len(h), err)
		}
	}
}

// BenchmarkModelContext10k is what the agent loop does before each model call: read a
// 10,000-message session's model view and turn it into the model's message list.
func BenchmarkModelContext10k(b *testing.B) {
	s := history10k(b)
	defer s.Close()
	sid := onlySession(b, s)
	b.ReportAllocs()
	for b.Loop() {
		h, err := s.ModelHistory(context.Background(), sid)
		if err != nil || len(h) != 10_000 {
			b.Fatalf("%d %v", len(h), err)
		}
		if msgs := llmctx.Build(h, llmctx.Options{}); len(msgs) != 10_000 {
			b.Fatal(len(msgs))
		}
	}
}

func onlySession(b *testing.B, s *Store) string {
	var id string
	if err := s.DB().QueryRow(`SELECT id FROM sessions`).Scan(&id); err != nil {
		b.Fatal(err)
	}
	return id
}

// BenchmarkListSessionsPage reads one page of 50 from an owner with 10,000 sessions.
func BenchmarkListSessionsPage(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	ctx := context.Background()
	tx, _ := s.DB().Begin()
	for i := range 10_000 {
		t := time.Now().Add(time.Duration(i) * time.Second).UnixMicro()
		if _, err := tx.Exec(`INSERT INTO sessions (id, title, owner, created_at, updated_at) VALUES (?, 't', 'bench', ?, ?)`, parley.NewID(), t, t); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	_, cursor, _ := s.ListSessions(ctx, "bench", parley.Page{Limit: 5000})
	for b.Loop() {
		page, _, err := s.ListSessions(ctx, "bench", parley.Page{Cursor: cursor, Limit: 50})
		if err != nil || len(page) != 50 {
			b.Fatal(len(page), err)
		}
	}
}
