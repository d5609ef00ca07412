package sqlite

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/storetest"
)

// The benchmark bodies are in storetest, shared with store/postgres; raw_bench_test.go measures
// the database itself the same way (the limit).

func BenchmarkAppendOne(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchAppend(b, s, 1)
}

func BenchmarkAppendBatch100(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchAppend(b, s, 100)
}

func history10k(b *testing.B) (*Store, string) {
	b.Helper()
	s := openTemp(b)
	return s, storetest.Seed10k(b, s)
}

func BenchmarkHistory10k(b *testing.B) {
	s, sid := history10k(b)
	defer s.Close()
	storetest.BenchHistory(b, s, sid)
}

func BenchmarkModelContext10k(b *testing.B) {
	s, sid := history10k(b)
	defer s.Close()
	storetest.BenchModelContext(b, s, sid)
}

// The same reads on a session that has branches: the active branch is found by walking up the
// tree from its leaf.
func BenchmarkHistory10kBranched(b *testing.B) {
	s, sid := history10k(b)
	defer s.Close()
	storetest.Branch10k(b, s, sid)
	storetest.BenchHistory(b, s, sid)
}

func BenchmarkModelContext10kBranched(b *testing.B) {
	s, sid := history10k(b)
	defer s.Close()
	storetest.Branch10k(b, s, sid)
	storetest.BenchModelContext(b, s, sid)
}

// seedSessions inserts n sessions of owner in one transaction, one second apart.
func seedSessions(b *testing.B, s *Store, owner string, n int) {
	b.Helper()
	tx, err := s.DB().Begin()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		t := start.Add(time.Duration(i) * time.Second).UnixMicro()
		if _, err := tx.Exec(`INSERT INTO sessions (id, title, owner, created_at, updated_at) VALUES (?, 't', ?, ?, ?)`, parley.NewID(), owner, t, t); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPageAll100k pages through 100,000 sessions of one owner, 100 per page.
func BenchmarkPageAll100k(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	seedSessions(b, s, "bench", 100_000)
	storetest.BenchPageAll(b, s, "bench", 100_000)
}

// BenchmarkListSessionsPage reads one page of 50 deep in an owner's 10,000 sessions.
func BenchmarkListSessionsPage(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	seedSessions(b, s, "bench", 10_000)
	ctx := context.Background()
	_, cursor, _ := s.ListSessions(ctx, "bench", parley.Page{Limit: 5000})
	for b.Loop() {
		page, _, err := s.ListSessions(ctx, "bench", parley.Page{Cursor: cursor, Limit: 50})
		if err != nil || len(page) != 50 {
			b.Fatal(len(page), err)
		}
	}
}

func onlySession(b *testing.B, s *Store) string {
	var id string
	if err := s.DB().QueryRow(`SELECT id FROM sessions`).Scan(&id); err != nil {
		b.Fatal(err)
	}
	return id
}

// The concurrent benchmarks: 1, 32 and 128 callers at once (group commit shares a transaction
// among those waiting together).

func BenchmarkAppendConcurrent1(b *testing.B)   { benchAppendConcurrent(b, 1) }
func BenchmarkAppendConcurrent32(b *testing.B)  { benchAppendConcurrent(b, 32) }
func BenchmarkAppendConcurrent128(b *testing.B) { benchAppendConcurrent(b, 128) }

func benchAppendConcurrent(b *testing.B, c int) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchAppendConcurrent(b, s, c)
}

func BenchmarkChats1(b *testing.B)   { benchChats(b, 1) }
func BenchmarkChats32(b *testing.B)  { benchChats(b, 32) }
func BenchmarkChats128(b *testing.B) { benchChats(b, 128) }

func benchChats(b *testing.B, c int) {
	s := openTemp(b)
	defer s.Close()
	storetest.BenchChats(b, s, c)
}

// BenchmarkChatReads is what a chat in a short session reads outside a transaction: the session
// (its owner and project), its running run, and the model view of its active branch. These run as
// statements prepared once per connection (Store.prepared), not parsed at each call.
func BenchmarkChatReads(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Title: "t", Owner: "u", CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(ctx, sess); err != nil {
		b.Fatal(err)
	}
	if err := s.AppendMessages(ctx, sess.ID,
		&parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("hello"), CreatedAt: now},
		&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("hi"), CreatedAt: now}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.GetSession(ctx, sess.ID); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ActiveRun(ctx, sess.ID); parley.CodeOf(err) != parley.ECNotFound {
			b.Fatal(err)
		}
		if h, err := s.ModelHistory(ctx, sess.ID); err != nil || len(h) != 2 {
			b.Fatal(len(h), err)
		}
	}
}

// The chats of runs.Manager on a parley.RunBeginner (BeginRun, FinishRun), 1, 32 and 128 at once,
// with the CPU time and the SQL statements each chat costs, and the commits (each one fsync of
// the WAL, made by the one writer while every other write waits) and writes per commit.
func BenchmarkRunChats1(b *testing.B)   { benchRunChats(b, 1) }
func BenchmarkRunChats32(b *testing.B)  { benchRunChats(b, 32) }
func BenchmarkRunChats128(b *testing.B) { benchRunChats(b, 128) }

func benchRunChats(b *testing.B, c int) {
	var commits, writes, commits0, writes0 atomic.Int64
	s, err := Open(context.Background(), filepath.Join(b.TempDir(), "parley.db"), OnCommit(func(n int, err error) {
		if err == nil {
			commits.Add(1)
			writes.Add(int64(n))
		}
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	storetest.BenchRunChats(b, s, c, storetest.ChatsProbe{
		Statements: s.ran.Load,
		Start: func() {
			commits0.Store(commits.Load())
			writes0.Store(writes.Load())
		},
		Report: func(chats int) {
			n := commits.Load() - commits0.Load()
			b.ReportMetric(float64(n)/float64(chats), "commits/chat")
			if n > 0 {
				b.ReportMetric(float64(writes.Load()-writes0.Load())/float64(n), "writes/commit")
			}
		},
	})
}

// BenchmarkRenewRuns1000 renews the leases of 1,000 running runs of this instance at once, as
// runs.Manager does every few seconds while it holds them (among 2,000 ended runs).
func BenchmarkRenewRuns1000(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	var ids []string
	for i := range 3000 {
		f, err := beginChat(ctx, s, now)
		if err != nil {
			b.Fatal(err)
		}
		if i%3 == 0 {
			ids = append(ids, f.RunID)
		} else if err := s.FinishRun(ctx, f); err != nil {
			b.Fatal(err)
		}
	}
	i := 0
	for b.Loop() {
		i++
		renewed, err := s.RenewRuns(ctx, "i", ids, now.Add(time.Duration(i)*time.Second))
		if err != nil || len(renewed) != len(ids) {
			b.Fatal(len(renewed), err)
		}
	}
}
