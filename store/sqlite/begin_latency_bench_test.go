package sqlite

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// BenchmarkChatBeginLatency runs chats one at a time as a 1-stream client makes them: a new
// session's run begun (the write a chat's first token waits for), then ended with its answer and
// five events. It reports the begin's latency, p50, p99 and max, and how many begins in a
// thousand took 10 ms or more: the commits that also checkpointed the WAL, or restarted it (a
// second fsync). On a shared machine compare runs interleaved; the tail counts move less than
// the times.
func BenchmarkChatBeginLatency(b *testing.B) {
	s := openTemp(b)
	defer s.Close()
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Title: "a chat", Owner: "o", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Tell me something, please."), RunID: run.ID, CreatedAt: now}
		start := time.Now()
		first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 64, Run: run, Messages: []*parley.Message{user}})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(fmt.Sprintf("answer %d", i)), RunID: run.ID, CreatedAt: now}
		evs := make([]parley.EncodedEvent, 5)
		for j := range evs {
			ev := &parley.Event{Seq: first + int64(j), Type: parley.EventChunk, RunID: run.ID, SessionID: sess.ID, Content: "some text of the answer"}
			evs[j] = parley.EncodedEvent{Seq: ev.Seq, Event: ev}
		}
		if err := s.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: evs,
			Limit: first + 63, Last: first + 4, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	slow := 0
	for _, d := range lat {
		if d >= 10*time.Millisecond {
			slow++
		}
	}
	pct := func(p float64) float64 { return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(pct(0.5), "begin-p50-µs")
	b.ReportMetric(pct(0.99), "begin-p99-µs")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds()), "begin-max-µs")
	b.ReportMetric(float64(slow)*1000/float64(len(lat)), "begins≥10ms/1000")
}
