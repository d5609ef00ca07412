package postgres

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// BeginRun writes a new session's run in one batch, inserting the session as the steps it
// stands for would leave it; this holds it to those steps: the same begin done one step at a time
// (CreateSession, ReserveEventSeqs, CreateRun, AppendMessages) must leave the same rows.
func TestBeginRunOfANewSessionLeavesWhatItsStepsWould(t *testing.T) {
	s := openTest(t)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	for _, tc := range []struct {
		name   string
		parent string // the second message's ParentID
		one    bool   // the user's message alone (BeginRun's one statement)
	}{{"a chain", "", false}, {"a branch", parley.ParentRoot, false}, {"one message", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			begin := func() *parley.RunBegin {
				sess := &parley.Session{ID: parley.NewID(), Owner: "o", Title: "t", CreatedAt: now, UpdatedAt: now}
				run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", SelectedTools: []string{"x"},
					Instance: "i", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
				user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hi"), RunID: run.ID,
					CreatedAt: now.Add(time.Second)}
				call := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, RunID: run.ID, ParentID: tc.parent,
					ToolCalls: []parley.ToolCall{{ID: "c1", Type: "function", Function: parley.FunctionCall{Name: "x", Arguments: "{}"}}},
					Usage:     &parley.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7, Cost: 0.5}, CreatedAt: now.Add(2 * time.Second)}
				if tc.one {
					return &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user}}
				}
				return &parley.RunBegin{NewSession: sess, Reserve: 100, Run: run, Messages: []*parley.Message{user, call}}
			}
			fast, steps := begin(), begin()
			first, err := s.BeginRun(ctx, fast)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CreateSession(ctx, steps.NewSession); err != nil {
				t.Fatal(err)
			}
			sfirst, err := s.ReserveEventSeqs(ctx, steps.NewSession.ID, steps.Reserve)
			if err != nil {
				t.Fatal(err)
			}
			steps.Run.FirstSeq = sfirst
			if err := s.CreateRun(ctx, steps.Run); err != nil {
				t.Fatal(err)
			}
			if err := s.AppendMessages(ctx, steps.NewSession.ID, steps.Messages...); err != nil {
				t.Fatal(err)
			}
			if first != sfirst || fast.Run.FirstSeq != steps.Run.FirstSeq {
				t.Errorf("first event number %d (run's %d), the steps give %d (%d)", first, fast.Run.FirstSeq, sfirst, steps.Run.FirstSeq)
			}
			for i := range fast.Messages {
				f, st := fast.Messages[i], steps.Messages[i]
				if f.Seq != st.Seq || f.SessionID != fast.NewSession.ID || (f.ParentID == "") != (st.ParentID == "") {
					t.Errorf("message %d: seq %d, session %s, parent %q; the steps give seq %d, parent %q", i, f.Seq, f.SessionID, f.ParentID, st.Seq, st.ParentID)
				}
			}
			// The rows, with the ids that differ between the two replaced by their place.
			row := func(b *parley.RunBegin) string {
				ids := map[string]string{b.NewSession.ID: "session", b.Run.ID: "run"}
				for i, m := range b.Messages {
					ids[m.ID] = "message " + string(rune('0'+i))
				}
				var out []any
				for _, q := range []string{
					`SELECT to_jsonb(s) FROM sessions s WHERE id = $1`,
					`SELECT to_jsonb(r) FROM runs r WHERE session_id = $1`,
					`SELECT jsonb_agg(to_jsonb(m) ORDER BY seq) FROM messages m WHERE session_id = $1`,
				} {
					var v any
					if err := s.pool.QueryRow(ctx, q, b.NewSession.ID).Scan(&v); err != nil {
						t.Fatal(err)
					}
					out = append(out, replaceIDs(v, ids))
				}
				j, _ := json.Marshal(out)
				return string(j)
			}
			if f, st := row(fast), row(steps); f != st {
				t.Errorf("BeginRun left\n%s\nthe steps left\n%s", f, st)
			}
			// And the next numbers reserved follow on alike.
			a, err := s.ReserveEventSeqs(ctx, fast.NewSession.ID, 1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.ReserveEventSeqs(ctx, steps.NewSession.ID, 1)
			if err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Errorf("next event number %d, the steps give %d", a, b)
			}
		})
	}
}

// replaceIDs replaces, in a decoded JSON value, every string that is a key of ids by its value.
func replaceIDs(v any, ids map[string]string) any {
	switch v := v.(type) {
	case string:
		if r, ok := ids[v]; ok {
			return r
		}
	case map[string]any:
		for k, x := range v {
			v[k] = replaceIDs(x, ids)
		}
	case []any:
		for i, x := range v {
			v[i] = replaceIDs(x, ids)
		}
	}
	return v
}
