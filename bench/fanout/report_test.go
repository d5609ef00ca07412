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
		"| memory per idle WebSocket ≤ 16 KiB | 15.0 KiB | PASS |",
		"| memory per idle SSE stream ≤ 8 KiB | 9.0 KiB | FAIL |",
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
