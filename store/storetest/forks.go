package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// testForkKeepsFiles: a fork's copied messages refer to the files of the session forked from
// (and of its ancestors), so deleting that session hands its files to a fork instead of
// deleting them; a file goes only with the last session of its fork tree.
func testForkKeepsFiles(t *testing.T, s parley.Store) {
	// One fork, then the source deleted: the fork owns the source's files.
	src := newSession(t, s, "alice", base)
	fa := forkTreeFile(t, s, src, 'a')
	fork := forkOf(t, s, src, base.Add(time.Minute))
	fb := forkTreeFile(t, s, fork, 'b')
	if err := s.DeleteSession(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*parley.File{fa, fb} {
		got, err := s.GetFile(ctx, f.ID)
		if err != nil || got.SessionID != fork.ID {
			t.Fatalf("file %s after its session was deleted: %+v %v; want it in the fork %s", f.Name, got, err, fork.ID)
		}
	}
	if n, err := s.BlobRefs(ctx, fa.SHA256); err != nil || n != 1 {
		t.Fatalf("BlobRefs of the handed file = %d, %v", n, err)
	}
	if list, err := s.ListSessionFiles(ctx, fork.ID, "", 10); err != nil || len(list) != 2 {
		t.Fatalf("the fork's files: %+v %v", list, err)
	}
	if h, err := s.History(ctx, fork.ID); err != nil || len(h) != 2 || h[0].Content.Parts()[0].File.FileID != fa.ID {
		t.Fatalf("the fork's history: %+v %v", h, err)
	}
	if err := s.DeleteSession(ctx, fork.ID); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*parley.File{fa, fb} {
		if _, err := s.GetFile(ctx, f.ID); !isNotFound(err) {
			t.Fatalf("file %s after the last session of its tree went: %v", f.Name, err)
		}
	}
	if n, _ := s.BlobRefs(ctx, fa.SHA256); n != 0 {
		t.Fatalf("BlobRefs after the tree went = %d", n)
	}

	// A tree: b and c fork a, d forks b, e forks d. Deleted in every order, a session's files
	// last at least while the session or a fork of it (at any depth) is left, always in a session
	// that is left, and go with the last.
	names := []string{"a", "b", "c", "d", "e"}
	parent := map[string]string{"b": "a", "c": "a", "d": "b", "e": "d"}
	for _, order := range permutations(names) {
		if testing.Short() && order[0] != "a" && order[0] != "d" {
			continue
		}
		sessions := map[string]*parley.Session{}
		files := map[string]*parley.File{}
		for i, n := range names {
			if p, ok := parent[n]; ok {
				sessions[n] = forkOf(t, s, sessions[p], base.Add(time.Duration(i)*time.Minute))
			} else {
				sessions[n] = newSession(t, s, "alice", base)
			}
			files[n] = forkTreeFile(t, s, sessions[n], n[0])
		}
		left := slices.Clone(names)
		for _, gone := range order {
			if err := s.DeleteSession(ctx, sessions[gone].ID); err != nil {
				t.Fatalf("order %v: deleting %s: %v", order, gone, err)
			}
			left = slices.DeleteFunc(left, func(n string) bool { return n == gone })
			for _, n := range names {
				got, err := s.GetFile(ctx, files[n].ID)
				needed := slices.ContainsFunc(left, func(l string) bool { return l == n || descends(parent, l, n) })
				switch {
				case err != nil && !isNotFound(err):
					t.Fatal(err)
				case err != nil && needed:
					t.Fatalf("order %v, after %s: %s's file is gone, still referred to from %v", order, gone, n, left)
				case err == nil && !slices.ContainsFunc(left, func(l string) bool { return sessions[l].ID == got.SessionID }):
					t.Fatalf("order %v, after %s: %s's file is in session %q, not one left", order, gone, n, got.SessionID)
				}
			}
		}
		for _, n := range names {
			if _, err := s.GetFile(ctx, files[n].ID); !isNotFound(err) {
				t.Fatalf("order %v: %s's file outlived its tree: %v", order, n, err)
			}
		}
	}
}

// forkOf forks sess at its last message into a new session created at at.
func forkOf(t *testing.T, s parley.Store, sess *parley.Session, at time.Time) *parley.Session {
	t.Helper()
	h, err := s.History(ctx, sess.ID)
	if err != nil || len(h) == 0 {
		t.Fatalf("history of %s: %v %v", sess.ID, h, err)
	}
	into := &parley.Session{ID: parley.NewID(), Title: sess.Title + " (fork)", Owner: sess.Owner, CreatedAt: at, UpdatedAt: at}
	if _, err := s.Fork(ctx, sess.ID, h[len(h)-1].ID, into); err != nil {
		t.Fatalf("Fork: %v", err)
	}
	return into
}

// forkTreeFile stores a file in sess and a message that refers to it.
func forkTreeFile(t *testing.T, s parley.Store, sess *parley.Session, c byte) *parley.File {
	t.Helper()
	f := newFile(sess.Owner, sess.ID, sha(c), 1, base)
	f.Name = fmt.Sprintf("%c.txt", c)
	if err := s.CreateFile(ctx, f, 0); err != nil {
		t.Fatal(err)
	}
	m := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, CreatedAt: base,
		Content: parley.Parts(parley.Part{Type: "file", File: &parley.FileRef{FileID: f.ID, Filename: f.Name}})}
	if err := s.AppendMessages(ctx, sess.ID, m); err != nil {
		t.Fatal(err)
	}
	return f
}

// descends reports whether n is a fork of a, at any depth.
func descends(parent map[string]string, n, a string) bool {
	for p, ok := parent[n]; ok; p, ok = parent[p] {
		if p == a {
			return true
		}
	}
	return false
}

func permutations(xs []string) [][]string {
	if len(xs) <= 1 {
		return [][]string{slices.Clone(xs)}
	}
	var out [][]string
	for i := range xs {
		rest := append(slices.Clone(xs[:i]), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]string{xs[i]}, p...))
		}
	}
	return out
}

// testForkDeleteConcurrent: a fork made while its source is being deleted either fails (the
// source is not found) or keeps the source's files; it never copies messages whose files are
// gone.
func testForkDeleteConcurrent(t *testing.T, s parley.Store) {
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	forked := 0
	for i := range rounds {
		src := newSession(t, s, "alice", base)
		f := forkTreeFile(t, s, src, 'x')
		h, err := s.History(ctx, src.ID)
		if err != nil {
			t.Fatal(err)
		}
		into := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: base, UpdatedAt: base}
		var forkErr, delErr error
		var wg sync.WaitGroup
		wg.Go(func() { _, forkErr = s.Fork(ctx, src.ID, h[0].ID, into) })
		wg.Go(func() { delErr = s.DeleteSession(ctx, src.ID) })
		wg.Wait()
		if delErr != nil {
			t.Fatalf("round %d: DeleteSession: %v", i, delErr)
		}
		got, err := s.GetFile(ctx, f.ID)
		switch {
		case forkErr == nil:
			forked++
			if err != nil || got.SessionID != into.ID {
				t.Fatalf("round %d: the fork was made, and the source's file is %+v, %v", i, got, err)
			}
		case isNotFound(forkErr):
			if _, err := s.GetSession(ctx, into.ID); !isNotFound(err) {
				t.Fatalf("round %d: a refused fork made a session: %v", i, err)
			}
		default:
			t.Fatalf("round %d: Fork: %v", i, forkErr)
		}
	}
	t.Logf("%d of %d forks made before their source was deleted", forked, rounds)
}

// testInLineage: a session may refer to the files of itself and of its ancestors (forked_from,
// transitively, also after a deletion handed a session's place in the tree to its fork), and of
// no other session: not a sibling fork, not a descendant, not another owner's session even when
// forked from, not an unrelated session of the same owner.
func testInLineage(t *testing.T, s parley.Store) {
	// grand ◀─ parent ◀─ gone ◀─ self; deleting gone makes self a fork of parent. sibling forks
	// parent after that; bobs is a fork of self that another owner holds.
	grand := newSession(t, s, "alice", base)
	forkTreeFile(t, s, grand, 'g')
	parent := forkOf(t, s, grand, base.Add(time.Minute))
	gone := forkOf(t, s, parent, base.Add(2*time.Minute))
	self := forkOf(t, s, gone, base.Add(3*time.Minute))
	if err := s.DeleteSession(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	sibling := forkOf(t, s, parent, base.Add(4*time.Minute))
	h, err := s.History(ctx, self.ID)
	if err != nil {
		t.Fatal(err)
	}
	bobs := &parley.Session{ID: parley.NewID(), Title: "bob's", Owner: "bob", CreatedAt: base.Add(5 * time.Minute), UpdatedAt: base.Add(5 * time.Minute)}
	if _, err := s.Fork(ctx, self.ID, h[len(h)-1].ID, bobs); err != nil {
		t.Fatal(err)
	}
	bobsOwn := newSession(t, s, "bob", base)
	unrelated := newSession(t, s, "alice", base)

	for _, c := range []struct {
		name              string
		session, ancestor string
		want              bool
	}{
		{"self", self.ID, self.ID, true},
		{"parent", self.ID, parent.ID, true},
		{"grandparent after a hand-over", self.ID, grand.ID, true},
		{"the deleted session", self.ID, gone.ID, false},
		{"a sibling fork", self.ID, sibling.ID, false},
		{"the sibling's view of self", sibling.ID, self.ID, false},
		{"a descendant", parent.ID, self.ID, false},
		{"another user's fork", bobs.ID, self.ID, false},
		{"another user's session", self.ID, bobsOwn.ID, false},
		{"an unrelated session", self.ID, unrelated.ID, false},
		{"an unknown session", "nope", grand.ID, false},
	} {
		got, err := s.InLineage(ctx, c.session, c.ancestor)
		if err != nil || got != c.want {
			t.Errorf("%s: InLineage = %v, %v; want %v", c.name, got, err, c.want)
		}
	}
}

// testForkKeepsArtifacts: a fork's copied messages show the artifacts made before the fork by
// id, so deleting the source hands its artifacts, every version, to its oldest fork as it does
// its files; they go with the last session of the fork tree.
func testForkKeepsArtifacts(t *testing.T, s parley.Store) {
	as := artifactStore(t, s)
	src := newSession(t, s, "alice", base)
	if err := s.AppendMessages(ctx, src.ID, msg(parley.RoleUser, "draw", base)); err != nil {
		t.Fatal(err)
	}
	a := &parley.Artifact{ID: parley.NewID(), SessionID: src.ID, Type: parley.ArtifactMarkdown, Title: "Notes", Content: "one", CreatedAt: base}
	if err := as.AddArtifactVersion(ctx, a); err != nil {
		t.Fatal(err)
	}
	a2 := *a
	a2.Content, a2.CreatedAt = "two", base.Add(time.Second)
	if err := as.AddArtifactVersion(ctx, &a2); err != nil || a2.Version != 2 {
		t.Fatalf("second version: %d, %v", a2.Version, err)
	}
	b := &parley.Artifact{ID: parley.NewID(), SessionID: src.ID, Type: parley.ArtifactSVG, Title: "Dot", Content: "<svg/>", CreatedAt: base}
	if err := as.AddArtifactVersion(ctx, b); err != nil {
		t.Fatal(err)
	}
	heir := forkOf(t, s, src, base.Add(time.Minute))
	other := forkOf(t, s, src, base.Add(2*time.Minute))
	own := &parley.Artifact{ID: parley.NewID(), SessionID: heir.ID, Type: parley.ArtifactMarkdown, Title: "Own", Content: "mine", CreatedAt: base.Add(time.Hour)}
	if err := as.AddArtifactVersion(ctx, own); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSession(ctx, src.ID); err != nil {
		t.Fatal(err)
	}
	for _, want := range []*parley.Artifact{a, &a2, b, own} {
		got, err := as.GetArtifact(ctx, want.ID, want.Version)
		w := *want
		w.SessionID = heir.ID
		if err != nil || jsonOf(t, got) != jsonOf(t, &w) {
			t.Fatalf("artifact %s version %d after its session was deleted: %+v %v; want %+v", want.Title, want.Version, got, err, w)
		}
	}
	if list, err := as.ListArtifacts(ctx, heir.ID); err != nil || len(list) != 3 {
		t.Fatalf("the heir's artifacts: %+v %v", list, err)
	}
	if list, err := as.ListArtifacts(ctx, other.ID); err != nil || len(list) != 0 {
		t.Fatalf("the other fork's artifacts: %+v %v", list, err)
	}
	// The heir took the source's place: deleting it hands them on to the other fork.
	if err := s.DeleteSession(ctx, heir.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := as.GetArtifact(ctx, a.ID, 1); err != nil || got.SessionID != other.ID || got.Content != "one" {
		t.Fatalf("artifact after the heir was deleted: %+v %v; want it in %s", got, err, other.ID)
	}
	if err := s.DeleteSession(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []*parley.Artifact{a, &a2, b, own} {
		if _, err := as.GetArtifact(ctx, gone.ID, gone.Version); !isNotFound(err) {
			t.Fatalf("artifact %s version %d outlived its fork tree: %v", gone.Title, gone.Version, err)
		}
	}
}

// ForkOfADeletedSession: a Fork whose source session is deleted between the two reads of its
// branch (the tip, then the messages; between is the store's hook there, given the function to
// call) finds no message: not found, and no session made. The branch is off the active one, so
// that a store that reads an unbranched session's messages with its tip reads twice. (Without
// ForkBranch's check of an empty branch, SQLite's Fork panics on an index here; PostgreSQL's
// finds the source gone in its transaction's check first.)
func ForkOfADeletedSession(t *testing.T, s parley.Store, between func(fn func())) {
	t.Helper()
	sess := newSession(t, s, "alice", base)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Second) }
	q1, a1, q2, a2 := msg(parley.RoleUser, "q1", at(1)), msg(parley.RoleAssistant, "a1", at(2)), msg(parley.RoleUser, "q2", at(3)), msg(parley.RoleAssistant, "a2", at(4))
	if err := s.AppendMessages(ctx, sess.ID, q1, a1, q2, a2); err != nil {
		t.Fatal(err)
	}
	q2e := msg(parley.RoleUser, "q2e", at(5)) // an edit of q2: the session is branched
	q2e.ParentID = a1.ID
	if err := s.AppendMessages(ctx, sess.ID, q2e); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	deleted := make(chan error, 1)
	between(func() { once.Do(func() { deleted <- s.DeleteSession(ctx, sess.ID) }) })
	defer between(nil)
	into := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: at(6), UpdatedAt: at(6)}
	msgs, err := s.Fork(ctx, sess.ID, a2.ID, into)
	if !isNotFound(err) {
		t.Fatalf("Fork of a session deleted between its reads: %d messages, %v; want not found", len(msgs), err)
	}
	select {
	case err := <-deleted:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("the session was not deleted between the reads: the hook was not called")
	}
	if _, err := s.GetSession(ctx, into.ID); !isNotFound(err) {
		t.Fatalf("the fork's session: %v, want not found", err)
	}
}
