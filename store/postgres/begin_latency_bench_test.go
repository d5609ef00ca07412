package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/parleyhq/parley/store/storetest"
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
		begin, end := storetest.SessionChat(i)
		t0 := p.trips.Load()
		start := time.Now()
		first, err := s.BeginRun(ctx, begin)
		if err != nil {
			b.Fatal(err)
		}
		if lat != nil {
			*lat = append(*lat, time.Since(start))
			*trips += p.trips.Load() - t0
		}
		if err := s.FinishRun(ctx, end(first)); err != nil {
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
