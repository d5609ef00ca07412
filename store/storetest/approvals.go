package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func testApprovals(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	other := newSession(t, s, "alice", base)
	rec := &parley.ApprovalRecord{SessionID: sess.ID, CallID: "call_1", RunID: "run1", Tool: "mcp_fs_delete", Server: "fs",
		Arguments: `{"path":"/x"}`, Why: "the tool may change or delete data", CreatedAt: base, ExpiresAt: base.Add(10 * time.Minute)}
	got, err := s.CreateApproval(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != parley.ApprovalPending || got.Tool != rec.Tool || got.Server != "fs" || got.Arguments != rec.Arguments ||
		got.Why != rec.Why || !got.CreatedAt.Equal(base) || !got.ExpiresAt.Equal(rec.ExpiresAt) || !got.DecidedAt.IsZero() || got.RunID != "run1" {
		t.Fatalf("CreateApproval = %+v", got)
	}
	// A second create of the same call (a run taken over) gives back the stored one unchanged.
	again := *rec
	again.RunID, again.Arguments, again.ExpiresAt = "run2", `{"path":"/y"}`, base.Add(time.Hour)
	got2, err := s.CreateApproval(ctx, &again)
	if err != nil || got2.RunID != "run1" || got2.Arguments != rec.Arguments || !got2.ExpiresAt.Equal(rec.ExpiresAt) {
		t.Fatalf("CreateApproval again = %+v, %v", got2, err)
	}
	if _, err := s.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: "nope", CallID: "c", Tool: "t", CreatedAt: base, ExpiresAt: base}); !isNotFound(err) {
		t.Fatalf("approval of an unknown session: %v", err)
	}
	// Another session may hold an approval of the same call id.
	if _, err := s.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: other.ID, CallID: "call_1", Tool: "calculator", Arguments: "{}",
		CreatedAt: base, ExpiresAt: base.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	second := &parley.ApprovalRecord{SessionID: sess.ID, CallID: "call_2", RunID: "run1", Tool: "calculator", Arguments: `{"expression":"1+1"}`,
		CreatedAt: base.Add(time.Second), ExpiresAt: base.Add(time.Minute)}
	if _, err := s.CreateApproval(ctx, second); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListApprovals(ctx, sess.ID, true)
	if err != nil || len(list) != 2 || list[0].CallID != "call_1" || list[1].CallID != "call_2" {
		t.Fatalf("ListApprovals pending = %+v, %v", list, err)
	}

	// Approved with edited arguments and "always": both argument strings are kept.
	at := base.Add(2 * time.Second)
	dec, err := s.DecideApproval(ctx, sess.ID, "call_1", parley.ApprovalDecision{State: parley.ApprovalApproved, RunArguments: `{"path":"/tmp/x"}`,
		Edited: true, Always: true, DecidedBy: "alice", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if dec.State != parley.ApprovalApproved || dec.Arguments != `{"path":"/x"}` || dec.RunArguments != `{"path":"/tmp/x"}` || !dec.Edited ||
		!dec.Always || dec.DecidedBy != "alice" || !dec.DecidedAt.Equal(at) {
		t.Fatalf("DecideApproval = %+v", dec)
	}
	if r := dec.Resolved(); r.Decision != parley.ApprovalApproved || r.Arguments != `{"path":"/tmp/x"}` || !r.Edited || !r.Always {
		t.Fatalf("Resolved = %+v", r)
	}
	// A decided call cannot be decided again.
	if _, err := s.DecideApproval(ctx, sess.ID, "call_1", parley.ApprovalDecision{State: parley.ApprovalDenied, At: at}); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("deciding twice: %v", err)
	}
	if _, err := s.DecideApproval(ctx, sess.ID, "call_9", parley.ApprovalDecision{State: parley.ApprovalDenied, At: at}); !isNotFound(err) {
		t.Fatalf("deciding an unknown call: %v", err)
	}
	if _, err := s.DecideApproval(ctx, sess.ID, "call_2", parley.ApprovalDecision{State: "maybe", At: at}); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("an unknown decision: %v", err)
	}
	if _, err := s.DecideApproval(ctx, sess.ID, "call_2", parley.ApprovalDecision{State: parley.ApprovalDenied, Answer: "not now", DecidedBy: "alice", At: at}); err != nil {
		t.Fatal(err)
	}
	g, err := s.GetApproval(ctx, sess.ID, "call_2")
	if err != nil || g.State != parley.ApprovalDenied || g.Answer != "not now" || g.Always {
		t.Fatalf("GetApproval = %+v, %v", g, err)
	}
	if _, err := s.GetApproval(ctx, sess.ID, "call_9"); !isNotFound(err) {
		t.Fatalf("GetApproval unknown: %v", err)
	}
	if list, _ := s.ListApprovals(ctx, sess.ID, true); len(list) != 0 {
		t.Fatalf("pending after the decisions: %+v", list)
	}
	if all, _ := s.ListApprovals(ctx, sess.ID, false); len(all) != 2 {
		t.Fatalf("all approvals: %+v", all)
	}
	allowed, err := s.AlwaysAllowed(ctx, sess.ID)
	if err != nil || !slices.Equal(allowed, []string{"mcp_fs_delete"}) {
		t.Fatalf("AlwaysAllowed = %v, %v", allowed, err)
	}
	if allowed, _ := s.AlwaysAllowed(ctx, other.ID); len(allowed) != 0 {
		t.Fatalf("AlwaysAllowed of another session = %v", allowed)
	}
	// Deleting the session deletes its approvals.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetApproval(ctx, sess.ID, "call_1"); !isNotFound(err) {
		t.Fatalf("approval of a deleted session: %v", err)
	}
}

func testProjectToolPolicy(t *testing.T, s parley.Store) {
	p := newProject(t, s, "alice", "P", base)
	if got, _ := s.GetProject(ctx, p.ID); got.ToolPolicy != nil {
		t.Fatalf("a new project's policy = %v", got.ToolPolicy)
	}
	p.ToolPolicy = map[string]string{"mcp_fs_*": parley.PolicyAsk, "calculator": parley.PolicyAuto}
	p.UpdatedAt = base.Add(time.Second)
	if err := s.UpdateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetProject(ctx, p.ID)
	if err != nil || !maps.Equal(got.ToolPolicy, p.ToolPolicy) {
		t.Fatalf("policy after update = %v, %v", got, err)
	}
	p.ToolPolicy = nil
	if err := s.UpdateProject(ctx, p); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetProject(ctx, p.ID); got.ToolPolicy != nil {
		t.Fatalf("cleared policy = %v", got.ToolPolicy)
	}
}

// testApprovalsSweep: DeleteDecidedApprovalsBefore deletes the approvals decided before its time
// (approved, denied, expired) and the pending ones that expired before it; it keeps those decided
// or expiring after it, the pending ones still waiting, and those that allowed a tool "always"
// (the session's allowance stays).
func testApprovalsSweep(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	mk := func(id, tool string, expires time.Time) {
		t.Helper()
		if _, err := s.CreateApproval(ctx, &parley.ApprovalRecord{SessionID: sess.ID, CallID: id, RunID: "r", Tool: tool, Arguments: "{}",
			CreatedAt: base, ExpiresAt: expires}); err != nil {
			t.Fatal(err)
		}
	}
	decide := func(id string, d parley.ApprovalDecision) {
		t.Helper()
		if _, err := s.DecideApproval(ctx, sess.ID, id, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"approved_old", "denied_old", "expired_old", "always_old", "approved_new"} {
		mk(id, "t_"+id, at(100))
	}
	mk("pending_expired", "t_pe", at(5))
	mk("pending_waiting", "t_pw", at(100))
	decide("approved_old", parley.ApprovalDecision{State: parley.ApprovalApproved, At: at(1)})
	decide("denied_old", parley.ApprovalDecision{State: parley.ApprovalDenied, Answer: "no", At: at(2)})
	decide("expired_old", parley.ApprovalDecision{State: parley.ApprovalExpired, At: at(3)})
	decide("always_old", parley.ApprovalDecision{State: parley.ApprovalApproved, Always: true, At: at(4)})
	decide("approved_new", parley.ApprovalDecision{State: parley.ApprovalApproved, At: at(20)})

	n, err := s.DeleteDecidedApprovalsBefore(ctx, at(10))
	if err != nil || n != 4 {
		t.Fatalf("DeleteDecidedApprovalsBefore = %d, %v; want 4", n, err)
	}
	if left, want := ApprovalCallIDs(t, s, sess.ID), []string{"always_old", "approved_new", "pending_waiting"}; !slices.Equal(left, want) {
		t.Fatalf("approvals left %v, want %v", left, want)
	}
	if tools, err := s.AlwaysAllowed(ctx, sess.ID); err != nil || !slices.Equal(tools, []string{"t_always_old"}) {
		t.Fatalf("AlwaysAllowed after the sweep = %v, %v", tools, err)
	}
	if n, err := s.DeleteDecidedApprovalsBefore(ctx, at(10)); err != nil || n != 0 {
		t.Fatalf("a second sweep = %d, %v; want 0", n, err)
	}
}

// ApprovalCallIDs returns the call ids of the session's approvals (pending or decided), sorted.
func ApprovalCallIDs(t testing.TB, s parley.ApprovalStore, sessionID string) []string {
	t.Helper()
	list, err := s.ListApprovals(ctx, sessionID, false)
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{}
	for _, a := range list {
		ids = append(ids, a.CallID)
	}
	slices.Sort(ids)
	return ids
}
