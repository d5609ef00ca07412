// Command longstream holds many streamed chats through Parley at once while the model sends a
// chunk every few milliseconds, and checks what issue 25 asks of that load. It builds `parley`
// and starts, as real processes on loopback (bench/internal/benchproc), the fake model
// (`parley mockllm --chunks N --token-delay 5ms`) and `parley serve` on a real SQLite file
// (synchronous=FULL: every commit fsynced), with nothing that would refuse a chat (no rate limit,
// no run budget, no bound on streams or connections). Then two phases:
//
//   - short answers (-short-chunks): -streams chats start at once (POST /api/v1/chat/stream, a new
//     session each); every event each client reads is kept. Parley's log is searched for store
//     errors. Parley is then stopped and started again on the same file, so that nothing comes
//     from its memory, and every session is read back from the database
//     (GET /api/v1/sessions/{id}/stream?after=0&until=done): each event the client saw must come
//     back, the same.
//   - long answers (-long-chunks): -streams chats start at once on a fresh Parley; while they run,
//     Parley's resident memory (VmRSS) and Go heap in use (its /metrics on --metrics-addr) are
//     sampled with the number of streams in progress. Memory per active stream is the peak growth
//     over the idle server divided by the most streams in progress at once; the goroutines'
//     stacks are shown apart (they are resident memory outside the heap). With -heap-profile,
//     Parley's heap is profiled after a forced GC part-way, which also gives its live heap.
//
// Each phase ends with issue 25's targets and PASS or FAIL. The clients connect from loopback
// addresses of their own (127.0.2.1, …; -sources) and keep their connections alive, so that a
// benchmark run just before, holding ports in TIME_WAIT, does not starve them.
//
//	go run ./bench/longstream                                   # 1,000 streams: 50 chunks, then 2,000
//	go run ./bench/longstream -streams 200 -long-chunks 500     # a quick check
//	go run ./bench/longstream -streams 200 -short-chunks 0 -heap-profile /tmp/heap.pprof
//	go run ./bench/longstream -serve-env GOGC=50 -serve-args "--stream-ring-bytes 65536"  # an operator's settings
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "longstream:", err)
		os.Exit(1)
	}
}

type options struct {
	parley      string
	streams     int
	shortChunks int
	longChunks  int
	gap         time.Duration
	resumeConc  int
	streamTime  time.Duration
	timeout     time.Duration
	keepLogs    string
	heapProfile string
	profileAt   time.Duration
	serveArgs   []string
	serveEnv    []string
	sources     int
	samplesTo   string
}

func run() error {
	var o options
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.IntVar(&o.streams, "streams", 1000, "streams held at once")
	flag.IntVar(&o.shortChunks, "short-chunks", 50, "content chunks of an answer in the short phase (0: skip it)")
	flag.IntVar(&o.longChunks, "long-chunks", 2000, "content chunks of an answer in the long phase (0: skip it)")
	flag.DurationVar(&o.gap, "gap", 5*time.Millisecond, "time between the model's chunks")
	flag.IntVar(&o.resumeConc, "resume-concurrency", 32, "sessions read back from the database at once")
	flag.DurationVar(&o.streamTime, "stream-timeout", 3*time.Minute, "time bound of one chat; one that has not ended by then counts as failed")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "time bound of the whole benchmark")
	flag.IntVar(&o.sources, "sources", 0, "loopback addresses the clients connect from (127.0.2.1, 127.0.2.2, …), each good for about 28,000 connections; 0: one per 5,000 streams")
	flag.StringVar(&o.samplesTo, "samples", "", "file to write the long phase's memory readings to (CSV, one every 250 ms: seconds, streams in progress, resident, heap in use, stacks, heap free not given back, runtime metadata, file-backed resident, anonymous resident outside Go's accounting; in bytes)")
	flag.StringVar(&o.keepLogs, "logs", "", "directory to keep Parley's logs in (default: dropped with the temp dir)")
	flag.StringVar(&o.heapProfile, "heap-profile", "", "file to write a heap profile of Parley to, taken in the long phase once 90% of the streams are in progress and half an answer has been sent (Parley then runs with --pprof-addr), with its goroutines beside it (FILE.goroutines)")
	flag.DurationVar(&o.profileAt, "heap-profile-at", 0, "take the heap profile this long after 90% of the streams are in progress (default: half an answer)")
	serveArgs := flag.String("serve-args", "", "more flags for parley serve, space-separated (e.g. \"--stream-ring-bytes 32768\")")
	serveEnv := flag.String("serve-env", "", "environment for parley serve, space-separated KEY=VALUE (e.g. GOGC=50, to see what an operator's setting does; the benchmark itself sets none)")
	flag.Parse()
	o.serveArgs, o.serveEnv = strings.Fields(*serveArgs), strings.Fields(*serveEnv)
	if o.streams < 1 || o.shortChunks < 0 || o.longChunks < 0 || o.gap <= 0 || o.resumeConc < 1 || o.streamTime <= 0 || o.sources < 0 || o.sources > 250 {
		return errors.New("-streams and -resume-concurrency must be at least 1, -gap positive, the chunk counts not negative, -sources from 0 to 250")
	}
	if o.sources == 0 {
		o.sources = (o.streams + 4_999) / 5_000
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if _, err := benchproc.RaiseFDLimit(uint64(2*o.streams + 1024)); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "longstream")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logDir := dir
	if o.keepLogs != "" {
		logDir = o.keepLogs
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return err
		}
	}
	if o.parley == "" {
		if o.parley, err = benchproc.Build(ctx, dir); err != nil {
			return err
		}
	}
	b := &bench{o: o, dir: dir, logDir: logDir}
	// The clients connect from addresses of their own (127.0.2.x), each client keeping its
	// connections alive: a connection from a bound address needs a port not held on that address
	// by any socket, and the ports of 127.0.0.1 may all be held in TIME_WAIT by a benchmark run
	// just before (bench/fanout binds 127.0.0.2 upwards, which keeps those ports from every
	// unbound connection too).
	for i := range o.sources {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 2, byte(1+i))}, Timeout: 30 * time.Second}
		b.hcs = append(b.hcs, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: o.streams,
			IdleConnTimeout: time.Minute, ResponseHeaderTimeout: 2 * time.Minute}})
	}
	b.hc = b.hcs[0]
	fmt.Printf("%d streams at once, the model sending a chunk every %s; Parley on SQLite (synchronous=FULL); %d CPUs, load average %s.\n\n",
		o.streams, o.gap, runtime.NumCPU(), loadavg())
	if len(o.serveArgs)+len(o.serveEnv) > 0 {
		fmt.Printf("Parley run with %s (not its defaults).\n\n", strings.Join(append(append([]string{}, o.serveEnv...), o.serveArgs...), " "))
	}
	if o.shortChunks > 0 {
		if err := b.short(ctx); err != nil {
			return fmt.Errorf("short answers: %w", err)
		}
	}
	if o.longChunks > 0 {
		if err := b.long(ctx); err != nil {
			return fmt.Errorf("long answers: %w", err)
		}
	}
	return nil
}

type bench struct {
	o           options
	dir, logDir string
	hc          *http.Client   // hcs[0]: the reads of the database and of Parley's metrics
	hcs         []*http.Client // one per source address
}

// server is a running `parley serve` and what its log said.
type server struct {
	*benchproc.Proc
	errors      atomic.Int64 // lines at level ERROR
	storeErrors atomic.Int64 // lines that say the store failed
	mu          sync.Mutex
	first       []string // the first store error lines
	metrics     atomic.Pointer[string]
	pprof       atomic.Pointer[string]
}

// storeErrRE matches what Parley logs when a write or read of its store fails or falls behind.
var storeErrRE = regexp.MustCompile(`(?i)could not (reserve|store|record|give back|read)|out of order|database is locked|SQLITE_BUSY|deadline exceeded|store`)

var (
	metricsRE = regexp.MustCompile(`msg="metrics listening" addr=([0-9.]+:[0-9]+)`)
	pprofRE   = regexp.MustCompile(`msg="pprof listening" addr=([0-9.]+:[0-9]+)`)
)

func (b *bench) startMock(ctx context.Context, chunks int) (*benchproc.Proc, error) {
	return benchproc.StartWith(ctx, benchproc.Options{}, b.o.parley, "mockllm", "--addr", "127.0.0.1:0",
		"--chunks", strconv.Itoa(chunks), "--chunk-size", "4", "--token-delay", b.o.gap.String(), "--log-level", "info")
}

// startParley starts parley serve on db, its log written to logName in the log directory.
func (b *bench) startParley(ctx context.Context, mockURL, db, logName string, extra ...string) (*server, error) {
	f, err := os.Create(filepath.Join(b.logDir, logName))
	if err != nil {
		return nil, err
	}
	s := &server{}
	p, err := benchproc.StartWith(ctx, benchproc.Options{Log: f, Env: b.o.serveEnv, OnLine: func(line string) {
		if m := metricsRE.FindStringSubmatch(line); m != nil {
			s.metrics.Store(&m[1])
		}
		if m := pprofRE.FindStringSubmatch(line); m != nil {
			s.pprof.Store(&m[1])
		}
		isErr := strings.Contains(line, "level=ERROR")
		if isErr {
			s.errors.Add(1)
		}
		if (isErr || strings.Contains(line, "level=WARN")) && storeErrRE.MatchString(line) {
			s.storeErrors.Add(1)
			s.mu.Lock()
			if len(s.first) < 5 {
				s.first = append(s.first, line)
			}
			s.mu.Unlock()
		}
	}}, b.o.parley, append([]string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--data-dir", filepath.Join(b.dir, "data"),
		"--metrics-addr", "127.0.0.1:0",
		"--openai-base-url", mockURL + "/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
		"--auth", "off", "--rate-limit", "off", "--max-runs", "0", "--max-streams-per-user", "0", "--max-conns-per-addr", "0"}, append(b.o.serveArgs, extra...)...)...)
	if err != nil {
		f.Close()
		return nil, err
	}
	s.Proc = p
	return s, nil
}

// event is one SSE event as a client read it: its data is kept as a hash, so that a million
// events fit in the benchmark's memory.
type event struct {
	seq  int64
	typ  string
	data string // while read; dropped when kept
	sum  uint64 // FNV-1a of data
}

func (e event) kept() event {
	h := fnv.New64a()
	h.Write([]byte(e.data))
	return event{seq: e.seq, typ: e.typ, sum: h.Sum64()}
}

// streamResult is what one client read of its chat.
type streamResult struct {
	session string
	events  []event // kept only when asked
	chunks  int
	done    bool
	err     error
}

// chat makes one streamed chat and reads it to its end. onStart and onEnd are called when its
// first event comes and when it ends.
func (b *bench) chat(ctx context.Context, hc *http.Client, base string, keep bool, onStart, onEnd func()) streamResult {
	var res streamResult
	ctx, cancel := context.WithTimeout(ctx, b.o.streamTime)
	defer cancel()
	started := false
	defer func() {
		if started {
			onEnd()
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/chat/stream", strings.NewReader(`{"message":"Tell me a long story, please."}`))
	if err != nil {
		res.err = err
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		res.err = err
		return res
	}
	defer closeBody(resp.Body)
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		res.err = fmt.Errorf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(body))
		return res
	}
	err = readSSE(resp.Body, func(ev event) bool {
		if !started {
			started = true
			onStart()
		}
		if ev.typ == "start" && res.session == "" {
			var s struct {
				SessionID string `json:"session_id"`
			}
			_ = json.Unmarshal([]byte(ev.data), &s)
			res.session = s.SessionID
		}
		switch ev.typ {
		case "chunk":
			res.chunks++
		case "done":
			res.done = true
		case "error":
			res.err = fmt.Errorf("error event: %.300s", ev.data)
		}
		if keep {
			res.events = append(res.events, ev.kept())
		}
		return ev.typ != "done"
	})
	if err != nil && res.err == nil && !res.done {
		res.err = err
	}
	return res
}

// closeBody reads what is left of a body (the end of a chunked response after its done event)
// and closes it, so that its connection is used again rather than closed: a closed connection
// holds its port in TIME_WAIT for a minute.
func closeBody(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	body.Close()
}

// readSSE calls fn with each event of an SSE body until fn returns false or the body ends.
func readSSE(body io.Reader, fn func(event) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 16<<10), 8<<20)
	var ev event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.typ != "" || ev.data != "" {
				if !fn(ev) {
					return nil
				}
			}
			ev = event{}
		case strings.HasPrefix(line, "id: "):
			ev.seq, _ = strconv.ParseInt(line[4:], 10, 64)
		case strings.HasPrefix(line, "event: "):
			ev.typ = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// hold starts n chats at once and waits for them all; active counts the streams in progress
// (first event read, end not yet).
func (b *bench) hold(ctx context.Context, base string, keep bool, active *atomic.Int64, peak *atomic.Int64) ([]streamResult, time.Duration) {
	results := make([]streamResult, b.o.streams)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = b.chat(ctx, b.hcs[i%len(b.hcs)], base, keep, func() {
				n := active.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
			}, func() { active.Add(-1) })
		}()
	}
	wg.Wait()
	return results, time.Since(t0)
}

// summarize counts the chats that failed and those with fewer chunks than want.
func summarize(results []streamResult, want int) (failed, short int, firstErr error) {
	for _, r := range results {
		switch {
		case r.err != nil || !r.done:
			failed++
			if firstErr == nil {
				firstErr = r.err
				if firstErr == nil {
					firstErr = errors.New("no done event")
				}
			}
		case r.chunks != want:
			short++
		}
	}
	return failed, short, firstErr
}

func (b *bench) short(ctx context.Context) error {
	o := b.o
	mock, err := b.startMock(ctx, o.shortChunks)
	if err != nil {
		return err
	}
	defer mock.Stop()
	db := filepath.Join(b.dir, "short.db")
	srv, err := b.startParley(ctx, mock.URL, db, "short.log")
	if err != nil {
		return err
	}
	defer srv.Stop()
	var active, peak atomic.Int64
	results, took := b.hold(ctx, srv.URL, true, &active, &peak)
	srv.Stop()
	failed, short, firstErr := summarize(results, o.shortChunks)
	live := liveEvents(results)
	fmt.Printf("## Short answers: %d chunks %s apart\n\n", o.shortChunks, o.gap)
	fmt.Printf("%d chats started at once, all ended after %.1f s; at most %d streams in progress at once; %d failed, %d with a chunk missing; %d events read live.\n",
		o.streams, took.Seconds(), peak.Load(), failed, short, live)
	if firstErr != nil {
		fmt.Printf("first failure: %v\n", firstErr)
	}

	v, err := b.verify(ctx, mock.URL, db, "short-restarted.log", results)
	if err != nil {
		return err
	}
	v.print()
	srv.mu.Lock()
	for _, l := range srv.first {
		fmt.Println("store error:", l)
	}
	srv.mu.Unlock()
	fmt.Println()
	fmt.Println("| target | measured | verdict |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| short answers: every chat streamed to its end | %d of %d | %s |\n", o.streams-failed-short, o.streams, benchproc.Verdict(failed+short == 0))
	fmt.Printf("| short answers: no store error in the log | %d store error lines (%d lines at level ERROR) | %s |\n",
		srv.storeErrors.Load(), srv.errors.Load(), benchproc.Verdict(srv.storeErrors.Load() == 0))
	v.row("short answers", live, failed)
	fmt.Println()
	return nil
}

// liveEvents counts the events read live by the chats that ended well.
func liveEvents(results []streamResult) int {
	n := 0
	for _, r := range results {
		if r.err == nil && r.done {
			n += len(r.events)
		}
	}
	return n
}

// verification is what reading every session back from the database found.
type verification struct {
	sessions, checked, missing, differ, extra int64
	took                                      time.Duration
	firstDiff                                 string
}

func (v verification) print() {
	fmt.Printf("Parley stopped and started again on the same file; %d sessions read back from the database in %.1f s (GET /api/v1/sessions/{id}/stream?after=0&until=done): %d events compared, %d missing, %d different, %d not seen live.\n",
		v.sessions, v.took.Seconds(), v.checked, v.missing, v.differ, v.extra)
	if v.firstDiff != "" {
		fmt.Println("first difference:", v.firstDiff)
	}
}

func (v verification) row(phase string, live, failed int) {
	fmt.Printf("| "+phase+": a resume from the database returns every event (of the chats that ended) | %d of %d events (%d different) | %s |\n",
		v.checked-v.missing-v.differ, live, v.differ, benchproc.Verdict(v.missing+v.differ == 0 && int(v.checked) == live && failed == 0))
}

// verify starts Parley again on db (so that nothing comes from its memory) and reads every
// session of results back from the database, comparing each event with the one read live.
func (b *bench) verify(ctx context.Context, mockURL, db, logName string, results []streamResult) (verification, error) {
	var v verification
	srv2, err := b.startParley(ctx, mockURL, db, logName)
	if err != nil {
		return v, err
	}
	defer srv2.Stop()
	var checked, missing, differ, extra, sessions atomic.Int64
	var mu sync.Mutex
	sem := make(chan struct{}, b.o.resumeConc)
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, r := range results {
		if r.session == "" || r.err != nil || !r.done {
			continue // a chat that failed is counted as failed; its events are not compared
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			sessions.Add(1)
			note := func(s string) {
				mu.Lock()
				if v.firstDiff == "" {
					v.firstDiff = s
				}
				mu.Unlock()
			}
			got, err := b.resume(ctx, srv2.URL, r.session)
			if err != nil {
				missing.Add(int64(len(r.events)))
				checked.Add(int64(len(r.events)))
				note(fmt.Sprintf("session %s: %v", r.session, err))
				return
			}
			bySeq := make(map[int64]event, len(got))
			for _, ev := range got {
				bySeq[ev.seq] = ev
			}
			for _, ev := range r.events {
				checked.Add(1)
				g, ok := bySeq[ev.seq]
				switch {
				case !ok:
					missing.Add(1)
					note(fmt.Sprintf("session %s: seq %d (%s) was read live, not from the database", r.session, ev.seq, ev.typ))
				case g.typ != ev.typ || g.sum != ev.sum:
					differ.Add(1)
					note(fmt.Sprintf("session %s: seq %d is %s live and %s from the database, or its data differs", r.session, ev.seq, ev.typ, g.typ))
				}
				delete(bySeq, ev.seq)
			}
			extra.Add(int64(len(bySeq)))
		}()
	}
	wg.Wait()
	v.took = time.Since(t0)
	v.sessions, v.checked, v.missing, v.differ, v.extra = sessions.Load(), checked.Load(), missing.Load(), differ.Load(), extra.Load()
	return v, nil
}

// resume reads a session's events from seq 1 to its run's done.
func (b *bench) resume(ctx context.Context, base, session string) ([]event, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/sessions/"+session+"/stream?after=0&until=done", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer closeBody(resp.Body)
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return nil, fmt.Errorf("HTTP %d %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	var out []event
	done := false
	err = readSSE(resp.Body, func(ev event) bool {
		out = append(out, ev.kept())
		done = ev.typ == "done"
		return !done
	})
	if !done {
		return out, fmt.Errorf("no done event after %d events: %v", len(out), err)
	}
	return out, nil
}

// sample is one reading of Parley's memory while streams run.
type sample struct {
	at     time.Duration
	active int64
	rss    int64
	heap   int64 // go_memstats_heap_inuse_bytes: live objects and garbage not yet collected
	stack  int64 // go_memstats_stack_inuse_bytes: goroutines' stacks, outside the heap
	// free is heap the collector freed and the runtime has not given back to the system
	// (go_memstats_heap_idle_bytes − go_memstats_heap_released_bytes): resident, in no span.
	free int64
	// runtime is the runtime's own memory: span structures, the collector's metadata, the
	// per-P caches, the profiling buckets and the rest (mspan, mcache, gc, buck_hash, other sys).
	runtime int64
	// goSys is all the runtime holds from the system less what it released (sys − released).
	goSys int64
	// file is the resident memory backed by files (RssFile + RssShmem): the binary's pages
	// as they are touched, and the SQLite WAL index's shared mapping.
	file int64
}

// anonOutside is the anonymous resident memory the Go runtime does not account for: chiefly
// the SQLite library's own allocations (modernc.org/libc allocates its C heap outside the Go
// heap). It is an estimate: the runtime counts memory it mapped but never touched (a large
// allocation not yet written to), so it can come out negative.
func (s sample) anonOutside() int64 { return s.rss - s.file - s.goSys }

// readMem reads Parley's resident memory and, from its /metrics page, its Go heap and stacks.
func (b *bench) readMem(pid int, metricsURL string) sample {
	m := goMem(b.hc, metricsURL)
	return sample{
		rss: mustRSS(pid), heap: m["go_memstats_heap_inuse_bytes"], stack: m["go_memstats_stack_inuse_bytes"],
		free: m["go_memstats_heap_idle_bytes"] - m["go_memstats_heap_released_bytes"],
		runtime: m["go_memstats_mspan_sys_bytes"] + m["go_memstats_mcache_sys_bytes"] + m["go_memstats_gc_sys_bytes"] +
			m["go_memstats_buck_hash_sys_bytes"] + m["go_memstats_other_sys_bytes"],
		goSys: m["go_memstats_sys_bytes"] - m["go_memstats_heap_released_bytes"],
		file:  fileRSS(pid),
	}
}

func (b *bench) long(ctx context.Context) error {
	o := b.o
	mock, err := b.startMock(ctx, o.longChunks)
	if err != nil {
		return err
	}
	defer mock.Stop()
	db := filepath.Join(b.dir, "long.db")
	var extra []string
	if o.heapProfile != "" {
		extra = []string{"--pprof-addr", "127.0.0.1:0"}
	}
	srv, err := b.startParley(ctx, mock.URL, db, "long.log", extra...)
	if err != nil {
		return err
	}
	defer srv.Stop()
	maddr := srv.metrics.Load()
	if maddr == nil {
		return errors.New("Parley did not log its metrics address")
	}
	metricsURL := "http://" + *maddr + "/metrics"
	// A warm-up chat, then the idle server's memory.
	if r := b.chat(ctx, b.hc, srv.URL, false, func() {}, func() {}); r.err != nil {
		return fmt.Errorf("warm-up chat: %w", r.err)
	}
	time.Sleep(2 * time.Second)
	base := b.readMem(srv.Pid(), metricsURL)
	baseWrites := storeWrites(goMem(b.hc, metricsURL))
	cpu0, _ := benchproc.CPU(srv.Pid())

	var active, peak atomic.Int64
	var samples []sample
	stop := make(chan struct{})
	sampled := make(chan struct{})
	t0 := time.Now()
	var (
		busySince  time.Time
		profiled   bool
		profileErr error
		liveHeap   *sample // the heap just after the forced GC of -heap-profile
		wg         sync.WaitGroup
	)
	go func() {
		defer close(sampled)
		defer wg.Wait()
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			s := b.readMem(srv.Pid(), metricsURL)
			s.at, s.active = time.Since(t0), active.Load()
			samples = append(samples, s)
			if o.heapProfile != "" && busySince.IsZero() && s.active*10 >= int64(o.streams)*9 {
				busySince = time.Now()
			}
			at := o.profileAt
			if at <= 0 {
				at = time.Duration(o.longChunks) * o.gap / 2
			}
			if !busySince.IsZero() && !profiled && time.Since(busySince) >= at {
				profiled = true
				wg.Add(1)
				go func() {
					defer wg.Done()
					var l sample
					l, profileErr = b.heapProfile(srv, metricsURL)
					l.active = active.Load()
					liveHeap = &l
				}()
			}
		}
	}()
	results, took := b.hold(ctx, srv.URL, true, &active, &peak)
	close(stop)
	<-sampled
	if profileErr != nil {
		return fmt.Errorf("-heap-profile: %w", profileErr)
	}
	if o.heapProfile != "" && !profiled {
		fmt.Fprintln(os.Stderr, "longstream: no heap profile: 90% of the streams were never in progress for half an answer")
	}
	hwm, _ := benchproc.RSS(srv.Pid(), "VmHWM:")
	cpu1, _ := benchproc.CPU(srv.Pid())
	end := goMem(b.hc, metricsURL)
	detached := end[`parley_slow_subscribers_total{event="detached"}`]
	writes := storeWrites(end) - baseWrites
	after := b.readMem(srv.Pid(), metricsURL)
	srv.Stop()
	failed, short, firstErr := summarize(results, o.longChunks)
	if o.samplesTo != "" {
		var csv strings.Builder
		csv.WriteString("seconds,active,rss,heap_inuse,stack_inuse,heap_free,runtime,rss_file,anon_outside\n")
		for _, s := range samples {
			fmt.Fprintf(&csv, "%.2f,%d,%d,%d,%d,%d,%d,%d,%d\n", s.at.Seconds(), s.active, s.rss, s.heap, s.stack, s.free, s.runtime, s.file, s.anonOutside())
		}
		if err := os.WriteFile(o.samplesTo, []byte(csv.String()), 0o644); err != nil {
			return fmt.Errorf("-samples: %w", err)
		}
	}

	var top sample    // the reading with the most streams in progress (the latest of equals)
	var atPeak sample // the reading with the most resident memory
	var peakRSS, peakHeap, peakStack int64
	for _, s := range samples {
		if s.active >= top.active {
			top = s
		}
		if s.rss > atPeak.rss {
			atPeak = s
		}
		peakRSS = max(peakRSS, s.rss)
		peakHeap = max(peakHeap, s.heap)
		peakStack = max(peakStack, s.stack)
	}
	most := max(peak.Load(), 1)
	perRSS := float64(max(hwm, peakRSS)-base.rss) / float64(most)
	perHeap := float64(peakHeap-base.heap) / float64(most)
	perStack := float64(peakStack-base.stack) / float64(most)
	fmt.Printf("## Long answers: %d chunks %s apart (%.0f s each)\n\n", o.longChunks, o.gap, (time.Duration(o.longChunks) * o.gap).Seconds())
	fmt.Printf("%d chats started at once, all ended after %.1f s; at most %d streams in progress at once; %d failed, %d with a chunk missing; Parley used %.1f CPU-seconds (%.1f ms per chat: a measure the machine's load does not change much).\n",
		o.streams, took.Seconds(), peak.Load(), failed, short, (cpu1 - cpu0).Seconds(), float64((cpu1-cpu0).Milliseconds())/float64(o.streams))
	fmt.Printf("Readers that fell behind the ring and read the database: %d times. Store writes of run events: %d (%.1f per chat).\n", detached, writes, float64(writes)/float64(o.streams))
	if firstErr != nil {
		fmt.Printf("first failure: %v\n", firstErr)
	}
	fmt.Println()
	fmt.Println("| Parley's memory | resident (VmRSS) | Go heap in use | goroutine stacks |")
	fmt.Println("|---|---|---|---|")
	fmt.Printf("| idle, after a warm-up chat | %s | %s | %s |\n", mib(base.rss), mib(base.heap), mib(base.stack))
	fmt.Printf("| with the most streams in progress (%d, at %.1f s) | %s | %s | %s |\n", top.active, top.at.Seconds(), mib(top.rss), mib(top.heap), mib(top.stack))
	fmt.Printf("| peak while streaming (VmHWM for resident) | %s | %s | %s |\n", mib(max(hwm, peakRSS)), mib(peakHeap), mib(peakStack))
	fmt.Printf("| after every stream ended | %s | %s | %s |\n", mib(after.rss), mib(after.heap), mib(after.stack))
	fmt.Printf("| **peak growth per active stream** (÷ %d) | **%s** | **%s** | **%s** |\n", most, kib(perRSS), kib(perHeap), kib(perStack))
	if live := liveHeap; live != nil {
		fmt.Printf("| live heap after a forced GC (-heap-profile, %d streams in progress) | | %s (%s per stream over the idle heap in use) | |\n",
			live.active, mib(live.heap), kib(float64(live.heap-base.heap)/float64(max(live.active, 1))))
	}
	fmt.Println()
	fmt.Printf("What the resident memory held at its highest reading (at %.1f s, %d streams in progress), over the idle server, per stream at most in progress:\n\n", atPeak.at.Seconds(), atPeak.active)
	fmt.Println("| resident | heap in use | heap free, not given back | goroutine stacks | runtime metadata | file-backed (binary, WAL index) | anonymous, outside Go's accounting (SQLite's C heap) |")
	fmt.Println("|---|---|---|---|---|---|---|")
	per := func(f func(sample) int64) string { return kib(float64(f(atPeak)-f(base)) / float64(most)) }
	fmt.Printf("| %s | %s | %s | %s | %s | %s | %s |\n", per(func(s sample) int64 { return s.rss }), per(func(s sample) int64 { return s.heap }),
		per(func(s sample) int64 { return s.free }), per(func(s sample) int64 { return s.stack }),
		per(func(s sample) int64 { return s.runtime }), per(func(s sample) int64 { return s.file }), per(sample.anonOutside))
	fmt.Println()
	live := liveEvents(results)
	v, err := b.verify(ctx, mock.URL, db, "long-restarted.log", results)
	if err != nil {
		return err
	}
	v.print()
	srv.mu.Lock()
	for _, l := range srv.first {
		fmt.Println("store error:", l)
	}
	srv.mu.Unlock()
	fmt.Println()
	fmt.Println("| target | measured | verdict |")
	fmt.Println("|---|---|---|")
	fmt.Printf("| long answers: every chat streamed to its end | %d of %d | %s |\n", o.streams-failed-short, o.streams, benchproc.Verdict(failed+short == 0))
	fmt.Printf("| long answers: ≤ 100 KiB of server memory per active stream (resident) | %s | %s |\n", kib(perRSS), benchproc.Verdict(perRSS <= 100<<10 && failed == 0))
	fmt.Printf("| long answers: no store error in the log | %d store error lines (%d lines at level ERROR) | %s |\n",
		srv.storeErrors.Load(), srv.errors.Load(), benchproc.Verdict(srv.storeErrors.Load() == 0))
	v.row("long answers", live, failed)
	fmt.Println()
	return nil
}

// heapProfile writes Parley's heap profile (after a GC) to -heap-profile.
// It returns the heap then: go_memstats_heap_alloc_bytes read just after that GC, which is the
// live heap (and what was allocated in the moment since).
func (b *bench) heapProfile(srv *server, metricsURL string) (sample, error) {
	var live sample
	addr := srv.pprof.Load()
	if addr == nil {
		return live, errors.New("Parley did not log its pprof address")
	}
	resp, err := b.hc.Get("http://" + *addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return live, err
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err != nil {
		return live, err
	}
	m := goMem(b.hc, metricsURL)
	live.heap, live.stack = m["go_memstats_heap_alloc_bytes"], m["go_memstats_stack_inuse_bytes"]
	if err := os.WriteFile(b.o.heapProfile, data, 0o644); err != nil {
		return live, err
	}
	fmt.Fprintf(os.Stderr, "longstream: heap profile written to %s\n", b.o.heapProfile)
	// The goroutines beside it: their stacks are resident memory outside the heap.
	resp, err = b.hc.Get("http://" + *addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return live, err
	}
	defer resp.Body.Close()
	if data, err = io.ReadAll(resp.Body); err != nil {
		return live, err
	}
	return live, os.WriteFile(b.o.heapProfile+".goroutines", data, 0o644)
}

// fileRSS is the file-backed part of pid's resident memory (RssFile + RssShmem).
func fileRSS(pid int) int64 {
	f, _ := benchproc.RSS(pid, "RssFile:")
	sh, _ := benchproc.RSS(pid, "RssShmem:")
	return f + sh
}

func mustRSS(pid int) int64 {
	v, _ := benchproc.RSS(pid, "VmRSS:")
	return v
}

// goMem reads the go_memstats_ gauges (and parley_slow_subscribers_total) of a /metrics page (none when it cannot). It reads the
// page to its end, so that the connection is used again.
// storeWrites sums parley_store_append_duration_seconds_count over its outcomes: the store
// writes of run events (the store writers' batches and the runs' ends).
func storeWrites(m map[string]int64) int64 {
	var n int64
	for k, v := range m {
		if strings.HasPrefix(k, "parley_store_append_duration_seconds_count") {
			n += v
		}
	}
	return n
}

func goMem(hc *http.Client, url string) map[string]int64 {
	m := map[string]int64{}
	resp, err := hc.Get(url)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if name, v, ok := strings.Cut(sc.Text(), " "); ok && (strings.HasPrefix(name, "go_memstats_") || strings.HasPrefix(name, "parley_slow_subscribers_total") || strings.HasPrefix(name, "parley_store_append_duration_seconds_count")) {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			m[name] = int64(f)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return m
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

func kib(b float64) string { return strconv.FormatFloat(b/1024, 'f', 1, 64) + " KiB" }
