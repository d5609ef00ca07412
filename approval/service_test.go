package approval

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

func TestDecide(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "a.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, tool string }{{"c1", "rm"}, {"c2", "rm"}, {"c3", "ls"}, {"c4", "rm"}} {
		if _, err := st.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: sess.ID, CallID: c.id, Tool: c.tool, Arguments: `{"path": "/a"}`,
			CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	notified := 0
	svc := &Service{Store: st, Notify: func(context.Context, string) { notified++ },
		CheckArgs: func(tool string, args []byte) error {
			var m map[string]any
			json.Unmarshal(args, &m)
			if _, ok := m["path"].(string); !ok {
				return parley.Errorf(parley.ECInvalid, "path: must be a string")
			}
			return nil
		}}
	// The same arguments, written otherwise, are no edit.
	a, err := svc.Decide(ctx, "alice", sess.ID, "c4", Answer{Decision: DecisionApprove, Arguments: json.RawMessage(`{"path":"/a"}`)})
	if err != nil || a.Edited || a.Arguments != `{"path": "/a"}` {
		t.Fatalf("same arguments: %+v %v", a, err)
	}
	if _, err := svc.Decide(ctx, "alice", sess.ID, "c1", Answer{Decision: DecisionAlways, Arguments: json.RawMessage(`{"path":1}`)}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("bad edit: %v", err)
	}
	a, err = svc.Decide(ctx, "alice", sess.ID, "c1", Answer{Decision: DecisionAlways, Arguments: json.RawMessage(` {"path" : "/b"} `)})
	if err != nil || !a.Edited || !a.Always || a.Arguments != `{"path":"/b"}` || a.Decision != parley.ApprovalApproved {
		t.Fatalf("always with an edit: %+v %v", a, err)
	}
	// "Always" approved the tool's other waiting call (as the model asked it), not the other tool's.
	c2, _ := st.GetApproval(ctx, sess.ID, "c2")
	c3, _ := st.GetApproval(ctx, sess.ID, "c3")
	if c2.State != parley.ApprovalApproved || c2.Edited || c3.State != parley.ApprovalPending || notified != 2 {
		t.Fatalf("c2 %+v, c3 %+v, notified %d", c2, c3, notified)
	}
	if _, err := svc.Decide(ctx, "alice", sess.ID, "c2", Answer{Decision: DecisionDeny}); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("deciding c2 again: %v", err)
	}
	if _, err := svc.Decide(ctx, "alice", sess.ID, "nope", Answer{Decision: DecisionDeny}); parley.CodeOf(err) != parley.ECNotFound {
		t.Fatalf("unknown call: %v", err)
	}
	pending, _ := svc.Pending(ctx, sess.ID)
	if len(pending) != 1 || pending[0].CallID != "c3" || pending[0].ExpiresAt == nil {
		t.Fatalf("pending %+v", pending)
	}
}
