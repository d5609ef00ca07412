package main

import (
	"strings"
	"testing"
	"time"
)

// results makes a result of n streams over elapsed, every TTFT d.
func results(n int, elapsed, d time.Duration) *result {
	r := &result{streams: n, elapsed: elapsed}
	for range n {
		r.ttft = append(r.ttft, d)
	}
	return r
}

// TestReportVerdicts: the targets of issue 25 are computed against the proxy of the same run:
// throughput ratios, TTFT overhead at 1 stream, TTFT p99 ratio at 128 and PostgreSQL backends
// per 100 chats against the pool.
func TestReportVerdicts(t *testing.T) {
	o := options{levels: []int{1, 32, 128}, rounds: 1, chats: 100, maxLoop: time.Second}
	proxy := &path{name: "bare Go reverse proxy", proxy: true, byLevel: map[int]*result{
		1: results(100, time.Second, time.Millisecond), 32: results(1000, time.Second, 10*time.Millisecond), 128: results(1000, time.Second, 20*time.Millisecond)}}
	good := &path{name: "Parley, SQLite", parley: true, byLevel: map[int]*result{
		1: results(100, time.Second, 1500*time.Microsecond), 32: results(600, time.Second, 15*time.Millisecond), 128: results(500, time.Second, 40*time.Millisecond)}}
	slow := &path{name: "Parley, PostgreSQL", parley: true, pg: true, byLevel: map[int]*result{
		1: results(100, time.Second, 5*time.Millisecond), 32: results(399, time.Second, 15*time.Millisecond), 128: results(400, time.Second, 41*time.Millisecond)}}
	sqlite, pgProc := &proc{}, &proc{}
	pgProc.errors.Store(2)
	var out strings.Builder
	report(&out, o, 214, time.Second, []*path{proxy, good, slow}, sqlite, &pgBench{proc: pgProc},
		pgStats{opened: 5, chats: 100, peak: 4, pool: 4, fsync: "on", sync: "on"})
	want := map[string]string{
		"SQLite streams/s ≥ 0.5 × proxy at 32 in flight":                    "0.60× | PASS",
		"SQLite streams/s ≥ 0.5 × proxy at 128 in flight":                   "0.50× | PASS",
		"SQLite TTFT overhead at 1 stream, p50 ≤ 1 ms":                      "0.50 ms | PASS",
		"SQLite TTFT p99 at 128 in flight ≤ 2 × proxy":                      "2.00× | PASS",
		"SQLite: no line logged at level ERROR":                             "0 | PASS",
		"PostgreSQL streams/s ≥ 0.4 × proxy at 32 in flight":                "0.40× | FAIL",
		"PostgreSQL streams/s ≥ 0.4 × proxy at 128 in flight":               "0.40× | PASS",
		"PostgreSQL TTFT overhead at 1 stream, p99 ≤ 3 ms":                  "4.00 ms | FAIL",
		"PostgreSQL TTFT p99 at 128 in flight ≤ 2 × proxy":                  "2.05× | FAIL",
		"PostgreSQL: no line logged at level ERROR":                         "2 | FAIL",
		"PostgreSQL backends opened per 100 chats ≤ the pool size (4)":      "at most 4 at once | FAIL",
		"PostgreSQL commits durably (fsync on, synchronous_commit not off)": "synchronous_commit=on | PASS",
	}
	text := out.String()
	for target, end := range want {
		found := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "| "+target+" |") {
				found = true
				if !strings.HasSuffix(line, end+" |") {
					t.Errorf("%s: %q, want it to end with %q", target, line, end)
				}
			}
		}
		if !found {
			t.Errorf("no line for %q in:\n%s", target, text)
		}
	}
}

func TestPct(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i))
	}
	if pct(ds, 50) != 50 || pct(ds, 99) != 99 || pct(ds, 100) != 100 || pct(nil, 50) != 0 {
		t.Errorf("pct: %v %v %v", pct(ds, 50), pct(ds, 99), pct(ds, 100))
	}
}

// TestReportCosts: the CPU time and allocations a path's server spent over its loops are shown
// per chat, and a path whose server was not measured (the model itself) has no row.
func TestReportCosts(t *testing.T) {
	o := options{levels: []int{1, 32}, rounds: 1, chats: 100, maxLoop: time.Second}
	direct := &path{name: "client → model directly", byLevel: map[int]*result{
		1: results(100, time.Second, time.Millisecond), 32: results(100, time.Second, time.Millisecond)}}
	proxy := &path{name: "bare Go reverse proxy", proxy: true, byLevel: map[int]*result{
		1: results(100, time.Second, time.Millisecond), 32: results(100, time.Second, time.Millisecond)}}
	parley := &path{name: "Parley, SQLite", parley: true, byLevel: map[int]*result{
		1: results(100, time.Second, time.Millisecond), 32: results(100, time.Second, time.Millisecond)}}
	proxy.byLevel[1].cpu, proxy.byLevel[32].cpu = 30*time.Millisecond, 10*time.Millisecond
	parley.byLevel[1].cpu, parley.byLevel[32].cpu = 250*time.Millisecond, 120*time.Millisecond
	parley.byLevel[32].allocs = memStats{bytes: 5_000_000, objects: 80_000}
	var out strings.Builder
	costs(&out, o, []*path{direct, proxy, parley})
	text := out.String()
	for _, want := range []string{
		"| bare Go reverse proxy | 0.300 ms | 0.100 ms |",
		"| Parley, SQLite | 2.500 ms | 1.200 ms (50.0 KB, 800 allocs) |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no line %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, direct.name) {
		t.Errorf("a row for %q, whose server is not measured:\n%s", direct.name, text)
	}
}
