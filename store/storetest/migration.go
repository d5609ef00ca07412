package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// FillChains writes sessions as a store before branches held them: each one chain of messages,
// appended in calls of one and of several, interleaved across sessions, with every field of the
// format (RoundTripMessages and the goldens), tool rounds, usage and a failed turn, and an empty
// session. It returns the sessions' ids. A store's migration test writes them, takes a Snapshot,
// migrates down to the version before branches and up again, and compares.
func FillChains(t *testing.T, s parley.Store) []string {
	t.Helper()
	var ids []string
	sessions := make([]*parley.Session, 4)
	for i := range sessions {
		sessions[i] = newSession(t, s, fmt.Sprintf("owner%d", i%2), base.Add(time.Duration(i)*time.Second))
		ids = append(ids, sessions[i].ID)
	}
	res := &parley.Resource{ID: parley.NewID(), SessionID: sessions[0].ID, Kind: "page", URI: "https://example.com/", CreatedAt: base}
	if err := s.PutResource(ctx, res); err != nil {
		t.Fatal(err)
	}
	// Session 0: every field, in one call, then more turns one message at a time.
	if err := s.AppendMessages(ctx, sessions[0].ID, RoundTripMessages(res.ID, base)...); err != nil {
		t.Fatal(err)
	}
	// Sessions 1 and 2: the goldens' histories, turn by turn, interleaved with session 0.
	files, err := goldens.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for fi, f := range files {
		raw, err := goldens.ReadFile("testdata/" + f.Name())
		if err != nil {
			t.Fatal(err)
		}
		var msgs []parley.Message
		if err := json.Unmarshal(raw, &msgs); err != nil {
			t.Fatal(err)
		}
		target := sessions[1+fi%2].ID
		for i := range msgs {
			m := msgs[i]
			m.ID, m.CreatedAt, m.RunID = parley.NewID(), base.Add(time.Duration(fi*100+i)*time.Millisecond), fmt.Sprintf("run-%d", fi)
			if m.Role == parley.RoleAssistant {
				m.Usage = &parley.Usage{PromptTokens: int64(10 * (i + 1)), CompletionTokens: int64(i), TotalTokens: int64(11*i + 10)}
			}
			if err := s.AppendMessages(ctx, target, &m); err != nil {
				t.Fatal(err)
			}
			extra := msg(parley.RoleUser, fmt.Sprintf("between %d.%d", fi, i), base.Add(time.Hour))
			if err := s.AppendMessages(ctx, sessions[0].ID, extra); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Session 3 stays empty.
	return ids
}

// Snapshot is everything the store gives back of the sessions, as JSON: each session, its
// History, ModelHistory, ListMessages in pages of 3 and its Tree, and the owners' usage.
func Snapshot(t *testing.T, s parley.Store, ids []string) string {
	t.Helper()
	var b strings.Builder
	put := func(name string, v any, err error) {
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		fmt.Fprintf(&b, "%s %s\n", name, jsonOf(t, v))
	}
	for _, id := range ids {
		sess, err := s.GetSession(ctx, id)
		put("session", sess, err)
		h, err := s.History(ctx, id)
		put("history", h, err)
		mh, err := s.ModelHistory(ctx, id)
		put("model", mh, err)
		var after int64
		for {
			page, err := s.ListMessages(ctx, id, after, 3)
			put("page", page, err)
			if len(page) == 0 {
				break
			}
			after = page[len(page)-1].Seq
		}
		leaf, nodes, err := s.Tree(ctx, id)
		put("tree", struct {
			Leaf  string
			Nodes []parley.TreeNode
		}{leaf, nodes}, err)
	}
	for _, owner := range []string{"owner0", "owner1"} {
		u, err := s.OwnerUsage(ctx, owner)
		put("usage", u, err)
	}
	open, err := s.SessionsWithOpenToolCalls(ctx, "", 100)
	put("open", open, err)
	return b.String()
}

// FillForks makes forks as a migration that finds the forks made before it must see them: a
// fork of the session id, after a message that refers to a file of id's (an attachment), and a
// fork of a new session of the same owner whose only reference is an image result's (a tool
// result naming the file in a signed URL). It returns the sessions to snapshot (the new one and
// the forks) and the files.
func FillForks(t *testing.T, s parley.Store, id string) (sessions, files []string) {
	t.Helper()
	sess, err := s.GetSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	attached := forkTreeFile(t, s, sess, 'f')
	fork := forkOf(t, s, sess, base.Add(time.Hour))

	drawn := newSession(t, s, sess.Owner, base.Add(time.Minute))
	img := newFile(sess.Owner, drawn.ID, sha('i'), 1, base)
	img.MediaType = "image/png"
	if err := s.CreateFile(ctx, img, 0); err != nil {
		t.Fatal(err)
	}
	call := parley.ToolCall{ID: "call_img", Type: "function", Function: parley.FunctionCall{Name: "generate_image", Arguments: `{"prompt":"a square"}`}}
	result := `{"images":[{"file_id":"` + img.ID + `","url":"/api/v1/images/` + img.ID + `?exp=1796159804\u0026sig=abc","media_type":"image/png","bytes":1}],"prompt":"a square","note":"shown to the user"}`
	// A result that only looks like one (no JSON) is passed over.
	other := parley.ToolCall{ID: "call_txt", Type: "function", Function: parley.FunctionCall{Name: "fetch", Arguments: `{}`}}
	round := []*parley.Message{
		msg(parley.RoleUser, "draw a square", base),
		{ID: parley.NewID(), Role: parley.RoleAssistant, ToolCalls: []parley.ToolCall{call, other}, CreatedAt: base},
		{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "call_img", Name: "generate_image", Content: parley.Text(result), CreatedAt: base},
		{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: "call_txt", Name: "fetch", CreatedAt: base,
			Content: parley.Text(`{"images": [ /api/v1/images/not-a-file?exp=1 not JSON`)},
	}
	if err := s.AppendMessages(ctx, drawn.ID, round...); err != nil {
		t.Fatal(err)
	}
	drawnFork := forkOf(t, s, drawn, base.Add(2*time.Hour))
	return []string{drawn.ID, fork.ID, drawnFork.ID}, []string{attached.ID, img.ID}
}

// SnapshotFiles is the files ids as the store gives them back, as JSON.
func SnapshotFiles(t *testing.T, s parley.Store, ids []string) string {
	t.Helper()
	var b strings.Builder
	for _, id := range ids {
		f, err := s.GetFile(ctx, id)
		if err != nil {
			t.Fatalf("file %s: %v", id, err)
		}
		fmt.Fprintf(&b, "file %s\n", jsonOf(t, f))
	}
	return b.String()
}

// ForkedFromSchema is what CheckForkedFromMigration needs of a store's schema: the migration
// before the one that adds sessions.forked_from and the way back up, and two reads of the column.
type ForkedFromSchema struct {
	// Before is the version before forked_from; Down migrates to it, Up all the way up.
	Before   int64
	Down, Up func() error
	// HasColumn reports whether sessions.forked_from exists; Lineage lists the sessions that
	// have it as "id<forked_from" sorted by id and joined by spaces ("" for none).
	HasColumn func() bool
	Lineage   func() string
}

// CheckForkedFromMigration writes sessions, forks and files (FillChains, FillForks) on s at the
// newest version, migrates down to the version before forked_from and up again, and checks that
// every row reads back the same at both versions and that the migration finds the forks Fork
// recorded.
func CheckForkedFromMigration(t *testing.T, s parley.Store, m ForkedFromSchema) {
	t.Helper()
	ids := FillChains(t, s)
	more, files := FillForks(t, s, ids[0])
	ids = append(ids, more...)
	before := Snapshot(t, s, ids) + SnapshotFiles(t, s, files)
	forks := m.Lineage()
	want := []string{ids[len(ids)-2] + "<" + ids[0], ids[len(ids)-1] + "<" + ids[len(ids)-3]}
	slices.Sort(want)
	if forks != strings.Join(want, " ") {
		t.Fatalf("lineage recorded by Fork: %q, want %q", forks, want)
	}
	if err := m.Down(); err != nil {
		t.Fatal(err)
	}
	if m.HasColumn() {
		t.Fatalf("forked_from still there at version %d", m.Before)
	}
	if after := Snapshot(t, s, ids) + SnapshotFiles(t, s, files); after != before {
		t.Fatalf("rows differ at version %d:\nbefore %.3000s\nafter  %.3000s", m.Before, before, after)
	}
	if err := m.Up(); err != nil {
		t.Fatal(err)
	}
	if !m.HasColumn() {
		t.Fatal("no forked_from after up")
	}
	if got := m.Lineage(); got != forks {
		t.Fatalf("lineage found by the migration: %q, want what Fork recorded, %q", got, forks)
	}
	if after := Snapshot(t, s, ids) + SnapshotFiles(t, s, files); after != before {
		t.Fatalf("rows differ after up:\nbefore %.3000s\nafter  %.3000s", before, after)
	}
}
