package rowcodec

import (
	"slices"
	"testing"

	parley "github.com/parleyhq/parley"
)

func TestLinkParents(t *testing.T) {
	m := func(id, parent string) *parley.Message { return &parley.Message{ID: id, ParentID: parent} }
	for _, tc := range []struct {
		name     string
		leaf     string
		msgs     []*parley.Message
		parents  []string
		outside  []string
		branches bool
	}{
		{"first messages of a session", "", []*parley.Message{m("a", ""), m("b", "")}, []string{"", "a"}, nil, false},
		{"after the leaf", "x", []*parley.Message{m("a", ""), m("b", "")}, []string{"x", "a"}, nil, false},
		{"the leaf named", "x", []*parley.Message{m("a", "x")}, []string{"x"}, []string{"x"}, false},
		{"an edit", "x", []*parley.Message{m("a", "w"), m("b", "")}, []string{"w", "a"}, []string{"w"}, true},
		{"a new root", "x", []*parley.Message{m("a", parley.ParentRoot)}, []string{""}, nil, true},
		{"a new root of an empty session", "", []*parley.Message{m("a", parley.ParentRoot)}, []string{""}, nil, false},
		{"a parent in the batch", "x", []*parley.Message{m("a", ""), m("b", "a"), m("c", "a")}, []string{"x", "a", "a"}, nil, true},
		{"a parent later in the batch", "x", []*parley.Message{m("a", "b"), m("b", "")}, []string{"b", "a"}, []string{"b"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := make([]string, len(tc.msgs))
			for i, m := range tc.msgs {
				before[i] = m.ParentID
			}
			l := LinkParents(tc.msgs, tc.leaf)
			if !slices.Equal(l.Parents, tc.parents) || !slices.Equal(l.Outside, tc.outside) || l.Branches != tc.branches {
				t.Fatalf("got %+v, want parents %v outside %v branches %v", l, tc.parents, tc.outside, tc.branches)
			}
			for i, m := range tc.msgs {
				if m.ParentID != before[i] {
					t.Fatalf("message %d changed: %q", i, m.ParentID)
				}
			}
		})
	}
}

func TestNewestInSubtree(t *testing.T) {
	// a ─ b ─ c        a is the root; e follows a; c, d and f are leaves.
	//     └ d
	// └ e ─ f
	nodes := []parley.TreeNode{{ID: "a"}, {ID: "b", ParentID: "a"}, {ID: "c", ParentID: "b"}, {ID: "d", ParentID: "b"},
		{ID: "e", ParentID: "a"}, {ID: "f", ParentID: "e"}, {ID: "g"}}
	for id, want := range map[string]string{"a": "f", "b": "d", "c": "c", "e": "f", "g": "g", "x": ""} {
		if got := NewestInSubtree(nodes, id); got != want {
			t.Errorf("NewestInSubtree(%q) = %q, want %q", id, got, want)
		}
	}
}
