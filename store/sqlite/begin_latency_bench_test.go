package sqlite

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/parleyhq/parley/store/storetest"
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
		begin, end := storetest.SessionChat(i)
		start := time.Now()
		first, err := s.BeginRun(ctx, begin)
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
		if err := s.FinishRun(ctx, end(first)); err != nil {
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
