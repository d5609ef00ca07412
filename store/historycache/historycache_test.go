package historycache

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
	"github.com/parleyhq/parley/store/sqlite"
	"github.com/parleyhq/parley/store/storetest"
)

// counting records what the cache asks of the store.
type counting struct {
	parley.Store
	fullReads int
	rowsRead  int
}

func (c *counting) ModelBranch(ctx context.Context, id, leaf string) ([]parley.Message, parley.BranchTip, error) {
	c.fullReads++
	h, tip, err := c.Store.ModelBranch(ctx, id, leaf)
	c.rowsRead += len(h)
	return h, tip, err
}

func (c *counting) ListBranch(ctx context.Context, id, leaf string, after int64, limit int) ([]parley.Message, parley.BranchTip, error) {
	m, tip, err := c.Store.ListBranch(ctx, id, leaf, after, limit)
	c.rowsRead += len(m)
	return m, tip, err
}

func setup(t *testing.T) (*counting, string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "c.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	now := time.Now().UTC()
	sess := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(context.Background(), sess); err != nil {
		t.Fatal(err)
	}
	return &counting{Store: st}, sess.ID
}

func appendRound(t *testing.T, st parley.Store, sid string, i int) {
	t.Helper()
	now := time.Now().UTC()
	id := fmt.Sprintf("call_%d", i)
	msgs := []*parley.Message{
		{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(fmt.Sprintf("q%d", i)), CreatedAt: now},
		{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: now, ToolCalls: []parley.ToolCall{{ID: id, Type: "function",
			Function: parley.FunctionCall{Name: "f", Arguments: fmt.Sprintf(`{"n":%d}`, i)}}}},
		{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: id, Name: "f", Content: parley.Text(fmt.Sprintf("r%d", i)), CreatedAt: now},
		{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(fmt.Sprintf("a%d", i)), CreatedAt: now},
	}
	if err := st.AppendMessages(context.Background(), sid, msgs...); err != nil {
		t.Fatal(err)
	}
}

func js(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestMatchesTheStoreAndReadsOnlyNewRows(t *testing.T) {
	ctx := context.Background()
	st, sid := setup(t)
	c := New(st, 1<<20)
	for i := 0; i < 30; i++ {
		appendRound(t, st.Store, sid, i) // written behind the cache's back, as another instance would
		got, err := c.ModelHistory(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := st.Store.ModelHistory(ctx, sid)
		if js(got) != js(want) {
			t.Fatalf("round %d: cache and store differ", i)
		}
		// The caller owns the slice: shortening it in place must not reach the cache.
		llmctx.BuildOwned(got, llmctx.Options{ToolHistoryRounds: 1, SystemPrompt: "s"})
	}
	if st.fullReads != 1 {
		t.Fatalf("%d full reads, want 1", st.fullReads)
	}
	// The size kept up incrementally is the size of what is held.
	e := c.entries[sid].Value.(*entry)
	if c.Size() != sizeOf(e.msgs) {
		t.Fatalf("size %d, held %d", c.Size(), sizeOf(e.msgs))
	}
	if st.rowsRead != 30*4 {
		t.Fatalf("read %d rows for 120 messages", st.rowsRead)
	}
}

// TestFollowsTheActiveBranch: an edit, a regenerated answer and a switch of branch, made behind
// the cache's back, are what the next read gives, as the store gives it; a branch that grows is
// still read by its new rows only.
func TestFollowsTheActiveBranch(t *testing.T) {
	ctx := context.Background()
	st, sid := setup(t)
	c := New(st, 1<<20)
	same := func(step string) {
		t.Helper()
		got, err := c.ModelHistory(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := st.Store.ModelHistory(ctx, sid)
		if js(got) != js(want) {
			t.Fatalf("%s: cache %s\nstore %s", step, js(got), js(want))
		}
	}
	for i := range 3 {
		appendRound(t, st.Store, sid, i)
	}
	same("three rounds")
	h, _ := st.Store.History(ctx, sid)
	now := time.Now().UTC()
	// An edit of the second question: a sibling of it, and the active branch.
	edit := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("edited"), ParentID: h[3].ID, CreatedAt: now}
	if err := st.Store.AppendMessages(ctx, sid, edit); err != nil {
		t.Fatal(err)
	}
	same("after an edit")
	reads, rows := st.fullReads, st.rowsRead
	ans := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("answer"), CreatedAt: now}
	if err := st.Store.AppendMessages(ctx, sid, ans); err != nil {
		t.Fatal(err)
	}
	same("after the edit's answer")
	if st.fullReads != reads || st.rowsRead != rows+1 {
		t.Fatalf("a growing branch was read again: %d full reads (was %d), %d rows (was %d)", st.fullReads, reads, st.rowsRead, rows)
	}
	// A regenerated answer: the leaf goes back to the question, then a sibling answer.
	if err := st.Store.SetLeaf(ctx, sid, edit.ID); err != nil {
		t.Fatal(err)
	}
	same("at the question")
	again := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("again"), CreatedAt: now}
	if err := st.Store.AppendMessages(ctx, sid, again); err != nil {
		t.Fatal(err)
	}
	same("after the regenerated answer")
	// Back to the first branch, whose messages are all older than the view's.
	if _, err := st.Store.SwitchBranch(ctx, sid, h[4].ID); err != nil {
		t.Fatal(err)
	}
	same("after a switch to the old branch")
	if got, _ := c.ModelHistory(ctx, sid); len(got) != 12 {
		t.Fatalf("the old branch has %d messages, want 12", len(got))
	}
}

func TestBoundedAndEvicting(t *testing.T) {
	ctx := context.Background()
	st, a := setup(t)
	now := time.Now().UTC()
	b := &parley.Session{ID: parley.NewID(), Owner: "o", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, b); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		appendRound(t, st, a, i)
		appendRound(t, st, b.ID, i)
	}
	one, _ := st.Store.ModelHistory(ctx, a)
	limit := sizeOf(one) * 3 / 2 // room for one session, not two
	c := New(st, limit)
	for _, id := range []string{a, b.ID, a} {
		if _, err := c.ModelHistory(ctx, id); err != nil {
			t.Fatal(err)
		}
		if c.Size() > limit || c.Size() == 0 {
			t.Fatalf("size %d, limit %d", c.Size(), limit)
		}
	}
	if st.fullReads != 3 {
		t.Fatalf("%d full reads: a was not evicted by b", st.fullReads)
	}
	// A session larger than the whole cache is read but not kept.
	small := New(st, 100)
	if h, err := small.ModelHistory(ctx, a); err != nil || len(h) != 40 || small.Size() != 0 {
		t.Fatalf("oversized session: %d %v size %d", len(h), err, small.Size())
	}
	c.Forget(a)
	if c.Size() != 0 {
		t.Fatalf("after Forget: %d", c.Size())
	}
}

// BenchmarkModelContext10kWarm is BenchmarkModelContext10k of the stores through a warm cache,
// one new message arriving between reads as during a run.
func BenchmarkModelContext10kWarm(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "c.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	sid := storetest.Seed10k(b, st)
	c := New(st, 1<<30)
	ctx := context.Background()
	if _, err := c.ModelHistory(ctx, sid); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("next"), CreatedAt: time.Now().UTC()}
		if err := st.AppendMessages(ctx, sid, m); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		h, err := c.ModelHistory(ctx, sid)
		if err != nil {
			b.Fatal(err)
		}
		llmctx.BuildOwned(h, llmctx.Options{})
	}
}

// TestSeededAndExtendedByWrites: a new session's view is seeded with what was written, and the
// messages written after it extend it, so that reads bring in no row; a message that does not
// follow the view (another branch) leaves it to the next read, which still matches the store.
func TestSeededAndExtendedByWrites(t *testing.T) {
	ctx := context.Background()
	st, sid := setup(t)
	c := New(st, 1<<20)
	now := time.Now().UTC()
	write := func(m *parley.Message) *parley.Message {
		t.Helper()
		if err := st.Store.AppendMessages(ctx, sid, m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	same := func(step string) {
		t.Helper()
		got, err := c.ModelHistory(ctx, sid)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := st.Store.ModelHistory(ctx, sid)
		if js(got) != js(want) {
			t.Fatalf("%s: cache %s\nstore %s", step, js(got), js(want))
		}
	}
	q := write(&parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q"), CreatedAt: now})
	c.Seed(sid, q)
	a := write(&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("a"), CreatedAt: now})
	q2 := write(&parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("q2"), CreatedAt: now})
	c.Appended(sid, a)
	c.Appended(sid, q2)
	if v, want := c.ViewAt(sid, q2.ID), mustHistory(t, st.Store, sid); js(v) != js(want) {
		t.Fatalf("the view at the last message: %s, want %s", js(v), js(want))
	}
	if v := c.ViewAt(sid, a.ID); v != nil {
		t.Fatalf("a view at a message it does not end at: %s", js(v))
	}
	same("seeded and extended")
	if st.fullReads != 0 || st.rowsRead != 0 {
		t.Fatalf("%d full reads, %d rows read, want none", st.fullReads, st.rowsRead)
	}
	// An edit of the first question does not follow the view: the view stays, and the next read
	// finds the branch changed.
	edit := write(&parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("edited"), ParentID: parley.ParentRoot, CreatedAt: now})
	c.Appended(sid, edit)
	if e := c.entries[sid].Value.(*entry); e.tip.ID != q2.ID {
		t.Fatalf("the view moved to %s, a message that does not follow it", e.tip.ID)
	}
	same("after an edit")
	// The size kept up incrementally is the size of what is held.
	c.Appended(sid, write(&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("b"), CreatedAt: now}))
	e := c.entries[sid].Value.(*entry)
	if c.Size() != e.size || e.size != sizeOf(e.msgs) {
		t.Fatalf("size %d, entry %d, held %d", c.Size(), e.size, sizeOf(e.msgs))
	}
	same("after the edit's answer")
}

func mustHistory(t *testing.T, st parley.Store, sid string) []parley.Message {
	t.Helper()
	h, err := st.ModelHistory(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	return h
}
