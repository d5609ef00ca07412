package storetest

import (
	"fmt"
	"math"
	"sync"
	"testing"

	parley "github.com/parleyhq/parley"
)

func artifactStore(t *testing.T, s parley.Store) parley.ArtifactStore {
	t.Helper()
	as, ok := s.(parley.ArtifactStore)
	if !ok {
		t.Fatalf("%T does not implement parley.ArtifactStore", s)
	}
	return as
}

func testArtifacts(t *testing.T, s parley.Store) {
	as := artifactStore(t, s)
	sess := newSession(t, s, "alice", base)
	other := newSession(t, s, "bob", base)

	a := &parley.Artifact{ID: parley.NewID(), SessionID: sess.ID, RunID: "run1", Type: parley.ArtifactCode, Language: "go",
		Title: "Hello", Content: "package main\n\nfunc main() {}\n", CreatedAt: base}
	if err := as.AddArtifactVersion(ctx, a); err != nil {
		t.Fatal(err)
	}
	if a.Version != 1 {
		t.Fatalf("first version = %d, want 1", a.Version)
	}
	// Every update is a new version; the old ones stay.
	v2 := *a
	v2.Content, v2.Title, v2.CreatedAt = "package main\n", "Hello v2", base.Add(1e9)
	if err := as.AddArtifactVersion(ctx, &v2); err != nil || v2.Version != 2 {
		t.Fatalf("second version: %d, %v", v2.Version, err)
	}
	b := &parley.Artifact{ID: parley.NewID(), SessionID: sess.ID, Type: parley.ArtifactSVG, Title: "Dot",
		Content: "<svg/>", CreatedAt: base.Add(2e9)}
	if err := as.AddArtifactVersion(ctx, b); err != nil {
		t.Fatal(err)
	}

	got, err := as.GetArtifact(ctx, a.ID, 1)
	if err != nil || jsonOf(t, got) != jsonOf(t, a) {
		t.Fatalf("version 1: %v\n got %s\nwant %s", err, jsonOf(t, got), jsonOf(t, a))
	}
	if got, err = as.GetArtifact(ctx, a.ID, 0); err != nil || jsonOf(t, got) != jsonOf(t, &v2) {
		t.Fatalf("latest: %v\n got %s\nwant %s", err, jsonOf(t, got), jsonOf(t, &v2))
	}
	if _, err := as.GetArtifact(ctx, a.ID, 3); !isNotFound(err) {
		t.Fatalf("version 3: %v, want not found", err)
	}
	if _, err := as.GetArtifact(ctx, "nope", 0); !isNotFound(err) {
		t.Fatalf("unknown id: %v, want not found", err)
	}
	list, err := as.ListArtifacts(ctx, sess.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || jsonOf(t, list[0]) != jsonOf(t, v2) || jsonOf(t, list[1]) != jsonOf(t, b) {
		t.Fatalf("list: %s", jsonOf(t, list))
	}
	if list, err := as.ListArtifacts(ctx, other.ID); err != nil || len(list) != 0 {
		t.Fatalf("other session's list: %v, %v", list, err)
	}

	// Concurrent updates each get their own version.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := *b
			v.Content = fmt.Sprintf("<svg>%d</svg>", i)
			errs <- as.AddArtifactVersion(ctx, &v)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent version: %v", err)
		}
	}
	if got, err := as.GetArtifact(ctx, b.ID, 0); err != nil || got.Version != 9 {
		t.Fatalf("after 8 concurrent updates: %+v %v", got, err)
	}
	for v := 1; v <= 9; v++ {
		if _, err := as.GetArtifact(ctx, b.ID, v); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
	}

	// An artifact belongs to its session: another session cannot add a version to it.
	steal := *a
	steal.SessionID = other.ID
	if err := as.AddArtifactVersion(ctx, &steal); !isNotFound(err) {
		t.Fatalf("version from another session: %v, want not found", err)
	}
	lost := &parley.Artifact{ID: parley.NewID(), SessionID: "no-such-session", Type: parley.ArtifactMarkdown, Title: "x", Content: "x", CreatedAt: base}
	if err := as.AddArtifactVersion(ctx, lost); !isNotFound(err) {
		t.Fatalf("unknown session: %v, want not found", err)
	}
	// They go with their session.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := as.GetArtifact(ctx, a.ID, 0); !isNotFound(err) {
		t.Fatalf("after the session was deleted: %v, want not found", err)
	}
}

func testSearchCosts(t *testing.T, s parley.Store) {
	cs, ok := s.(parley.SearchCostStore)
	if !ok {
		t.Fatalf("%T does not implement parley.SearchCostStore", s)
	}
	sess := newSession(t, s, "alice", base)
	u, err := cs.OwnerSearchUsage(ctx, "alice")
	if err != nil || u.Calls != 0 || u.Dollars != 0 || len(u.ByBackend) != 0 {
		t.Fatalf("no calls yet: %+v, %v", u, err)
	}
	for _, c := range []parley.SearchCost{
		{Owner: "alice", SessionID: sess.ID, RunID: "r1", Backend: "tavily", Query: "go 1.26", Results: 5, Credits: 1, Dollars: 0.008},
		{Owner: "alice", SessionID: sess.ID, RunID: "r1", Backend: "tavily", Query: "go release", Results: 3, Credits: 2, Dollars: 0.016},
		{Owner: "alice", Backend: "brave", Query: "parley", Results: 10, Credits: 1, Dollars: 0.005},
		{Owner: "bob", Backend: "brave", Query: "other", Results: 1, Credits: 1, Dollars: 0.005},
	} {
		c.ID, c.CreatedAt = parley.NewID(), base
		if err := cs.AddSearchCost(ctx, &c); err != nil {
			t.Fatal(err)
		}
	}
	u, err = cs.OwnerSearchUsage(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if u.Calls != 3 || !near(u.Credits, 4) || !near(u.Dollars, 0.029) {
		t.Fatalf("alice's totals: %+v", u)
	}
	tv, br := u.ByBackend["tavily"], u.ByBackend["brave"]
	if tv.Calls != 2 || !near(tv.Credits, 3) || !near(tv.Dollars, 0.024) || br.Calls != 1 || !near(br.Dollars, 0.005) || len(u.ByBackend) != 2 {
		t.Fatalf("alice's backends: %+v", u.ByBackend)
	}
	// A cost stays when its session is deleted: it was spent.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if u, err = cs.OwnerSearchUsage(ctx, "alice"); err != nil || u.Calls != 3 {
		t.Fatalf("after deleting the session: %+v, %v", u, err)
	}
}
