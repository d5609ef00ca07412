// Package storetest is the contract suite every parley.Store implementation must pass. A store
// package calls Run from its own tests with a function that opens a fresh, empty store.
package storetest

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// Run runs the contract suite. open must return a new, empty store; Run closes it.
func Run(t *testing.T, open func(t *testing.T) parley.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s parley.Store)
	}{
		{"SessionCreateGet", testSessionCreateGet},
		{"SessionNotFound", testSessionNotFound},
		{"ListSessionsPaging", testListSessionsPaging},
		{"ListSessionsTies", testListSessionsTies},
		{"ListSessionsByTitle", testListSessionsByTitle},
		{"ListSessionsBadCursor", testListSessionsBadCursor},
		{"Rename", testRename},
		{"DeleteCascades", testDeleteCascades},
		{"AppendSeqAndTouch", testAppendSeqAndTouch},
		{"AppendUnknownSession", testAppendUnknownSession},
		{"AppendConcurrent", testAppendConcurrent},
		{"AppendAtomic", testAppendAtomic},
		{"ListMessagesPaging", testListMessagesPaging},
		{"RoundTrip", testRoundTrip},
		{"Resources", testResources},
		{"Goldens", testGoldens},
		{"ModelHistory", testModelHistory},
		{"Usage", testUsage},
		{"RejectsNUL", testRejectsNUL},
		{"OpenToolCalls", testOpenToolCalls},
		{"APIKeys", testAPIKeys},
		{"APIKeyExpiry", testAPIKeyExpiry},
		{"EventSeqs", testEventSeqs},
		{"Events", testEvents},
		{"Runs", testRuns},
		{"RunClaims", testRunClaims},
		{"RestartClaims", testRestartClaims},
		{"ToolCallLedger", testToolCallLedger},
		{"OpenToolCallsOfRunningRun", testOpenToolCallsOfRunningRun},
		{"Files", testFiles},
		{"FileQuota", testFileQuota},
		{"FileQuotaConcurrent", testFileQuotaConcurrent},
		{"Todos", testTodos},
		{"Projects", testProjects},
		{"SessionProjects", testSessionProjects},
		{"Memory", testMemory},
		{"Artifacts", testArtifacts},
		{"SearchCosts", testSearchCosts},
		{"BeginRun", testBeginRun},
		{"BeginRunWithLeaf", testBeginRunWithLeaf},
		{"FinishRunWithEnd", testFinishRunWithEnd},
		{"ConcurrentWritesFailAlone", testConcurrentWritesFailAlone},
		{"ConcurrentEventStreams", testConcurrentEventStreams},
		{"BranchChain", testBranchChain},
		{"BranchConcurrent", testBranchConcurrent},
		{"BranchEdits", testBranchEdits},
		{"BranchBadInput", testBranchBadInput},
		{"BranchSwitchUnderRun", testBranchSwitchUnderRun},
		{"Fork", testFork},
		{"ForkKeepsFiles", testForkKeepsFiles},
		{"ForkKeepsArtifacts", testForkKeepsArtifacts},
		{"InLineage", testInLineage},
		{"ForkDeleteConcurrent", testForkDeleteConcurrent},
		{"BranchProperty", testBranchProperty},
		{"Approvals", testApprovals},
		{"ApprovalsSweep", testApprovalsSweep},
		{"ProjectToolPolicy", testProjectToolPolicy},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

var ctx = context.Background()

// base is a fixed instant with microsecond precision, the precision stores keep.
var base = time.Date(2026, 11, 22, 10, 0, 0, 123456000, time.UTC)

func newSession(t *testing.T, s parley.Store, owner string, at time.Time) *parley.Session {
	t.Helper()
	sess := &parley.Session{ID: parley.NewID(), Title: "Chat of " + owner, Owner: owner, CreatedAt: at, UpdatedAt: at}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatalf("CreateSession: %v", err)
	}
	return sess
}

func msg(role parley.Role, text string, at time.Time) *parley.Message {
	return &parley.Message{ID: parley.NewID(), Role: role, Content: parley.Text(text), CreatedAt: at}
}

func isNotFound(err error) bool {
	return errors.Is(err, parley.ErrNotFound) || parley.CodeOf(err) == parley.ECNotFound
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func testSessionCreateGet(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if jsonOf(t, got) != jsonOf(t, sess) {
		t.Fatalf("got %s, want %s", jsonOf(t, got), jsonOf(t, sess))
	}
	if err := s.CreateSession(ctx, &parley.Session{ID: sess.ID, Owner: "x", CreatedAt: base, UpdatedAt: base}); err == nil {
		t.Fatal("a second session with the same id was accepted")
	}
}

func testSessionNotFound(t *testing.T, s parley.Store) {
	id := parley.NewID()
	if _, err := s.GetSession(ctx, id); !isNotFound(err) {
		t.Fatalf("GetSession: %v", err)
	}
	if _, err := s.RenameSession(ctx, id, "x", base); !isNotFound(err) {
		t.Fatalf("RenameSession: %v", err)
	}
	if err := s.DeleteSession(ctx, id); !isNotFound(err) {
		t.Fatalf("DeleteSession: %v", err)
	}
	if _, err := s.GetResource(ctx, id); !isNotFound(err) {
		t.Fatalf("GetResource: %v", err)
	}
	if msgs, err := s.History(ctx, id); err != nil || len(msgs) != 0 {
		t.Fatalf("History of an unknown session: %v %v", msgs, err)
	}
}

// listAll walks every page of owner's sessions.
func listAll(t *testing.T, s parley.Store, owner string, limit int) []parley.Session {
	t.Helper()
	var all []parley.Session
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("paging does not end")
		}
		page, next, err := s.ListSessions(ctx, owner, parley.Page{Cursor: cursor, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > limit {
			t.Fatalf("page of %d, limit %d", len(page), limit)
		}
		all = append(all, page...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func testListSessionsPaging(t *testing.T, s parley.Store) {
	var want []string
	for i := range 23 {
		sess := newSession(t, s, "alice", base.Add(time.Duration(i)*time.Second))
		want = append([]string{sess.ID}, want...) // newest first
		if i%5 == 0 {
			newSession(t, s, "bob", base.Add(time.Duration(i)*time.Second))
		}
	}
	for _, limit := range []int{1, 5, 23, 100} {
		got := listAll(t, s, "alice", limit)
		var ids []string
		for _, g := range got {
			if g.Owner != "alice" {
				t.Fatalf("listed %s's session", g.Owner)
			}
			ids = append(ids, g.ID)
		}
		if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Fatalf("limit %d: got %d sessions in order %v, want %v", limit, len(ids), ids, want)
		}
	}
	if got := listAll(t, s, "nobody", 10); len(got) != 0 {
		t.Fatalf("unknown owner: %v", got)
	}
	// A message moves its session to the front.
	oldest := want[len(want)-1]
	if err := s.AppendMessages(ctx, oldest, msg(parley.RoleUser, "bump", base.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	if first, _, _ := s.ListSessions(ctx, "alice", parley.Page{Limit: 1}); len(first) != 1 || first[0].ID != oldest {
		t.Fatalf("after a new message the session is not first: %v", first)
	}
}

func testListSessionsTies(t *testing.T, s parley.Store) {
	seen := map[string]bool{}
	for range 7 {
		seen[newSession(t, s, "carol", base).ID] = false
	}
	got := listAll(t, s, "carol", 2)
	if len(got) != 7 {
		t.Fatalf("listed %d of 7 sessions with equal updated_at", len(got))
	}
	for _, g := range got {
		if seen[g.ID] {
			t.Fatalf("session %s listed twice", g.ID)
		}
		seen[g.ID] = true
	}
}

func testListSessionsBadCursor(t *testing.T, s parley.Store) {
	newSession(t, s, "dave", base)
	for _, c := range []string{"garbage!", "bm90LWEtY3Vyc29y"} {
		if _, _, err := s.ListSessions(ctx, "dave", parley.Page{Cursor: c, Limit: 5}); parley.CodeOf(err) != parley.ECInvalid {
			t.Fatalf("cursor %q: err = %v, want invalid", c, err)
		}
	}
}

func testRename(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	later := base.Add(time.Minute)
	got, err := s.RenameSession(ctx, sess.ID, "Renamed ✓", later)
	if err != nil {
		t.Fatal(err)
	}
	if got.Title != "Renamed ✓" || !got.UpdatedAt.Equal(later) || !got.CreatedAt.Equal(base) {
		t.Fatalf("renamed: %+v", got)
	}
	again, _ := s.GetSession(ctx, sess.ID)
	if jsonOf(t, again) != jsonOf(t, got) {
		t.Fatalf("read back %+v, want %+v", again, got)
	}
}

func testDeleteCascades(t *testing.T, s parley.Store) {
	keep := newSession(t, s, "alice", base)
	gone := newSession(t, s, "alice", base)
	res := &parley.Resource{ID: parley.NewID(), SessionID: gone.ID, Kind: "file", URI: "file:///tmp/a", CreatedAt: base}
	if err := s.PutResource(ctx, res); err != nil {
		t.Fatal(err)
	}
	tool := msg(parley.RoleTool, "see resource", base)
	tool.ToolCallID, tool.ResourceID = "call_1", res.ID
	call := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: base,
		ToolCalls: []parley.ToolCall{{ID: "call_1", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{}"}}}}
	for _, id := range []string{keep.ID, gone.ID} {
		m := msg(parley.RoleUser, "hi", base)
		if err := s.AppendMessages(ctx, id, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendMessages(ctx, gone.ID, call, tool); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSession(ctx, gone.ID); !isNotFound(err) {
		t.Fatalf("deleted session still there: %v", err)
	}
	if h, _ := s.History(ctx, gone.ID); len(h) != 0 {
		t.Fatalf("deleted session kept %d messages", len(h))
	}
	if _, err := s.GetResource(ctx, res.ID); !isNotFound(err) {
		t.Fatalf("deleted session kept its resource: %v", err)
	}
	if h, _ := s.History(ctx, keep.ID); len(h) != 1 {
		t.Fatalf("other session lost messages: %d", len(h))
	}
}

func testAppendSeqAndTouch(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	a, b := msg(parley.RoleUser, "one", base.Add(time.Second)), msg(parley.RoleAssistant, "two", base.Add(2*time.Second))
	if err := s.AppendMessages(ctx, sess.ID, a, b); err != nil {
		t.Fatal(err)
	}
	c := msg(parley.RoleUser, "three", base.Add(3*time.Second))
	if err := s.AppendMessages(ctx, sess.ID, c); err != nil {
		t.Fatal(err)
	}
	for i, m := range []*parley.Message{a, b, c} {
		if m.Seq != int64(i+1) || m.SessionID != sess.ID {
			t.Fatalf("message %d: seq %d session %q", i, m.Seq, m.SessionID)
		}
	}
	got, _ := s.GetSession(ctx, sess.ID)
	if !got.UpdatedAt.Equal(c.CreatedAt) {
		t.Fatalf("updated_at %v, want %v", got.UpdatedAt, c.CreatedAt)
	}
	if err := s.AppendMessages(ctx, sess.ID); err != nil {
		t.Fatalf("appending nothing: %v", err)
	}
	if err := s.AppendMessages(ctx, sess.ID, &parley.Message{Role: parley.RoleUser, Content: parley.Text("no id")}); err == nil {
		t.Fatal("a message without id and created_at was accepted")
	}
}

func testAppendUnknownSession(t *testing.T, s parley.Store) {
	id := parley.NewID()
	if err := s.AppendMessages(ctx, id, msg(parley.RoleUser, "x", base)); !isNotFound(err) {
		t.Fatalf("err = %v, want not found", err)
	}
	if h, _ := s.History(ctx, id); len(h) != 0 {
		t.Fatalf("wrote %d messages to an unknown session", len(h))
	}
}

func testAppendConcurrent(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	const writers, each = 8, 10
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				m := msg(parley.RoleUser, fmt.Sprintf("w%d-%d", w, i), base)
				errs <- s.AppendMessages(ctx, sess.ID, m, msg(parley.RoleAssistant, "reply", base))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != writers*each*2 {
		t.Fatalf("%d messages, want %d", len(h), writers*each*2)
	}
	for i, m := range h {
		if m.Seq != int64(i+1) {
			t.Fatalf("message %d has seq %d", i, m.Seq)
		}
		// A batch stays together: each user message is directly followed by its reply.
		if i%2 == 1 && (m.Role != parley.RoleAssistant || h[i-1].Role != parley.RoleUser) {
			t.Fatalf("batches interleaved at %d", i)
		}
	}
}

func testAppendAtomic(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	good := msg(parley.RoleUser, "kept out too", base)
	bad := msg(parley.RoleTool, "refers to nothing", base)
	bad.ToolCallID, bad.ResourceID = "call_x", parley.NewID()
	if err := s.AppendMessages(ctx, sess.ID, good, bad); err == nil {
		t.Fatal("a message naming an unknown resource was accepted")
	}
	if h, _ := s.History(ctx, sess.ID); len(h) != 0 {
		t.Fatalf("a failed batch left %d messages", len(h))
	}
	dup := msg(parley.RoleUser, "first", base)
	if err := s.AppendMessages(ctx, sess.ID, dup); err != nil {
		t.Fatal(err)
	}
	again := *dup
	if err := s.AppendMessages(ctx, sess.ID, msg(parley.RoleUser, "second", base), &again); err == nil {
		t.Fatal("a repeated message id was accepted")
	}
	if h, _ := s.History(ctx, sess.ID); len(h) != 1 {
		t.Fatalf("a failed batch left %d messages", len(h))
	}
	// The next append continues the sequence without a gap.
	next := msg(parley.RoleUser, "third", base)
	if err := s.AppendMessages(ctx, sess.ID, next); err != nil || next.Seq != 2 {
		t.Fatalf("seq after failed batches: %d %v", next.Seq, err)
	}
}

func testListMessagesPaging(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	var batch []*parley.Message
	for i := range 25 {
		batch = append(batch, msg(parley.RoleUser, fmt.Sprint(i), base))
	}
	if err := s.AppendMessages(ctx, sess.ID, batch...); err != nil {
		t.Fatal(err)
	}
	var after int64
	var got []string
	for {
		page, err := s.ListMessages(ctx, sess.ID, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 7 {
			t.Fatalf("page of %d", len(page))
		}
		if len(page) == 0 {
			break
		}
		for _, m := range page {
			got = append(got, m.Content.String())
		}
		after = page[len(page)-1].Seq
	}
	if len(got) != 25 || got[0] != "0" || got[24] != "24" {
		t.Fatalf("paged: %v", got)
	}
	if page, _ := s.ListMessages(ctx, sess.ID, 20, 100); len(page) != 5 || page[0].Seq != 21 {
		t.Fatalf("after 20: %d messages", len(page))
	}
}

// RoundTripMessages is a conversation that uses every field of the OpenAI chat format and of
// Parley's metadata. Store packages may use it for their own golden tests.
func RoundTripMessages(resourceID string, at time.Time) []*parley.Message {
	yes, no := true, false
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	at = at.UTC().Truncate(time.Microsecond)
	return []*parley.Message{
		{ID: parley.NewID(), Role: parley.RoleSystem, Content: parley.Text("You are terse."), CreatedAt: at},
		{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Grüße, 世界! 👋🏽 \"quotes\" \\ back\nslash\u2028"), CreatedAt: at, RunID: "run-1"},
		{ID: parley.NewID(), Role: parley.RoleUser, CreatedAt: at, Content: parley.Parts(
			parley.Part{Type: "text", Text: "What is in this image?"},
			parley.Part{Type: "image_url", ImageURL: &parley.ImageURL{URL: "data:image/png;base64,iVBORw0KGgo=", Detail: "low"}},
		)},
		{ID: parley.NewID(), Role: parley.RoleAssistant, Reasoning: "Two lookups, in parallel.", RunID: "run-1", Model: "gpt-4o",
			ThinkingBlocks: []parley.ThinkingBlock{{Type: "thinking", Thinking: "Two lookups, in parallel.", Signature: "c2lnbmF0dXJl"}},
			LatencyMS:      1234, Usage: &parley.Usage{PromptTokens: 100, CompletionTokens: 20, TotalTokens: 120, ReasoningTokens: 7, CachedTokens: 64, Cost: 0.00123},
			CreatedAt: at.Add(time.Microsecond), ToolCalls: []parley.ToolCall{
				{ID: "call_a", Type: "function", Function: parley.FunctionCall{Name: "search", Arguments: `{"q":"ünïcode","n":3}`}},
				{ID: "call_b", Type: "function", Function: parley.FunctionCall{Name: "fetch", Arguments: `{"url":"https://example.com/?a=1&b=<2>"}`}},
			}},
		{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "call_b", Name: "fetch", Content: parley.Text(big),
			Success: &yes, ResourceID: resourceID, LatencyMS: 88, RunID: "run-1", CreatedAt: at.Add(2 * time.Microsecond)},
		{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "call_a", Name: "search", Content: parley.Text("error: timed out"),
			Success: &no, LatencyMS: 30000, RunID: "run-1", Server: "search-mcp", CreatedAt: at.Add(3 * time.Microsecond)},
		{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(""), Model: "gpt-4o", CreatedAt: at.Add(4 * time.Microsecond)},
		{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("Done ✅"), Model: "gpt-4o", LatencyMS: 1,
			Usage: &parley.Usage{}, CreatedAt: at.Add(5 * time.Microsecond)},
		// A failed turn: what was streamed before the model call failed, with the error's code.
		{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("And then?"), RunID: "run-2", CreatedAt: at.Add(6 * time.Microsecond)},
		{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("Then the"), Reasoning: "cut", Model: "gpt-4o", RunID: "run-2",
			LatencyMS: 5, Error: parley.ECUpstream, CreatedAt: at.Add(7 * time.Microsecond)},
	}
}

func testRoundTrip(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	res := &parley.Resource{ID: parley.NewID(), SessionID: sess.ID, Kind: "page", URI: "https://example.com/", Meta: json.RawMessage(`{"bytes":1048576}`), CreatedAt: base}
	if err := s.PutResource(ctx, res); err != nil {
		t.Fatal(err)
	}
	msgs := RoundTripMessages(res.ID, base)
	if err := s.AppendMessages(ctx, sess.ID, msgs...); err != nil {
		t.Fatal(err)
	}
	got, err := s.History(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(msgs) {
		t.Fatalf("read %d messages, wrote %d", len(got), len(msgs))
	}
	for i := range msgs {
		w, g := jsonOf(t, msgs[i]), jsonOf(t, got[i])
		if w != g {
			if len(w) > 600 {
				w, g = w[:300]+"…"+w[len(w)-300:], g[:min(300, len(g))]+"…"+g[max(0, len(g)-300):]
			}
			t.Fatalf("message %d changed:\nwrote %s\nread  %s", i, w, g)
		}
	}
	// The OpenAI view carries no metadata, and null content stays null.
	if o := jsonOf(t, got[3].OpenAI()); !strings.Contains(o, `"content":null`) || strings.Contains(o, "latency_ms") {
		t.Fatalf("OpenAI view: %s", o)
	}
	if last := got[len(got)-1]; last.Error != parley.ECUpstream || !last.Failed() {
		t.Fatalf("the mark of a failed turn was lost: %+v", last)
	}
	if err := parley.CheckHistory(got); err != nil {
		t.Fatal(err)
	}
}

func testResources(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	r := &parley.Resource{ID: parley.NewID(), SessionID: sess.ID, Kind: "artifact", URI: "parley://artifact/1", Meta: json.RawMessage(`{"mime":"text/html"}`), CreatedAt: base}
	if err := s.PutResource(ctx, r); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetResource(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if jsonOf(t, got) != jsonOf(t, r) {
		t.Fatalf("read %s, wrote %s", jsonOf(t, got), jsonOf(t, r))
	}
	if err := s.PutResource(ctx, r); err == nil {
		t.Fatal("a second resource with the same id was accepted")
	}
	orphan := &parley.Resource{ID: parley.NewID(), SessionID: parley.NewID(), Kind: "file", CreatedAt: base}
	if err := s.PutResource(ctx, orphan); err == nil {
		t.Fatal("a resource of an unknown session was accepted")
	}
}

//go:embed testdata/*.json
var goldens embed.FS

// testGoldens writes each OpenAI message list of testdata and reads it back: the OpenAI view of
// what is read must be the file, byte for byte once whitespace is compacted. The files are in
// encoding/json's canonical form (fields in struct order, <, > and & escaped).
func testGoldens(t *testing.T, s parley.Store) {
	files, err := goldens.ReadDir("testdata")
	if err != nil || len(files) == 0 {
		t.Fatalf("no goldens: %v", err)
	}
	for _, f := range files {
		t.Run(f.Name(), func(t *testing.T) {
			raw, _ := goldens.ReadFile("testdata/" + f.Name())
			roundTripExact(t, s, raw)
		})
	}
	// A tool result of over 1 MB: every byte value class JSON escapes, multi-byte runes split
	// across no boundary, and a line structure like real command output.
	t.Run("large_tool_result", func(t *testing.T) {
		var big strings.Builder
		for i := 0; big.Len() < 1<<20+1; i++ {
			fmt.Fprintf(&big, "%06d\t\"quoted\" \\ back <tag> & 東京 👩🏽‍💻 \u0001 line\n", i)
		}
		msgs := []parley.Message{
			{Role: parley.RoleUser, Content: parley.Text("dump it")},
			{Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{{ID: "call_big", Type: "function",
				Function: parley.FunctionCall{Name: "dump", Arguments: `{"path":"/var/log/big.log"}`}}}},
			{Role: parley.RoleTool, Name: "dump", ToolCallID: "call_big", Content: parley.Text(big.String())},
		}
		raw, err := json.Marshal(msgs)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) < 1<<20 {
			t.Fatalf("only %d bytes", len(raw))
		}
		roundTripExact(t, s, raw)
	})
}

// roundTripExact stores the OpenAI message list raw and checks that History and ModelHistory
// both give it back, byte for byte once whitespace is compacted.
func roundTripExact(t *testing.T, s parley.Store, raw []byte) {
	t.Helper()
	var want bytes.Buffer
	if err := json.Compact(&want, raw); err != nil {
		t.Fatal(err)
	}
	var msgs []parley.Message
	if err := json.Unmarshal(raw, &msgs); err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, s, "golden", base)
	ptrs := make([]*parley.Message, len(msgs))
	for i := range msgs {
		msgs[i].ID, msgs[i].CreatedAt = parley.NewID(), base
		ptrs[i] = &msgs[i]
	}
	if err := s.AppendMessages(ctx, sess.ID, ptrs...); err != nil {
		t.Fatal(err)
	}
	for _, read := range []func(context.Context, string) ([]parley.Message, error){s.History, s.ModelHistory} {
		got, err := read(ctx, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		view := make([]parley.Message, len(got))
		for i, m := range got {
			view[i] = m.OpenAI()
		}
		if g := jsonOf(t, view); g != want.String() {
			t.Fatalf("read back differs:\nread %.2000s\nfile %.2000s", g, want.String())
		}
	}
}

func testModelHistory(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	msgs := RoundTripMessages("", base)
	msgs[4].ResourceID = ""
	if err := s.AppendMessages(ctx, sess.ID, msgs...); err != nil {
		t.Fatal(err)
	}
	full, err := s.History(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	model, err := s.ModelHistory(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(model) != len(full) {
		t.Fatalf("%d model messages, %d stored", len(model), len(full))
	}
	for i := range full {
		if w, g := jsonOf(t, full[i].ModelView()), jsonOf(t, model[i]); w != g {
			t.Fatalf("message %d:\nwant %.300s\ngot  %.300s", i, w, g)
		}
	}
	if h, err := s.ModelHistory(ctx, parley.NewID()); err != nil || len(h) != 0 {
		t.Fatalf("unknown session: %v %v", h, err)
	}
}

func testUsage(t *testing.T, s parley.Store) {
	a := newSession(t, s, "erin", base)
	b := newSession(t, s, "erin", base)
	other := newSession(t, s, "frank", base)
	withUsage := func(p, c, r int64) *parley.Message {
		m := msg(parley.RoleAssistant, "x", base)
		// Costs with a power-of-two denominator add up exactly in floating point.
		m.Usage = &parley.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c, ReasoningTokens: r, CachedTokens: p / 2, Cost: float64(p) / 1024}
		return m
	}
	for _, step := range []struct {
		sess string
		msgs []*parley.Message
	}{
		{a.ID, []*parley.Message{msg(parley.RoleUser, "q", base), withUsage(100, 20, 5)}},
		{a.ID, []*parley.Message{withUsage(300, 40, 0), withUsage(10, 1, 0)}},
		{b.ID, []*parley.Message{withUsage(1000, 200, 50)}},
		{other.ID, []*parley.Message{withUsage(7, 7, 7)}},
	} {
		if err := s.AppendMessages(ctx, step.sess, step.msgs...); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.GetSession(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := parley.Usage{PromptTokens: 410, CompletionTokens: 61, TotalTokens: 471, ReasoningTokens: 5, CachedTokens: 50 + 150 + 5, Cost: 410.0 / 1024}
	if got.Usage != want {
		t.Fatalf("session usage %+v, want %+v", got.Usage, want)
	}
	if list, _, _ := s.ListSessions(ctx, "erin", parley.Page{Limit: 10}); len(list) != 2 || list[0].Usage.TotalTokens+list[1].Usage.TotalTokens != 471+1200 {
		t.Fatalf("listed usage: %+v", list)
	}
	owner, err := s.OwnerUsage(ctx, "erin")
	if err != nil {
		t.Fatal(err)
	}
	want.Add(parley.Usage{PromptTokens: 1000, CompletionTokens: 200, TotalTokens: 1200, ReasoningTokens: 50, CachedTokens: 500, Cost: 1000.0 / 1024})
	if owner != want {
		t.Fatalf("owner usage %+v, want %+v", owner, want)
	}
	if none, err := s.OwnerUsage(ctx, "nobody"); err != nil || none != (parley.Usage{}) {
		t.Fatalf("unknown owner: %+v %v", none, err)
	}
	// A failed append adds nothing.
	bad := withUsage(999, 999, 0)
	bad.ResourceID = parley.NewID()
	if err := s.AppendMessages(ctx, b.ID, bad); err == nil {
		t.Fatal("append with unknown resource succeeded")
	}
	if got, _ := s.GetSession(ctx, b.ID); got.Usage.TotalTokens != 1200 {
		t.Fatalf("failed append changed usage: %+v", got.Usage)
	}
}

// testRejectsNUL: PostgreSQL cannot store U+0000 in text or jsonb, so every store refuses it alike,
// as invalid input, and keeps nothing of the batch.
func testRejectsNUL(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	for _, tc := range []struct {
		field string
		edit  func(m *parley.Message)
	}{
		{"content", func(m *parley.Message) { m.Content = parley.Text("a\x00b") }},
		{"content", func(m *parley.Message) { m.Content = parley.Parts(parley.Part{Type: "text", Text: "\x00"}) }},
		{"tool_calls", func(m *parley.Message) {
			m.ToolCalls = []parley.ToolCall{{ID: "c", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{\"a\":\"\x00\"}"}}}
		}},
		{"reasoning_content", func(m *parley.Message) { m.Reasoning = "\x00" }},
		{"name", func(m *parley.Message) { m.Name = "n\x00" }},
		{"server", func(m *parley.Message) { m.Server = "mcp\x00" }},
		{"thinking_blocks", func(m *parley.Message) {
			m.ThinkingBlocks = []parley.ThinkingBlock{{Type: "thinking", Thinking: "t", Signature: "s\x00"}}
		}},
		{"tool_calls", func(m *parley.Message) {
			m.ToolCalls = []parley.ToolCall{{ID: "c", Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{}"},
				ExtraContent: &parley.ExtraContent{Google: &parley.GoogleExtra{ThoughtSignature: "\x00"}}}}
		}},
	} {
		m := msg(parley.RoleAssistant, "ok", base)
		tc.edit(m)
		err := s.AppendMessages(ctx, sess.ID, msg(parley.RoleUser, "fine", base), m)
		if parley.CodeOf(err) != parley.ECInvalid || !strings.Contains(err.Error(), tc.field) {
			t.Fatalf("NUL in %s: %v, want an invalid-input error naming the field", tc.field, err)
		}
	}
	if h, err := s.History(ctx, sess.ID); err != nil || len(h) != 0 {
		t.Fatalf("refused batches left %d messages (%v)", len(h), err)
	}
}

func testOpenToolCalls(t *testing.T, s parley.Store) {
	open := func() []string {
		t.Helper()
		ids, err := s.SessionsWithOpenToolCalls(ctx, "", 100)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	a := newSession(t, s, "alice", base)
	b := newSession(t, s, "alice", base)
	call := func(id string) parley.ToolCall {
		return parley.ToolCall{ID: id, Type: "function", Function: parley.FunctionCall{Name: "f", Arguments: "{}"}}
	}
	result := func(id string) *parley.Message {
		m := msg(parley.RoleTool, "r", base)
		m.ToolCallID, m.Name = id, "f"
		return m
	}
	ask := msg(parley.RoleAssistant, "", base)
	ask.ToolCalls = []parley.ToolCall{call("c1"), call("c2")}
	if err := s.AppendMessages(ctx, a.ID, msg(parley.RoleUser, "go", base), ask); err != nil {
		t.Fatal(err)
	}
	// b answers its call in the same batch: nothing open.
	askB := msg(parley.RoleAssistant, "", base)
	askB.ToolCalls = []parley.ToolCall{call("d1")}
	if err := s.AppendMessages(ctx, b.ID, askB, result("d1")); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 1 || got[0] != a.ID {
		t.Fatalf("open after the calls: %v, want [%s]", got, a.ID)
	}
	if got, err := s.SessionsWithOpenToolCalls(ctx, a.ID, 100); err != nil || len(got) != 0 {
		t.Fatalf("open after %s: %v %v", a.ID, got, err)
	}
	if err := s.AppendMessages(ctx, a.ID, result("c1")); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 1 {
		t.Fatalf("one of two answered: %v", got)
	}
	if err := s.AppendMessages(ctx, a.ID, result("c2")); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 0 {
		t.Fatalf("all answered, still open: %v", got)
	}
}

// testListSessionsByTitle: Page.Query keeps the sessions whose title contains it, ignoring the
// case of ASCII letters, with % and _ taken literally, and pages like the full list.
func testListSessionsByTitle(t *testing.T, s parley.Store) {
	titles := []string{"Trip to Lisbon", "lisbon hotels", "Budget 100%", "Budget 100 euros", "snake_case names", "snakeXcase", "Café crème", "Other"}
	ids := map[string]string{}
	for i, title := range titles {
		at := base.Add(time.Duration(i) * time.Second)
		sess := &parley.Session{ID: parley.NewID(), Title: title, Owner: "dora", CreatedAt: at, UpdatedAt: at}
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
		ids[sess.ID] = title
	}
	other := &parley.Session{ID: parley.NewID(), Title: "Lisbon too", Owner: "erin", CreatedAt: base, UpdatedAt: base}
	if err := s.CreateSession(ctx, other); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		query string
		want  []string // newest first
	}{
		{"LISBON", []string{"lisbon hotels", "Trip to Lisbon"}},
		{"100%", []string{"Budget 100%"}},
		{"e_c", []string{"snake_case names"}},
		{"crème", []string{"Café crème"}},
		{"nothing like it", nil},
	}
	for _, tc := range tests {
		for _, limit := range []int{1, 10} {
			var got []string
			cursor := ""
			for pages := 0; ; pages++ {
				if pages > 20 {
					t.Fatal("paging does not end")
				}
				page, next, err := s.ListSessions(ctx, "dora", parley.Page{Query: tc.query, Cursor: cursor, Limit: limit})
				if err != nil {
					t.Fatalf("query %q: %v", tc.query, err)
				}
				for _, p := range page {
					got = append(got, p.Title)
				}
				if next == "" {
					break
				}
				cursor = next
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Errorf("query %q, limit %d: got %q, want %q", tc.query, limit, got, tc.want)
			}
		}
	}
}
