package postgres

import (
	"testing"

	"github.com/parleyhq/parley/store/storetest"
)

// BenchmarkServerTurns is BenchmarkServerChats for the next turns of conversations: c sessions,
// one a worker, each turn a run begun in its session with the user's message (BeginRun) and ended
// with the answer and 7 events (FinishRun).
func BenchmarkServerTurns1(b *testing.B)   { benchServerTurns(b, 1) }
func BenchmarkServerTurns32(b *testing.B)  { benchServerTurns(b, 32) }
func BenchmarkServerTurns128(b *testing.B) { benchServerTurns(b, 128) }

func benchServerTurns(b *testing.B, c int) {
	var p probe
	s := openTest(b, p.options)
	defer s.Close()
	storetest.BenchRunTurns(b, s, c, storetest.ChatsProbe{
		Start:  p.start,
		Report: func(n int) { p.report(b, n, "turn") },
	})
}
