package main

import (
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

// report is everything the benchmark prints.
type report struct {
	o                       options
	fdLimit                 uint64
	ws, sse                 connectResult
	base, afterWS, afterSSE status
	final                   status
	baseHeap, afterWSHeap   heapStats
	afterSSEHeap            heapStats
	sseAlone                *phase // the SSE streams measured alone on a fresh server (-alone)
	clientBase              int64
	clientConnected         int64
	runs                    []runResult
	dropped                 int
	dropErrs                string
	serverDrops             int64
	upstreamCalls           int64
}

// phase is the memory of a server before and after some idle connections were opened.
type phase struct {
	n                   int
	base, after         status
	baseHeap, afterHeap heapStats
}

// rss is resident memory per connection -settle after connecting, against the server before
// connecting (settled, where it was read so); settledRSS and settledAnon are per connection once
// both readings had settled after a collection (settledStatus).
func (p phase) rss() float64 { return float64(p.after.rss-baseRSS(p.base, p.baseHeap)) / float64(p.n) }
func (p phase) settledRSS() float64 {
	return float64(p.afterHeap.settled.rss-p.baseHeap.settled.rss) / float64(p.n)
}
func (p phase) settledAnon() float64 {
	return float64(p.afterHeap.settled.anon-p.baseHeap.settled.anon) / float64(p.n)
}

// anon is the anonymous part of rss: without the program's code and mapped files, whose pages a
// phase's first use of some code touches (the same binary's pages, laid out differently in a
// build that differs a little, move that part between builds).
func (p phase) anon() float64 {
	return float64(p.after.anon-p.baseHeap.settled.anon) / float64(p.n)
}
func (p phase) settled() bool { return p.baseHeap.settled.rss > 0 && p.afterHeap.settled.rss > 0 }

// baseRSS is what a phase's resident memory is counted from: the server's before it, once that
// had settled after a collection; without that reading (tests), its reading before the collection.
func baseRSS(st status, h heapStats) int64 {
	if h.settled.rss > 0 {
		return h.settled.rss
	}
	return st.rss
}

func (p phase) live() float64  { return float64(p.afterHeap.live-p.baseHeap.live) / float64(p.n) }
func (p phase) stack() float64 { return float64(p.afterHeap.stacks-p.baseHeap.stacks) / float64(p.n) }
func (p phase) goroutines() float64 {
	return float64(p.afterHeap.goroutines-p.baseHeap.goroutines) / float64(p.n)
}

// row is one kind of connection's line of the memory table.
func (p phase) row(w io.Writer, name string) {
	settled, anon, anonAfter := "-", "-", "-"
	if p.settled() {
		settled, anon = kib(p.settledRSS()), kib(p.settledAnon())
		if p.after.anon > 0 {
			anonAfter = kib(p.anon())
		}
	}
	fmt.Fprintf(w, "| %d idle %s | %s | %s | %s | %s | %s | %.2f | %s |\n", p.n, name, kib(p.rss()), settled, anon, kib(p.live()), kib(p.stack()), p.goroutines(), anonAfter)
}

func (r report) print(w io.Writer) {
	o := r.o
	subs := o.ws + o.sse
	fmt.Fprintf(w, "%d WebSockets + %d SSE streams on one session, from %d loopback addresses; %d tokens %s apart per run; %d runs after a warm-up; %d CPUs; open files limit %d\n\n",
		o.ws, o.sse, o.sources, o.tokens, o.gap, o.runs, runtime.NumCPU(), r.fdLimit)
	if o.ws > 0 {
		fmt.Fprintf(w, "connected %d WebSockets in %.1f s (%.0f/s)\n", o.ws, r.ws.elapsed.Seconds(), r.ws.rate())
	}
	if o.sse > 0 {
		fmt.Fprintf(w, "connected %d SSE streams in %.1f s (%.0f/s)\n", o.sse, r.sse.elapsed.Seconds(), r.sse.rate())
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "| parley serve's memory (VmRSS) | |")
	fmt.Fprintln(w, "|---|---|")
	fmt.Fprintf(w, "| after a warm-up run, no client | %s |\n", mib(r.base.rss))
	base, afterWS := baseRSS(r.base, r.baseHeap), baseRSS(r.afterWS, r.afterWSHeap)
	if r.baseHeap.settled.rss > 0 {
		fmt.Fprintf(w, "| the same, settled after a collection | %s |\n", mib(base))
	}
	if o.ws > 0 {
		fmt.Fprintf(w, "| with %d idle WebSockets | %s (+%s each) |\n", o.ws, mib(r.afterWS.rss), kib(float64(r.afterWS.rss-base)/float64(o.ws)))
	}
	if o.sse > 0 {
		fmt.Fprintf(w, "| and %d idle SSE streams | %s (+%s each) |\n", o.sse, mib(r.afterSSE.rss), kib(float64(r.afterSSE.rss-afterWS)/float64(o.sse)))
	}
	fmt.Fprintf(w, "| **per connection**, all together | **%s** |\n", kib(float64(r.afterSSE.rss-base)/float64(subs)))
	if r.baseHeap.settled.rss > 0 && r.afterSSEHeap.settled.rss > 0 {
		fmt.Fprintf(w, "| all connected, settled after a collection | %s (+%s per connection) |\n", mib(r.afterSSEHeap.settled.rss),
			kib(float64(r.afterSSEHeap.settled.rss-base)/float64(subs)))
	}
	fmt.Fprintf(w, "| after the runs / peak (VmHWM) | %s (+%s per connection) / %s |\n", mib(r.final.rss),
		kib(float64(r.final.rss-base)/float64(subs)), mib(r.final.hwm))
	fmt.Fprintf(w, "| OS threads: no client / connected / after the runs | %d / %d / %d |\n", r.base.threads, r.afterSSE.threads, r.final.threads)
	fmt.Fprintf(w, "| the clients (this process, not counted above) | +%s |\n", mib(r.clientConnected-r.clientBase))
	fmt.Fprintln(w)

	// Each kind of connection by itself: the WebSockets against the server with no client; the
	// SSE streams measured alone on a fresh server (-alone), or else after the WebSockets.
	ws := phase{n: o.ws, base: r.base, after: r.afterWS, baseHeap: r.baseHeap, afterHeap: r.afterWSHeap}
	sse, sseName := phase{n: o.sse, base: r.afterWS, after: r.afterSSE, baseHeap: r.afterWSHeap, afterHeap: r.afterSSEHeap}, "SSE streams"
	switch {
	case r.sseAlone != nil:
		sse, sseName = *r.sseAlone, "SSE streams, alone on a fresh server"
	case o.ws > 0:
		sseName = "SSE streams, after the WebSockets"
	}
	fmt.Fprintf(w, "| per connection | resident (VmRSS), %s after connecting | resident, settled after a GC | of it anonymous (RssAnon), settled | live heap (after a GC) | goroutine stacks | goroutines | of it anonymous (RssAnon), %s after connecting |\n", o.settle, o.settle)
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	if o.ws > 0 {
		ws.row(w, "WebSockets")
	}
	if o.sse > 0 {
		sse.row(w, sseName)
	}
	fmt.Fprintln(w)

	fmt.Fprintln(w, "Issue 25's targets:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | verdict |")
	fmt.Fprintln(w, "|---|---|---|")
	if o.ws > 0 {
		fmt.Fprintf(w, "| memory per idle WebSocket ≤ 16 KiB, %s after connecting | %s | %s |\n", o.settle, kib(ws.rss()), benchproc.Verdict(ws.rss() <= 16<<10))
		if ws.settled() {
			fmt.Fprintf(w, "| memory per idle WebSocket ≤ 16 KiB, settled after a collection | %s | %s |\n", kib(ws.settledRSS()), benchproc.Verdict(ws.settledRSS() <= 16<<10))
		}
	}
	if o.sse > 0 {
		fmt.Fprintf(w, "| memory per idle SSE stream ≤ 8 KiB (%s), %s after connecting | %s | %s |\n", sseName, o.settle, kib(sse.rss()), benchproc.Verdict(sse.rss() <= 8<<10))
		if sse.settled() {
			fmt.Fprintf(w, "| memory per idle SSE stream ≤ 8 KiB (%s), settled after a collection | %s | %s |\n", sseName, kib(sse.settledRSS()), benchproc.Verdict(sse.settledRSS() <= 8<<10))
		}
	}
	fmt.Fprintf(w, "| server memory holding %d WebSockets + %d SSE streams < 1 GiB (the target is for 50,000 WebSockets) | %s | %s |\n",
		o.ws, o.sse, mib(r.afterSSE.rss), benchproc.Verdict(r.afterSSE.rss < 1<<30))
	if o.project > 0 && o.ws > 0 {
		per := float64(r.afterWS.rss-base) / float64(o.ws)
		est := float64(base) + per*float64(o.project)
		fmt.Fprintf(w, "| server memory holding %d idle WebSockets < 1 GiB: **extrapolated**, not measured (%s idle + %d × %s) | %s | %s (extrapolated) |\n",
			o.project, mib(r.base.rss), o.project, kib(per), mib(int64(est)), benchproc.Verdict(est < 1<<30))
	}
	fmt.Fprintln(w)
	if len(r.runs) == 0 {
		fmt.Fprintf(w, "connections dropped: %d (parley logged %d drops)\n", r.dropped, r.serverDrops)
		return
	}

	head := "| broadcast |"
	sep := "|---|"
	for i := range r.runs {
		head += fmt.Sprintf(" run %d |", i+1)
		sep += "---|"
	}
	head += " all runs |"
	sep += "---|"
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	var all runResult
	for _, x := range r.runs {
		all.last = append(all.last, x.last...)
		all.first = append(all.first, x.first...)
		all.ws = append(all.ws, x.ws...)
		all.sse = append(all.sse, x.sse...)
		all.missing += x.missing
		all.stalled += x.stalled
		all.dups += x.dups
		all.stray += x.stray
		all.wall = max(all.wall, x.wall)
		all.serverCPU += x.serverCPU
		all.serverCPUAfter += x.serverCPUAfter
		all.clientCPU += x.clientCPU
	}
	if len(r.runs) > 0 {
		all.complete = r.runs[0].complete
		for _, x := range r.runs {
			all.complete = min(all.complete, x.complete)
		}
	}
	row := func(name string, f func(runResult) string) {
		line := "| " + name + " |"
		for _, x := range r.runs {
			line += " " + f(x) + " |"
		}
		fmt.Fprintln(w, line+" "+f(all)+" |")
	}
	row("token → last subscriber, p50", func(x runResult) string { return ms(pct(x.last, 50)) })
	row("token → last subscriber, p99", func(x runResult) string { return ms(pct(x.last, 99)) })
	row("token → first subscriber, p50", func(x runResult) string { return ms(pct(x.first, 50)) })
	row("every delivery, p50", func(x runResult) string { return ms(pct(x.all(), 50)) })
	row("every delivery, p99", func(x runResult) string { return ms(pct(x.all(), 99)) })
	if o.ws > 0 {
		row("WebSocket deliveries, p50 / p99", func(x runResult) string { return ms(pct(x.ws, 50)) + " / " + ms(pct(x.ws, 99)) })
	}
	if o.sse > 0 {
		row("SSE deliveries, p50 / p99", func(x runResult) string { return ms(pct(x.sse, 50)) + " / " + ms(pct(x.sse, 99)) })
	}
	row("first token sent → last token read by all", func(x runResult) string { return ms(x.wall) })
	row("subscribers that read every token", func(x runResult) string { return fmt.Sprintf("%d / %d", x.complete, subs) })
	row(fmt.Sprintf("stalled: no end of the run within %s", o.runTimeout), func(x runResult) string { return fmt.Sprint(x.stalled) })
	row("parley CPU during the run", func(x runResult) string { return secs(x.serverCPU) })
	row(fmt.Sprintf("parley CPU in the %s after it", o.settle), func(x runResult) string { return secs(x.serverCPUAfter) })
	row("benchmark CPU during the run", func(x runResult) string { return secs(x.clientCPU) })
	fmt.Fprintln(w)
	fmt.Fprintf(w, "connections dropped: %d (parley logged %d drops); tokens never read: %d; read twice: %d; stray chunks: %d; model calls: %d\n",
		r.dropped, r.serverDrops, all.missing, all.dups, all.stray, r.upstreamCalls)
	if r.dropErrs != "" {
		fmt.Fprintln(w, "first drops: "+r.dropErrs)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
