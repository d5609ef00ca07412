package approval

import (
	"context"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

func TestParseAndMatch(t *testing.T) {
	p, err := Parse(" mcp_fs_* = ask, mcp_fs_read* = auto ,calculator=deny,*=auto, mcp_fs_read_secret=deny")
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]string{
		"mcp_fs_delete":      parley.PolicyAsk,  // mcp_fs_* over *
		"mcp_fs_read_file":   parley.PolicyAuto, // the longer pattern wins, wherever it is written
		"mcp_fs_read_secret": parley.PolicyDeny, // an exact name beats every pattern
		"calculator":         parley.PolicyDeny,
		"get_current_time":   parley.PolicyAuto, // only *
	} {
		if got, _, ok := p.Match(tool); !ok || got != want {
			t.Errorf("Match(%q) = %q, %v; want %q", tool, got, ok, want)
		}
	}
	empty, err := Parse("")
	if err != nil || len(empty.Rules()) != 0 {
		t.Fatalf("Parse(\"\") = %v, %v", empty.Rules(), err)
	}
	if _, _, ok := empty.Match("calculator"); ok {
		t.Fatal("the empty policy matched")
	}
	noStar, _ := Parse("mcp_*=ask")
	if _, _, ok := noStar.Match("calculator"); ok {
		t.Fatal("mcp_* matched calculator")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, s := range []string{"calculator", "calculator=maybe", "=ask", "[=ask", "a=ASK"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	if err := CheckMap(map[string]string{"x": "nope"}); err == nil || !strings.Contains(err.Error(), "auto, ask or deny") {
		t.Errorf("CheckMap: %v", err)
	}
}

// The map of a project gives the same answer whatever order Go ranges it in.
func TestFromMapOrderFree(t *testing.T) {
	m := map[string]string{"*": "deny", "mcp_*": "ask", "mcp_fs_*": "auto", "mcp_fs_rm": "deny"}
	for range 20 {
		p, err := FromMap(m)
		if err != nil {
			t.Fatal(err)
		}
		for tool, want := range map[string]string{"mcp_fs_ls": "auto", "mcp_git_push": "ask", "calculator": "deny", "mcp_fs_rm": "deny"} {
			if got, _, _ := p.Match(tool); got != want {
				t.Fatalf("Match(%q) = %q, want %q", tool, got, want)
			}
		}
	}
}

type fakeStore struct {
	sess    parley.Session
	project *parley.Project
	always  []string
}

func (f *fakeStore) GetSession(context.Context, string) (*parley.Session, error) { return &f.sess, nil }
func (f *fakeStore) GetProject(_ context.Context, id string) (*parley.Project, error) {
	if f.project == nil || f.project.ID != id {
		return nil, parley.ErrNotFound
	}
	return f.project, nil
}
func (f *fakeStore) AlwaysAllowed(context.Context, string) ([]string, error) { return f.always, nil }

func TestResolverOrder(t *testing.T) {
	server, _ := Parse("mcp_fs_write=deny,calculator=ask")
	st := &fakeStore{sess: parley.Session{ID: "s", ProjectID: "p"},
		project: &parley.Project{ID: "p", Name: "Ops", ToolPolicy: map[string]string{"mcp_fs_write": "ask"}}}
	hints := map[string]Hints{"mcp_fs_rm": {Destructive: true}, "mcp_fs_ls": {ReadOnly: true}, "mcp_fs_write": {Destructive: true}}
	r := &Resolver{Server: server, Hints: func(tool string) Hints { return hints[tool] }, Store: st}
	s, err := r.Session(context.Background(), "s")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ tool, mode, why string }{
		{"mcp_fs_write", parley.PolicyAsk, `project "Ops"`}, // the project's policy over the server's deny
		{"calculator", parley.PolicyAsk, "server's tool policy"},
		{"mcp_fs_rm", parley.PolicyAsk, "destructive"},
		{"mcp_fs_ls", parley.PolicyAuto, "read-only"},
		{"get_current_time", parley.PolicyAuto, ""},
	}
	for _, c := range cases {
		mode, why := s.Mode(c.tool)
		if mode != c.mode || !strings.Contains(why, c.why) {
			t.Errorf("Mode(%q) = %q (%s), want %q (%s)", c.tool, mode, why, c.mode, c.why)
		}
	}
	// "Always" turns ask into auto for that tool only; a default of ask covers the unmarked rest.
	st.always = []string{"mcp_fs_rm"}
	r.Default = parley.PolicyAsk
	s, _ = r.Session(context.Background(), "s")
	if mode, _ := s.Mode("mcp_fs_rm"); mode != parley.PolicyAuto {
		t.Errorf("always-allowed tool: %q", mode)
	}
	if mode, _ := s.Mode("calculator"); mode != parley.PolicyAsk {
		t.Errorf("calculator: %q", mode)
	}
	if mode, why := s.Mode("get_current_time"); mode != parley.PolicyAsk || !strings.Contains(why, "default") {
		t.Errorf("default ask: %q %q", mode, why)
	}
	// Always never lifts a deny.
	st.always = []string{"mcp_fs_write"}
	st.project = nil
	s, _ = r.Session(context.Background(), "s")
	if mode, _ := s.Mode("mcp_fs_write"); mode != parley.PolicyDeny {
		t.Errorf("always over deny: %q", mode)
	}
}
