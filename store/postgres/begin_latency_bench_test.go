package postgres

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
// five events. It reports the begin's latency (p50, p99), the begin's round trips and the
// backends' CPU a chat. On a shared machine compare runs interleaved: the round trips do not
// move with the load, the times do.
//
//	PARLEY_TEST_REQUIRE_POSTGRES=1 go test -run '^$' -bench ChatBeginLatency -benchtime 2000x ./store/postgres
func BenchmarkChatBeginLatency(b *testing.B) {
	var p probe
	s := openTest(b, p.options)
	defer s.Close()
	ctx := context.Background()
	chat := func(i int, lat *[]time.Duration, trips *int64) {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Title: "a chat", Owner: "o", CreatedAt: now, UpdatedAt: now}
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Tell me something, please."), RunID: run.ID, CreatedAt: now}
		t0 := p.trips.Load()
		start := time.Now()
		first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 64, Run: run, Messages: []*parley.Message{user}})
		if err != nil {
			b.Fatal(err)
		}
		if lat != nil {
			*lat = append(*lat, time.Since(start))
			*trips += p.trips.Load() - t0
		}
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
	for i := range 20 { // the pool's connections prepare the statements
		chat(i, nil, nil)
	}
	lat := make([]time.Duration, 0, b.N)
	var trips int64
	p.start()
	b.ResetTimer()
	for i := range b.N {
		chat(i, &lat, &trips)
	}
	b.StopTimer()
	p.report(b, b.N, "chat")
	slices.Sort(lat)
	pct := func(q float64) float64 { return float64(lat[min(len(lat)-1, int(q*float64(len(lat))))].Microseconds()) }
	b.ReportMetric(pct(0.5), "begin-p50-µs")
	b.ReportMetric(pct(0.99), "begin-p99-µs")
	b.ReportMetric(float64(trips)/float64(b.N), "begin-trips")
}
