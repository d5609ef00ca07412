package workspace

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

// BenchmarkPromptFor measures what a project adds to each model call of its sessions: reading the
// session, the project and its memory from SQLite and building the prompt section, with a full
// memory (500 facts of 200 bytes) and the default budget of 2000 tokens.
func BenchmarkPromptFor(b *testing.B) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "b.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	p := &parley.Project{ID: parley.NewID(), Owner: "o", Name: "Bench", Instructions: strings.Repeat("Be brief. ", 50), CreatedAt: now, UpdatedAt: now}
	if err := st.CreateProject(ctx, p); err != nil {
		b.Fatal(err)
	}
	s := &parley.Session{ID: parley.NewID(), Owner: "o", ProjectID: p.ID, CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSession(ctx, s); err != nil {
		b.Fatal(err)
	}
	for i := range parley.MaxMemoryEntries {
		t := now.Add(time.Duration(i) * time.Second)
		e := &parley.MemoryEntry{ID: parley.NewID(), ProjectID: p.ID, Content: fmt.Sprintf("%03d ", i) + strings.Repeat("fact ", 39), CreatedAt: t, UpdatedAt: t}
		if err := st.AddMemory(ctx, e, parley.MaxMemoryEntries); err != nil {
			b.Fatal(err)
		}
	}
	// PromptFor reads only the newest facts that can fit the budget, and counts the rest.
	b.Run("PromptFor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			out, err := PromptFor(ctx, st, s.ID, 2000)
			if err != nil || !strings.Contains(out, "left out") {
				b.Fatalf("%v %q", err, out)
			}
		}
	})
	// For comparison: reading the whole memory each time.
	b.Run("WholeMemory", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			all, err := st.ListMemory(ctx, p.ID, parley.MaxMemoryEntries)
			if err != nil || !strings.Contains(Prompt(p, all, 2000), "left out") {
				b.Fatal(err)
			}
		}
	})
}
