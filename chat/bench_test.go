package chat

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/agent"
	"github.com/parleyhq/parley/runs"
	"github.com/parleyhq/parley/store/historycache"
	"github.com/parleyhq/parley/store/sqlite"
)

// BenchmarkNewSessionChat runs chats of new sessions one after another through the service, the
// real agent loop and the run manager on a SQLite file (fsynced), with a model that answers at
// once. Besides time and allocations it reports the process's CPU time per chat (cpu-µs/op), which
// a machine loaded by other work changes far less than the wall clock.
func BenchmarkNewSessionChat(b *testing.B) {
	st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "b.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	mgr := runs.NewManager(runs.Options{Events: st, Runs: st, Instance: "i1"})
	defer mgr.Shutdown(context.Background())
	model := &echo{}
	ag := agent.New(agent.Config{Store: st, History: historycache.New(st, 64<<20),
		Resolve: func(string) (parley.Provider, string, error) { return model, "m", nil }})
	s := &Service{Store: st, Runs: mgr, Agent: ag, DefaultModel: "m"}
	ctx := context.Background()
	chat := func() {
		started, err := s.Send(ctx, "alice", Request{Message: "Tell me something about streaming servers, please."})
		if err != nil {
			b.Fatal(err)
		}
		select {
		case <-started.Run.Done():
		case <-time.After(time.Minute):
			b.Fatal("the run did not end")
		}
		model.mu.Lock()
		model.sent = model.sent[:0]
		model.mu.Unlock()
	}
	for range 20 { // warm: statements prepared, pools filled
		chat()
	}
	b.ReportAllocs()
	before := cpuTime()
	for b.Loop() {
		chat()
	}
	b.ReportMetric(float64((cpuTime()-before).Microseconds())/float64(b.N), "cpu-µs/op")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
