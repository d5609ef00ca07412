package main

import (
	"strings"
	"testing"
)

// TestReportMemoryVerdicts: memory per idle WebSocket and SSE stream against issue 25's bounds,
// the total under 1 GiB, and an extrapolation that says it is one.
func TestReportMemoryVerdicts(t *testing.T) {
	r := report{
		o:        options{ws: 1000, sse: 100, project: 50000},
		base:     status{rss: 40 << 20},
		afterWS:  status{rss: 40<<20 + 1000*15<<10},             // 15 KiB per WebSocket
		afterSSE: status{rss: 40<<20 + 1000*15<<10 + 100*9<<10}, // 9 KiB per SSE stream
	}
	var out strings.Builder
	r.print(&out)
	text := out.String()
	for _, want := range []string{
		"| memory per idle WebSocket ≤ 16 KiB, 0s after connecting | 15.0 KiB | PASS |",
		"| memory per idle SSE stream ≤ 8 KiB (SSE streams, after the WebSockets), 0s after connecting | 9.0 KiB | FAIL |",
		"| 772.4 MiB | PASS (extrapolated) |", // 40 MiB + 50,000 × 15 KiB
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
	if !strings.Contains(text, "**extrapolated**, not measured") {
		t.Error("the extrapolation is not said to be one")
	}
}

// TestReportSSEAlone: with the SSE streams measured alone on a fresh server, their verdict is
// that figure, and the live heap, stacks and goroutines per connection are reported.
func TestReportSSEAlone(t *testing.T) {
	r := report{
		o:           options{ws: 1000, sse: 100},
		base:        status{rss: 40 << 20},
		afterWS:     status{rss: 40<<20 + 1000*15<<10},
		afterSSE:    status{rss: 40<<20 + 1000*15<<10 + 100*1<<10}, // after the WebSockets: 1 KiB
		baseHeap:    heapStats{live: 10 << 20, stacks: 1 << 20, goroutines: 20},
		afterWSHeap: heapStats{live: 10<<20 + 1000*5<<10, stacks: 1<<20 + 1000*4<<10, goroutines: 1020},
		sseAlone: &phase{n: 100, base: status{rss: 30 << 20}, after: status{rss: 30<<20 + 100*7<<10},
			baseHeap: heapStats{live: 8 << 20}, afterHeap: heapStats{live: 8<<20 + 100*3<<10, goroutines: 0}},
	}
	var out strings.Builder
	r.print(&out)
	text := out.String()
	for _, want := range []string{
		"| 1000 idle WebSockets | 15.0 KiB | - | - | 5.0 KiB | 4.0 KiB | 1.00 |",
		"| 100 idle SSE streams, alone on a fresh server | 7.0 KiB | - | - | 3.0 KiB | 0.0 KiB | 0.00 |",
		"| memory per idle SSE stream ≤ 8 KiB (SSE streams, alone on a fresh server), 0s after connecting | 7.0 KiB | PASS |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
}

// TestReportSettled: with readings settled after a collection, each kind's figure 3 s after
// connecting is counted from the settled reading before it, and the settled figures (resident and
// anonymous) get their own columns and verdicts, beside the others, not instead of them; so does
// the anonymous part of the first, where it was read.
func TestReportSettled(t *testing.T) {
	settled := func(rss, anon int64) heapStats { return heapStats{live: 1, settled: status{rss: rss, anon: anon}} }
	r := report{
		o:       options{ws: 1000, sse: 100},
		base:    status{rss: 42 << 20}, // before the collection: 2 MiB more than settled
		afterWS: status{rss: 40<<20 + 1000*17<<10, anon: 10<<20 + 1000*15<<10},
		// settled after the WebSockets: 13 KiB each, 12 KiB of them anonymous
		baseHeap:    settled(40<<20, 10<<20),
		afterWSHeap: settled(40<<20+1000*13<<10, 10<<20+1000*12<<10),
		sseAlone: &phase{n: 100, base: status{rss: 33 << 20}, after: status{rss: 30<<20 + 100*10<<10},
			baseHeap: settled(30<<20, 8<<20), afterHeap: settled(30<<20+100*7<<10, 8<<20+100*6<<10)},
	}
	var out strings.Builder
	r.print(&out)
	text := out.String()
	for _, want := range []string{
		"| 1000 idle WebSockets | 17.0 KiB | 13.0 KiB | 12.0 KiB |",
		"| 100 idle SSE streams, alone on a fresh server | 10.0 KiB | 7.0 KiB | 6.0 KiB |",
		"| 0.00 | 15.0 KiB |\n", // the WebSockets' anonymous part 0s after connecting
		"| 0.00 | - |\n",        // the SSE streams': not read
		"| memory per idle WebSocket ≤ 16 KiB, 0s after connecting | 17.0 KiB | FAIL |",
		"| memory per idle WebSocket ≤ 16 KiB, settled after a collection | 13.0 KiB | PASS |",
		"| memory per idle SSE stream ≤ 8 KiB (SSE streams, alone on a fresh server), 0s after connecting | 10.0 KiB | FAIL |",
		"| memory per idle SSE stream ≤ 8 KiB (SSE streams, alone on a fresh server), settled after a collection | 7.0 KiB | PASS |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the report lacks %q:\n%s", want, text)
		}
	}
}
