package storetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

// contents returns the text of msgs, joined by spaces.
func contents(msgs []parley.Message) string {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(m.Content.String())
	}
	return b.String()
}

func mustBranch(t *testing.T, s parley.Store, sid, leaf string) string {
	t.Helper()
	msgs, _, err := s.ListBranch(ctx, sid, leaf, 0, 0)
	if err != nil {
		t.Fatalf("ListBranch(%q): %v", leaf, err)
	}
	return contents(msgs)
}

func mustHistory(t *testing.T, s parley.Store, sid string) string {
	t.Helper()
	h, err := s.History(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	return contents(h)
}

// testBranchChain: appends without a parent extend the active branch, one after the other,
// within a call and across calls; the session and each message say so.
func testBranchChain(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	if leaf, nodes, err := s.Tree(ctx, sess.ID); err != nil || leaf != "" || len(nodes) != 0 {
		t.Fatalf("empty tree: %q %v %v", leaf, nodes, err)
	}
	a, b := msg(parley.RoleUser, "a", base), msg(parley.RoleAssistant, "b", base)
	if err := s.AppendMessages(ctx, sess.ID, a, b); err != nil {
		t.Fatal(err)
	}
	c := msg(parley.RoleUser, "c", base)
	if err := s.AppendMessages(ctx, sess.ID, c); err != nil {
		t.Fatal(err)
	}
	if a.ParentID != "" || b.ParentID != a.ID || c.ParentID != b.ID {
		t.Fatalf("parents %q %q %q", a.ParentID, b.ParentID, c.ParentID)
	}
	got, err := s.GetSession(ctx, sess.ID)
	if err != nil || got.LeafID != c.ID {
		t.Fatalf("leaf %q, want %q (%v)", got.LeafID, c.ID, err)
	}
	h, _ := s.History(ctx, sess.ID)
	for i, m := range h {
		if want := []string{"", a.ID, b.ID}[i]; m.ParentID != want {
			t.Fatalf("stored parent of %d: %q, want %q", i, m.ParentID, want)
		}
	}
	leaf, nodes, err := s.Tree(ctx, sess.ID)
	if err != nil || leaf != c.ID {
		t.Fatalf("tree leaf %q %v", leaf, err)
	}
	want := []parley.TreeNode{{ID: a.ID, Role: parley.RoleUser, CreatedAt: base}, {ID: b.ID, ParentID: a.ID, Role: parley.RoleAssistant, CreatedAt: base},
		{ID: c.ID, ParentID: b.ID, Role: parley.RoleUser, CreatedAt: base}}
	if jsonOf(t, nodes) != jsonOf(t, want) {
		t.Fatalf("tree %s\nwant %s", jsonOf(t, nodes), jsonOf(t, want))
	}
	if _, _, err := s.Tree(ctx, parley.NewID()); !isNotFound(err) {
		t.Fatalf("tree of an unknown session: %v", err)
	}
	// A named leaf on the chain reads the chain up to it.
	if got := mustBranch(t, s, sess.ID, b.ID); got != "a b" {
		t.Fatalf("branch to b: %q", got)
	}
}

// testBranchConcurrent: concurrent appends without a parent keep the session one chain: each
// message's parent is the message stored before it.
func testBranchConcurrent(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w := range 4 {
		wg.Go(func() {
			for i := range 10 {
				errs <- s.AppendMessages(ctx, sess.ID, msg(parley.RoleUser, fmt.Sprintf("w%d-%d", w, i), base))
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	h, err := s.History(ctx, sess.ID)
	if err != nil || len(h) != 40 {
		t.Fatalf("%d messages %v", len(h), err)
	}
	for i := 1; i < len(h); i++ {
		if h[i].ParentID != h[i-1].ID {
			t.Fatalf("message %d follows %q, not the message before it", i, h[i].ParentID)
		}
	}
	if got, _ := s.GetSession(ctx, sess.ID); got.LeafID != h[39].ID {
		t.Fatalf("leaf %q", got.LeafID)
	}
}

// testBranchEdits builds q1 a1 q2 a2, edits q2 (q2e a2e), regenerates a2e (a2r), edits q1 at
// the root, and reads every branch, by leaf, by page and as the model sees it.
func testBranchEdits(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	q1, a1, q2, a2 := msg(parley.RoleUser, "q1", at(1)), msg(parley.RoleAssistant, "a1", at(2)), msg(parley.RoleUser, "q2", at(3)), msg(parley.RoleAssistant, "a2", at(4))
	if err := s.AppendMessages(ctx, sess.ID, q1, a1, q2, a2); err != nil {
		t.Fatal(err)
	}
	// Edit q2: a sibling with q2's parent, then its answer, which follows it by default.
	q2e := msg(parley.RoleUser, "q2e", at(5))
	q2e.ParentID = a1.ID
	if err := s.AppendMessages(ctx, sess.ID, q2e); err != nil {
		t.Fatal(err)
	}
	a2e := msg(parley.RoleAssistant, "a2e", at(6))
	if err := s.AppendMessages(ctx, sess.ID, a2e); err != nil {
		t.Fatal(err)
	}
	if q2e.ParentID != a1.ID || a2e.ParentID != q2e.ID {
		t.Fatalf("parents: %q %q", q2e.ParentID, a2e.ParentID)
	}
	if got := mustHistory(t, s, sess.ID); got != "q1 a1 q2e a2e" {
		t.Fatalf("active branch after the edit: %q", got)
	}
	if got := mustBranch(t, s, sess.ID, a2.ID); got != "q1 a1 q2 a2" {
		t.Fatalf("the old branch: %q", got)
	}
	// Regenerate a2e: the leaf goes back to its question, and the new answer is a sibling.
	if err := s.SetLeaf(ctx, sess.ID, q2e.ID); err != nil {
		t.Fatal(err)
	}
	if got := mustHistory(t, s, sess.ID); got != "q1 a1 q2e" {
		t.Fatalf("active branch at the question: %q", got)
	}
	a2r := msg(parley.RoleAssistant, "a2r", at(7))
	if err := s.AppendMessages(ctx, sess.ID, a2r); err != nil {
		t.Fatal(err)
	}
	if a2r.ParentID != q2e.ID || mustHistory(t, s, sess.ID) != "q1 a1 q2e a2r" {
		t.Fatalf("regenerated: parent %q, history %q", a2r.ParentID, mustHistory(t, s, sess.ID))
	}
	// Edit the first question: a new root.
	q1e := msg(parley.RoleUser, "q1e", at(8))
	q1e.ParentID = parley.ParentRoot
	if err := s.AppendMessages(ctx, sess.ID, q1e); err != nil {
		t.Fatal(err)
	}
	if q1e.ParentID != "" || mustHistory(t, s, sess.ID) != "q1e" {
		t.Fatalf("root edit: parent %q, history %q", q1e.ParentID, mustHistory(t, s, sess.ID))
	}
	// The model view and the pages follow the branch asked for.
	model, tip, err := s.ModelBranch(ctx, sess.ID, a2.ID)
	if err != nil || contents(model) != "q1 a1 q2 a2" || tip != (parley.BranchTip{ID: a2.ID, Seq: a2.Seq}) {
		t.Fatalf("model branch: %q %+v %v", contents(model), tip, err)
	}
	for _, m := range model {
		if m.ID != "" || m.ParentID != "" || m.Seq != 0 {
			t.Fatalf("the model view carries metadata: %+v", m)
		}
	}
	if mh, _ := s.ModelHistory(ctx, sess.ID); contents(mh) != "q1e" {
		t.Fatalf("model history: %q", contents(mh))
	}
	page, tip, err := s.ListBranch(ctx, sess.ID, a2r.ID, a1.Seq, 1)
	if err != nil || contents(page) != "q2e" || tip.ID != a2r.ID {
		t.Fatalf("page after a1: %q %+v %v", contents(page), tip, err)
	}
	page, _, _ = s.ListBranch(ctx, sess.ID, a2r.ID, page[0].Seq, 10)
	if contents(page) != "a2r" {
		t.Fatalf("next page: %q", contents(page))
	}
	// Switching to a message's branch lands on the newest leaf under it.
	for _, tc := range []struct{ at, leaf, history string }{
		{q2.ID, a2.ID, "q1 a1 q2 a2"},
		{q1.ID, a2r.ID, "q1 a1 q2e a2r"},
		{q2e.ID, a2r.ID, "q1 a1 q2e a2r"},
		{a2e.ID, a2e.ID, "q1 a1 q2e a2e"},
		{q1e.ID, q1e.ID, "q1e"},
	} {
		leaf, err := s.SwitchBranch(ctx, sess.ID, tc.at)
		if err != nil || leaf != tc.leaf {
			t.Fatalf("switch to %s: leaf %q %v, want %q", tc.history, leaf, err, tc.leaf)
		}
		if got := mustHistory(t, s, sess.ID); got != tc.history {
			t.Fatalf("after switching to %q: %q", tc.history, got)
		}
		if got, _ := s.GetSession(ctx, sess.ID); got.LeafID != tc.leaf {
			t.Fatalf("session leaf %q", got.LeafID)
		}
		if got, _ := s.ListMessages(ctx, sess.ID, 0, 100); contents(got) != tc.history {
			t.Fatalf("ListMessages after switching: %q", contents(got))
		}
	}
	// An append after a switch goes on from there.
	if _, err := s.SwitchBranch(ctx, sess.ID, a2.ID); err != nil {
		t.Fatal(err)
	}
	q3 := msg(parley.RoleUser, "q3", at(9))
	if err := s.AppendMessages(ctx, sess.ID, q3); err != nil || q3.ParentID != a2.ID {
		t.Fatalf("append after a switch: parent %q %v", q3.ParentID, err)
	}
	if got := mustHistory(t, s, sess.ID); got != "q1 a1 q2 a2 q3" {
		t.Fatalf("after the switch and an append: %q", got)
	}
	leaf, nodes, err := s.Tree(ctx, sess.ID)
	if err != nil || leaf != q3.ID || len(nodes) != 9 {
		t.Fatalf("tree: %q %d %v", leaf, len(nodes), err)
	}
	siblings := 0
	for _, n := range nodes {
		if n.ParentID == a1.ID {
			siblings++
		}
	}
	if siblings != 2 {
		t.Fatalf("%d children of a1, want 2 (q2 and q2e)", siblings)
	}
}

// testBranchBadInput: parents and leaves that are not messages of the session are refused and
// change nothing.
func testBranchBadInput(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	other := newSession(t, s, "alice", base)
	q := msg(parley.RoleUser, "q", base)
	if err := s.AppendMessages(ctx, sess.ID, q); err != nil {
		t.Fatal(err)
	}
	foreign := msg(parley.RoleUser, "elsewhere", base)
	if err := s.AppendMessages(ctx, other.ID, foreign); err != nil {
		t.Fatal(err)
	}
	for _, parent := range []string{foreign.ID, parley.NewID()} {
		m := msg(parley.RoleUser, "x", base)
		m.ParentID = parent
		if err := s.AppendMessages(ctx, sess.ID, msg(parley.RoleUser, "first of the batch", base), m); parley.CodeOf(err) != parley.ECInvalid {
			t.Fatalf("parent %q: %v, want invalid", parent, err)
		}
	}
	self := msg(parley.RoleUser, "x", base)
	self.ParentID = self.ID
	if err := s.AppendMessages(ctx, sess.ID, self); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("own parent: %v", err)
	}
	if got, _ := s.GetSession(ctx, sess.ID); got.LeafID != q.ID || got.Usage != (parley.Usage{}) {
		t.Fatalf("a refused append changed the session: %+v", got)
	}
	if got := mustHistory(t, s, sess.ID); got != "q" {
		t.Fatalf("history %q", got)
	}
	// A message of the same call may be named as a parent.
	a, b := msg(parley.RoleUser, "a", base), msg(parley.RoleAssistant, "b", base)
	b.ParentID = a.ID
	if err := s.AppendMessages(ctx, sess.ID, a, b); err != nil || b.ParentID != a.ID || a.ParentID != q.ID {
		t.Fatalf("parent in the batch: %v", err)
	}
	for _, leaf := range []string{foreign.ID, parley.NewID()} {
		if _, _, err := s.ListBranch(ctx, sess.ID, leaf, 0, 0); !isNotFound(err) {
			t.Fatalf("ListBranch(%q): %v", leaf, err)
		}
		if _, _, err := s.ModelBranch(ctx, sess.ID, leaf); !isNotFound(err) {
			t.Fatalf("ModelBranch(%q): %v", leaf, err)
		}
		if _, err := s.SwitchBranch(ctx, sess.ID, leaf); !isNotFound(err) {
			t.Fatalf("SwitchBranch(%q): %v", leaf, err)
		}
		if err := s.SetLeaf(ctx, sess.ID, leaf); !isNotFound(err) {
			t.Fatalf("SetLeaf(%q): %v", leaf, err)
		}
		into := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: base, UpdatedAt: base}
		if _, err := s.Fork(ctx, sess.ID, leaf, into); !isNotFound(err) {
			t.Fatalf("Fork(%q): %v", leaf, err)
		}
		if _, err := s.GetSession(ctx, into.ID); !isNotFound(err) {
			t.Fatalf("a refused fork made a session: %v", err)
		}
	}
	if err := s.SetLeaf(ctx, parley.NewID(), q.ID); !isNotFound(err) {
		t.Fatalf("SetLeaf on an unknown session: %v", err)
	}
	if h, tip, err := s.ListBranch(ctx, parley.NewID(), "", 0, 0); err != nil || len(h) != 0 || tip.ID != "" {
		t.Fatalf("unknown session: %v %+v %v", h, tip, err)
	}
}

// testFork copies a branch into a new session: new ids, the same content, one chain; the copies'
// tokens are not counted again.
func testFork(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	msgs := RoundTripMessages("", base)
	msgs[4].ResourceID = ""
	if err := s.AppendMessages(ctx, sess.ID, msgs...); err != nil {
		t.Fatal(err)
	}
	// Another branch after the answer "Done ✅" (msgs[7]), which the fork must not copy.
	other := msg(parley.RoleUser, "another question", base.Add(time.Minute))
	other.ParentID = msgs[7].ID
	if err := s.AppendMessages(ctx, sess.ID, other); err != nil {
		t.Fatal(err)
	}
	before, _ := s.OwnerUsage(ctx, "alice")
	into := &parley.Session{ID: parley.NewID(), Title: "Fork", Owner: "alice", CreatedAt: base.Add(time.Hour), UpdatedAt: base.Add(time.Hour)}
	copies, err := s.Fork(ctx, sess.ID, msgs[9].ID, into)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != len(msgs) {
		t.Fatalf("%d copies of %d messages", len(copies), len(msgs))
	}
	got, err := s.History(ctx, into.ID)
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("forked history: %d %v", len(got), err)
	}
	for i := range msgs {
		if got[i].ID == msgs[i].ID || got[i].SessionID != into.ID || got[i].Seq != int64(i+1) {
			t.Fatalf("copy %d: id %q session %q seq %d", i, got[i].ID, got[i].SessionID, got[i].Seq)
		}
		if i > 0 && got[i].ParentID != got[i-1].ID || i == 0 && got[i].ParentID != "" {
			t.Fatalf("copy %d follows %q", i, got[i].ParentID)
		}
		if jsonOf(t, got[i]) != jsonOf(t, copies[i]) {
			t.Fatalf("copy %d read back differs:\n%.300s\n%.300s", i, jsonOf(t, got[i]), jsonOf(t, copies[i]))
		}
		w, g := *msgs[i], got[i]
		w.ID, w.SessionID, w.Seq, w.ParentID = "", "", 0, ""
		g.ID, g.SessionID, g.Seq, g.ParentID = "", "", 0, ""
		if jsonOf(t, w) != jsonOf(t, g) {
			t.Fatalf("copy %d differs from its original:\n%.300s\n%.300s", i, jsonOf(t, g), jsonOf(t, w))
		}
	}
	fork, err := s.GetSession(ctx, into.ID)
	if err != nil || fork.LeafID != got[len(got)-1].ID || fork.Owner != "alice" || fork.Title != "Fork" || fork.Usage != (parley.Usage{}) {
		t.Fatalf("forked session: %+v %v", fork, err)
	}
	if after, _ := s.OwnerUsage(ctx, "alice"); after != before {
		t.Fatalf("a fork changed the owner's usage: %+v, was %+v", after, before)
	}
	// The source is unchanged; the fork goes on by itself.
	if h := mustHistory(t, s, sess.ID); h != contents(derefAll(msgs[:8]))+" another question" {
		t.Fatalf("source after the fork: %q", h)
	}
	next := msg(parley.RoleUser, "go on", base.Add(2*time.Hour))
	if err := s.AppendMessages(ctx, into.ID, next); err != nil || next.ParentID != got[len(got)-1].ID || next.Seq != int64(len(msgs)+1) {
		t.Fatalf("append to the fork: parent %q seq %d %v", next.ParentID, next.Seq, err)
	}
	// A fork at a message in the middle copies the branch up to it.
	into2 := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: base, UpdatedAt: base}
	part, err := s.Fork(ctx, sess.ID, other.ID, into2)
	if err != nil || contents(part) != contents(derefAll(msgs[:8]))+" another question" {
		t.Fatalf("fork of the other branch: %q %v", contents(part), err)
	}
	// A fork ending in tool calls without their results counts them open, like a crash would.
	into3 := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: base, UpdatedAt: base}
	if _, err := s.Fork(ctx, sess.ID, msgs[3].ID, into3); err != nil {
		t.Fatal(err)
	}
	open, err := s.SessionsWithOpenToolCalls(ctx, "", 100)
	if err != nil || !slices.Contains(open, into3.ID) || slices.Contains(open, into.ID) {
		t.Fatalf("open tool calls %v %v", open, err)
	}
}

func derefAll(ms []*parley.Message) []parley.Message {
	out := make([]parley.Message, len(ms))
	for i, m := range ms {
		out[i] = *m
	}
	return out
}

// testBranchProperty applies a few hundred random steps (new turns with and without tool rounds,
// edits, regenerations, failed turns, branch switches and forks) to a session and a model of its
// tree in memory, and checks after each that the active branch is the model's, and that every
// branch's model history is valid for the OpenAI API: as stored when it ends a whole turn, and
// always once llmctx has built it (tool calls shortened).
func testBranchProperty(t *testing.T, s parley.Store) {
	steps := 200
	if testing.Short() {
		steps = 120
	}
	rng := rand.New(rand.NewPCG(23, 2026))
	p := &prop{t: t, s: s, rng: rng, nodes: map[string]*pnode{}}
	p.sess = newSession(t, s, "prop", base).ID
	for step := range steps {
		p.step = step
		switch k := rng.IntN(20); {
		case k < 6 || len(p.users) == 0:
			p.turn("", true)
		case k < 10:
			p.edit()
		case k < 13:
			p.regenerate()
		case k < 16:
			p.switchBranch()
		case k < 17:
			p.fork()
		default:
			p.turn("", false)
		}
		p.check(p.sess, p.leaf)
	}
	// Every branch, each from its leaf.
	for id, n := range p.nodes {
		if n.leaf() {
			p.check(p.sess, id)
		}
	}
	if len(p.forks) == 0 {
		t.Fatal("no fork was made")
	}
	for _, f := range p.forks {
		h, err := s.History(ctx, f.session)
		if err != nil || contents(h) != f.want {
			t.Fatalf("fork %s: %q, want %q (%v)", f.session, contents(h), f.want, err)
		}
	}
}

type pnode struct {
	id, parent string
	msg        parley.Message
	children   int
	turnEnd    bool // the last message of a whole turn
}

func (n *pnode) leaf() bool { return n.children == 0 }

type prop struct {
	t     *testing.T
	s     parley.Store
	rng   *rand.Rand
	sess  string
	step  int
	n     int // messages made, for unique texts and call ids
	nodes map[string]*pnode
	order []string // ids in storage order
	leaf  string
	users []string // ids of user messages
	forks []struct{ session, want string }
}

func (p *prop) newMsg(role parley.Role) *parley.Message {
	p.n++
	m := msg(role, fmt.Sprintf("%s%d", role[:1], p.n), base.Add(time.Duration(p.n)*time.Millisecond))
	return m
}

// answer returns the messages of an answer: tool rounds, then a final text, or a failure.
func (p *prop) answer() []*parley.Message {
	var out []*parley.Message
	for range p.rng.IntN(3) {
		a := p.newMsg(parley.RoleAssistant)
		a.Content = parley.Content{}
		calls := 1 + p.rng.IntN(2)
		for c := range calls {
			a.ToolCalls = append(a.ToolCalls, parley.ToolCall{ID: fmt.Sprintf("call_%d_%d", p.n, c), Type: "function",
				Function: parley.FunctionCall{Name: "calc", Arguments: fmt.Sprintf(`{"n":%d}`, p.n)}})
		}
		out = append(out, a)
		for _, c := range slices.Backward(a.ToolCalls) { // results in any order
			r := p.newMsg(parley.RoleTool)
			r.ToolCallID, r.Name = c.ID, "calc"
			out = append(out, r)
		}
	}
	final := p.newMsg(parley.RoleAssistant)
	if p.rng.IntN(8) == 0 {
		final.Error = parley.ECUpstream // a failed turn
	}
	return append(out, final)
}

// store appends msgs, in one call or one at a time as the agent loop does, and records them.
func (p *prop) store(msgs []*parley.Message) {
	p.t.Helper()
	parent := p.leaf
	switch first := msgs[0].ParentID; first {
	case "":
	case parley.ParentRoot:
		parent = ""
	default:
		parent = first
	}
	calls := [][]*parley.Message{msgs}
	if p.rng.IntN(2) == 0 {
		calls = nil
		for _, m := range msgs {
			calls = append(calls, []*parley.Message{m})
		}
	}
	for _, c := range calls {
		if err := p.s.AppendMessages(ctx, p.sess, c...); err != nil {
			p.t.Fatalf("step %d: %v", p.step, err)
		}
	}
	for i, m := range msgs {
		if m.ParentID != parent {
			p.t.Fatalf("step %d: message %d follows %q, want %q", p.step, i, m.ParentID, parent)
		}
		n := &pnode{id: m.ID, parent: parent, msg: *m, turnEnd: i == len(msgs)-1}
		p.nodes[m.ID] = n
		if pn := p.nodes[parent]; pn != nil {
			pn.children++
		}
		p.order = append(p.order, m.ID)
		if m.Role == parley.RoleUser {
			p.users = append(p.users, m.ID)
		}
		parent = m.ID
	}
	p.leaf = parent
}

// turn stores a question and, when answered, its answer, after parent ("": the leaf).
func (p *prop) turn(parent string, answered bool) {
	q := p.newMsg(parley.RoleUser)
	q.ParentID = parent
	msgs := []*parley.Message{q}
	if answered {
		msgs = append(msgs, p.answer()...)
	}
	p.store(msgs)
}

func (p *prop) pick(ids []string) string { return ids[p.rng.IntN(len(ids))] }

// edit asks a new question in place of a user message: a sibling of it.
func (p *prop) edit() {
	u := p.nodes[p.pick(p.users)]
	parent := u.parent
	if parent == "" {
		parent = parley.ParentRoot
	}
	p.turn(parent, p.rng.IntN(5) > 0)
}

// regenerate answers a user message again: the new answer is a sibling of the old.
func (p *prop) regenerate() {
	u := p.pick(p.users)
	if err := p.s.SetLeaf(ctx, p.sess, u); err != nil {
		p.t.Fatalf("step %d: SetLeaf: %v", p.step, err)
	}
	p.leaf = u
	p.check(p.sess, "")
	p.store(p.answer())
}

// switchBranch makes the branch of a random message active: the newest leaf under it.
func (p *prop) switchBranch() {
	at := p.pick(p.order)
	leaf, err := p.s.SwitchBranch(ctx, p.sess, at)
	if err != nil {
		p.t.Fatalf("step %d: SwitchBranch: %v", p.step, err)
	}
	want := at
	in := map[string]bool{at: true}
	for _, id := range p.order {
		if in[p.nodes[id].parent] {
			in[id] = true
			want = id
		}
	}
	if leaf != want {
		p.t.Fatalf("step %d: switched to %q, want the newest leaf %q", p.step, leaf, want)
	}
	p.leaf = leaf
}

// fork copies the branch up to a random message into a new session.
func (p *prop) fork() {
	at := p.pick(p.order)
	into := &parley.Session{ID: parley.NewID(), Owner: "prop", CreatedAt: base, UpdatedAt: base}
	copies, err := p.s.Fork(ctx, p.sess, at, into)
	if err != nil {
		p.t.Fatalf("step %d: Fork: %v", p.step, err)
	}
	want := p.path(at)
	if contents(copies) != contents(want) {
		p.t.Fatalf("step %d: fork copied %q, want %q", p.step, contents(copies), contents(want))
	}
	p.forks = append(p.forks, struct{ session, want string }{into.ID, contents(want)})
	p.check(into.ID, "")
}

// path is the model's branch that ends at leaf.
func (p *prop) path(leaf string) []parley.Message {
	var out []parley.Message
	for id := leaf; id != ""; id = p.nodes[id].parent {
		out = append(out, p.nodes[id].msg)
	}
	slices.Reverse(out)
	return out
}

// check reads the branch of sess that ends at leaf ("": the active one) every way there is, and
// checks it against the model, when sess is the model's session, and for validity.
func (p *prop) check(sess, leaf string) {
	p.t.Helper()
	full, tip, err := p.s.ListBranch(ctx, sess, leaf, 0, 0)
	if err != nil {
		p.t.Fatalf("step %d: ListBranch: %v", p.step, err)
	}
	model, mtip, err := p.s.ModelBranch(ctx, sess, leaf)
	if err != nil || mtip != tip {
		p.t.Fatalf("step %d: ModelBranch: %+v %+v %v", p.step, mtip, tip, err)
	}
	if sess == p.sess {
		want := leaf
		if want == "" {
			want = p.leaf
		}
		if tip.ID != want || contents(full) != contents(p.path(want)) {
			p.t.Fatalf("step %d: branch to %q is %q, want %q", p.step, tip.ID, contents(full), contents(p.path(want)))
		}
	}
	if len(model) != len(full) {
		p.t.Fatalf("step %d: %d model messages, %d stored", p.step, len(model), len(full))
	}
	for i := range full {
		if jsonOf(p.t, full[i].ModelView()) != jsonOf(p.t, model[i]) {
			p.t.Fatalf("step %d: model message %d differs", p.step, i)
		}
		if i > 0 && full[i].ParentID != full[i-1].ID {
			p.t.Fatalf("step %d: message %d of the branch follows %q", p.step, i, full[i].ParentID)
		}
	}
	if leaf == "" && sess == p.sess {
		if h, err := p.s.ModelHistory(ctx, sess); err != nil || contents(h) != contents(model) {
			p.t.Fatalf("step %d: ModelHistory differs from the active branch", p.step)
		}
	}
	// As stored, a branch that ends a whole turn is a valid history; every branch is, as built.
	if n := p.nodes[tip.ID]; n != nil && n.turnEnd {
		if err := parley.CheckHistory(model); err != nil {
			p.t.Fatalf("step %d: stored branch %q: %v", p.step, contents(model), err)
		}
	}
	for _, rounds := range []int{1, llmctx.DefaultToolHistoryRounds} {
		built := llmctx.Build(slices.Clone(model), llmctx.Options{SystemPrompt: "sys", ToolHistoryRounds: rounds})
		if err := parley.CheckHistory(built); err != nil {
			p.t.Fatalf("step %d: built branch (rounds %d): %v", p.step, rounds, err)
		}
	}
}

// testBranchSwitchUnderRun: no switch of branch while a run runs in the session (its next message
// would land on the other branch); the run itself may set the leaf (a regenerated answer).
func testBranchSwitchUnderRun(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	q, a := msg(parley.RoleUser, "q", base), msg(parley.RoleAssistant, "a", base)
	if err := s.AppendMessages(ctx, sess.ID, q, a); err != nil {
		t.Fatal(err)
	}
	r := newRun(t, s, sess.ID, "i1", base.Add(time.Hour))
	if _, err := s.SwitchBranch(ctx, sess.ID, q.ID); parley.CodeOf(err) != parley.ECConflict {
		t.Fatalf("switch under a run: %v, want a conflict", err)
	}
	if err := s.SetLeaf(ctx, sess.ID, q.ID); err != nil {
		t.Fatalf("the run's own SetLeaf: %v", err)
	}
	if err := s.EndRun(ctx, r.ID, "i1", parley.FinishStop, base); err != nil {
		t.Fatal(err)
	}
	if leaf, err := s.SwitchBranch(ctx, sess.ID, q.ID); err != nil || leaf != a.ID {
		t.Fatalf("switch after the run: %q %v", leaf, err)
	}
}
