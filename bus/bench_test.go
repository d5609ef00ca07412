package bus

import (
	"fmt"
	"testing"

	parley "github.com/parleyhq/parley"
)

// BenchmarkAppendFull measures one Append to a log that is already at its bound, so every append
// trims the oldest event. The cost must not depend on the bound.
func BenchmarkAppendFull(b *testing.B) {
	for _, size := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("max=%d", size), func(b *testing.B) {
			l := NewLog(size)
			ev := parley.Event{Type: parley.EventChunk, Content: "some text"}
			for range size {
				l.Append(ev)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				l.Append(ev)
			}
		})
	}
}
