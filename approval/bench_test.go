package approval

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

// BenchmarkResolverSession is what the approval policy adds to each model answer with tool calls:
// reading the session, its project's policy and the tools allowed "always" (SQLite, one session in
// a project), then deciding the calls.
func BenchmarkResolverSession(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "a.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	p := &parley.Project{ID: parley.NewID(), Owner: "alice", Name: "P", ToolPolicy: map[string]string{"mcp_fs_*": "ask"}, CreatedAt: now, UpdatedAt: now}
	if err := st.CreateProject(ctx, p); err != nil {
		b.Fatal(err)
	}
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "alice", ProjectID: p.ID, CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, sess); err != nil {
		b.Fatal(err)
	}
	server, _ := Parse("calculator=auto,mcp_git_*=ask,mcp_git_log=auto")
	r := &Resolver{Server: server, Store: st}
	b.ReportAllocs()
	for b.Loop() {
		s, err := r.Session(ctx, sess.ID)
		if err != nil {
			b.Fatal(err)
		}
		for _, tool := range []string{"calculator", "mcp_fs_write", "mcp_git_log", "get_current_time"} {
			s.Mode(tool)
		}
	}
}

// BenchmarkPolicyMatch is one lookup in a policy of 20 patterns.
func BenchmarkPolicyMatch(b *testing.B) {
	var spec string
	for i := range 20 {
		spec += "mcp_srv" + string(rune('a'+i)) + "_*=ask,"
	}
	p, err := Parse(spec + "calculator=auto")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Match("mcp_srvt_delete_file")
	}
}
