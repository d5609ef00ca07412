// Command fanout measures Parley's live broadcast to many clients of one session, and what an idle
// connection costs it. It builds `parley`, runs a fake OpenAI-compatible model in this process
// (one content chunk every -gap, each stamped with the time it was flushed), starts `parley serve`
// pointed at it as a real child process on loopback (bench/internal/benchproc), opens one session
// and connects -ws idle WebSockets (GET /api/ws?convId=…) and -sse idle SSE streams
// (GET /api/v1/sessions/{id}/stream) to it, from -sources loopback addresses (127.0.0.2, …: one
// address has only the ephemeral port range for its connections to the server's port). It raises
// the open files limit for itself and the server. It reports Parley's resident memory (-settle after
// connecting, and settled after a collection), live heap,
// goroutine stacks and goroutines per connection (with both kinds, the SSE streams first measured
// alone on a fresh server: -alone) and against issue 25's targets (PASS/FAIL), then starts -runs
// runs on the session
// (POST /api/v1/chat) and reports the latency from each model token to every subscriber and to the
// last one.
//
//	go run ./bench/fanout -ws 10000 -sse 1000
//	go run ./bench/fanout -ws 50000 -sse 0 -runs 0   # memory only: 50,000 idle WebSockets
//	go run ./bench/fanout -ws 200 -sse 50            # a quick check
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fanout:", err)
		os.Exit(1)
	}
}

type options struct {
	parley      string
	ws, sse     int
	tokens      int
	gap         time.Duration
	runs        int
	concurrency int
	settle      time.Duration
	runTimeout  time.Duration
	timeout     time.Duration
	serverArgs  string
	serverLog   string
	serverEnv   string
	sources     int
	project     int
	alone       bool
	profile     string
}

func run() error {
	var o options
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.IntVar(&o.ws, "ws", 10000, "idle WebSocket clients on the session")
	flag.IntVar(&o.sse, "sse", 1000, "idle SSE subscribers (GET /api/v1/sessions/{id}/stream) on the session")
	flag.IntVar(&o.tokens, "tokens", 50, "content chunks (tokens) the fake model streams per run")
	flag.DurationVar(&o.gap, "gap", 20*time.Millisecond, "time between the fake model's tokens")
	flag.IntVar(&o.runs, "runs", 3, "measured runs (after one warm-up run)")
	flag.IntVar(&o.concurrency, "concurrency", 64, "connections opened at once while connecting")
	flag.DurationVar(&o.settle, "settle", 3*time.Second, "idle time before each memory reading and between runs")
	flag.DurationVar(&o.runTimeout, "run-timeout", time.Minute, "time one run has to reach every subscriber; those it has not reached by then are reported as stalled")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "limit for the whole benchmark")
	flag.StringVar(&o.serverArgs, "server-args", "", "extra flags for parley serve, space-separated")
	flag.StringVar(&o.serverLog, "server-log", "", "file to copy parley serve's whole log (stderr) to")
	flag.StringVar(&o.serverEnv, "server-env", "", "extra environment of parley serve only, space-separated KEY=VALUE (e.g. GOGC=200)")
	flag.IntVar(&o.sources, "sources", 0, "loopback addresses the clients connect from (127.0.0.2, 127.0.0.3, …), each good for about 28,000 connections to the server's one port; 0: one per 10,000 connections")
	flag.IntVar(&o.project, "project", 0, "also report the server memory this many idle WebSockets would take, extrapolated from the measured memory per WebSocket (for a count the open files limit keeps from being measured); 0: none")
	flag.BoolVar(&o.alone, "alone", true, "with -ws and -sse both above 0: first measure the SSE streams alone, on a fresh server (measured after the WebSockets, an SSE stream reuses heap they left)")
	flag.StringVar(&o.profile, "profile", "", "directory to save parley serve's heap and goroutine profiles in, at each memory reading (<server>-<reading>.heap, .goroutine; and before its collection .smaps, .fds, .memstats); with -server-env GODEBUG=memprofilerate=512 the heap profile misses little")
	flag.Parse()
	if o.ws < 0 || o.sse < 0 || o.ws+o.sse == 0 || o.tokens < 1 || o.runs < 0 || o.concurrency < 1 || o.gap <= 0 || o.sources < 0 || o.sources > 250 {
		return errors.New("need -ws + -sse > 0, -tokens and -concurrency at least 1, -runs at least 0 (0: memory only), -gap positive, -sources from 0 to 250")
	}
	if o.sources == 0 {
		o.sources = (o.ws + o.sse + 9_999) / 10_000 // half of what one address has: a run just before may hold the rest in TIME_WAIT
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	ctx, stopSignals := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()

	// Every connection is a file descriptor on both sides. Raised here, the limit is inherited by
	// parley serve (Go's own raise at start is not passed on to children).
	subs := o.ws + o.sse
	fdLimit, err := benchproc.RaiseFDLimit(uint64(subs + 512))
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "fanout")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.parley == "" {
		if o.parley, err = benchproc.Build(ctx, dir); err != nil {
			return err
		}
	}

	t0 := time.Now()
	now := func() int64 { return int64(time.Since(t0)) }
	var current atomic.Pointer[runData]

	// The fake model, in this process so that its flush times and the subscribers' receive times
	// are read from one clock.
	up := &upstream{now: now, gap: o.gap, current: &current}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	upSrv := &http.Server{Handler: up, ReadHeaderTimeout: 10 * time.Second}
	go upSrv.Serve(upLn)
	defer upSrv.Close()

	runs := make([]*runData, o.runs+1)
	for i := range runs {
		runs[i] = newRunData(i, o.tokens, subs)
	}
	clientHCs := func(n int) (ws, sse []*http.Client) {
		for i := range n {
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(2+i))}, Timeout: 30 * time.Second}
			ws = append(ws, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableCompression: true, MaxIdleConnsPerHost: -1}})
			sse = append(sse, &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableCompression: true, MaxIdleConnsPerHost: -1,
				ResponseHeaderTimeout: 30 * time.Second}})
		}
		return ws, sse
	}

	// The SSE streams alone, on a server of their own, before the main one starts.
	var sseAlone *phase
	if o.alone && o.ws > 0 && o.sse > 0 {
		m, err := startMeasured(ctx, o, dir, "sse-alone", upLn.Addr().String(), &current, newRunData(0, o.tokens, subs))
		if err != nil {
			return err
		}
		alone := &subscribers{now: now, current: &current}
		_, sseHCs := clientHCs(o.sources)
		_, err = connectAll(ctx, o.sse, o.concurrency, func(_ context.Context, i int) error {
			return alone.dialSSE(ctx, sseHCs[i%len(sseHCs)], m.srv.URL, m.session, i)
		})
		if err == nil {
			sleep(ctx, o.settle)
			sseAlone = &phase{n: o.sse, base: m.base, baseHeap: m.baseHeap}
			sseAlone.after, sseAlone.afterHeap, err = m.read()
		}
		alone.closeAll()
		m.srv.Stop()
		if err != nil {
			return fmt.Errorf("SSE streams alone: %w", err)
		}
		fmt.Fprintf(os.Stderr, "SSE streams alone: +%s each\n", kib(sseAlone.rss()))
	}

	main, err := startMeasured(ctx, o, dir, "fanout", upLn.Addr().String(), &current, runs[0])
	if err != nil {
		return err
	}
	srv, api, session, pid, base := main.srv, main.api, main.session, main.srv.Pid(), main.base
	defer srv.Stop()
	clients := &subscribers{now: now, current: &current}
	defer clients.closeAll()
	clientBase := selfRSS()

	// One client per source address: a connection to one server port needs a port of its own on
	// its source address, and one address has only the ephemeral range (32768–60999 here).
	wsHCs, sseHCs := clientHCs(o.sources)
	wsHC := wsHCs[0]
	wsConnect, err := connectAll(ctx, o.ws, o.concurrency, func(ctx context.Context, i int) error {
		return clients.dialWS(ctx, wsHCs[i%len(wsHCs)], srv.URL, session, i, 30*time.Second)
	})
	if err != nil {
		return fmt.Errorf("connecting WebSockets: %w", err)
	}
	sleep(ctx, o.settle)
	afterWS, afterWSHeap, err := main.read()
	if err != nil {
		return err
	}
	streamCtx := ctx // an SSE stream lives as long as its request's context, not just connectAll's
	sseConnect, err := connectAll(ctx, o.sse, o.concurrency, func(_ context.Context, i int) error {
		return clients.dialSSE(streamCtx, sseHCs[(o.ws+i)%len(sseHCs)], srv.URL, session, o.ws+i)
	})
	if err != nil {
		return fmt.Errorf("connecting SSE streams: %w", err)
	}
	sleep(ctx, o.settle)
	afterSSE, afterSSEHeap, err := main.read()
	if err != nil {
		return err
	}
	clientConnected := selfRSS()
	if n := clients.droppedCount(); n > 0 {
		return fmt.Errorf("%d connections ended while idle: %s", n, clients.dropSummary())
	}

	var results []runResult
	for n := 1; n <= o.runs; n++ {
		res, err := measureRun(ctx, o, api, session, pid, clients, runs[n], wsHC)
		if err != nil {
			return fmt.Errorf("run %d: %w", n, err)
		}
		cpu0, _ := benchproc.CPU(pid)
		sleep(ctx, o.settle)
		cpu1, _ := benchproc.CPU(pid)
		res.serverCPUAfter = cpu1 - cpu0
		results = append(results, res)
		fmt.Fprintf(os.Stderr, "run %d: token→last p50 %s p99 %s, every delivery p50 %s p99 %s, %d/%d complete\n", n,
			ms(pct(res.last, 50)), ms(pct(res.last, 99)), ms(pct(res.all(), 50)), ms(pct(res.all(), 99)), res.complete, subs)
	}
	final, err := procStatus(pid)
	if err != nil {
		return err
	}

	rep := report{o: o, fdLimit: fdLimit, ws: wsConnect, sse: sseConnect, base: base, afterWS: afterWS, afterSSE: afterSSE,
		baseHeap: main.baseHeap, afterWSHeap: afterWSHeap, afterSSEHeap: afterSSEHeap, sseAlone: sseAlone,
		final: final, clientBase: clientBase, clientConnected: clientConnected, runs: results,
		dropped: clients.droppedCount(), dropErrs: clients.dropSummary(), serverDrops: srv.drops.Load(), upstreamCalls: up.requests.Load()}
	rep.print(os.Stdout)
	return nil
}

// measured is a parley serve whose memory is read: resident from /proc, and the live heap, the
// goroutines' stacks and their number from its profiling listener (after a collection).
type measured struct {
	srv      *proc
	api      *apiClient
	session  string
	pprof    string // the profiling listener's address
	name     string
	profile  string // where to save profiles (-profile), or ""
	readings int
	base     status
	baseHeap heapStats
}

// startMeasured starts parley serve on a database of its own (name), opens the session and makes
// one warm-up run with no one listening (so that the model path, the database and the history
// cache have done their first work), then reads its memory after -settle.
func startMeasured(ctx context.Context, o options, dir, name, upstream string, current *atomic.Pointer[runData], warm *runData) (*measured, error) {
	pprof, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// --auth off: every caller is the user "local", who holds all the streams; so no per-user
	// stream bound (0), no rate limit and no bound on connections from its one address, or the
	// 33rd stream, the 101st request and the 257th connection are refused.
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, name+".db"),
		"--auth", "off", "--rate-limit", "off", "--max-streams-per-user", "0", "--max-conns-per-addr", "0",
		"--openai-base-url", "http://" + upstream + "/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
		"--pprof-addr", pprof}
	args = append(args, strings.Fields(o.serverArgs)...)
	logFile := o.serverLog
	if logFile != "" && name != "fanout" {
		logFile += "." + name
	}
	srv, err := start(ctx, logFile, strings.Fields(o.serverEnv), o.parley, args...)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "parley serve (%s): pid %d, %s\n", name, srv.Pid(), srv.URL)
	m := &measured{srv: srv, api: &apiClient{base: srv.URL, hc: &http.Client{Timeout: o.runTimeout}}, pprof: pprof, name: name, profile: o.profile}
	if m.session, err = m.api.createSession(ctx); err == nil {
		current.Store(warm)
		if err = m.api.chat(ctx, m.session, "warm-up"); err != nil {
			err = fmt.Errorf("warm-up run: %w", err)
		}
	}
	if err == nil {
		sleep(ctx, o.settle)
		m.base, m.baseHeap, err = m.read()
	}
	if err != nil {
		srv.Stop()
		return nil, err
	}
	return m, nil
}

// read reads the server's resident memory, then its heap after a collection.
func (m *measured) read() (status, heapStats, error) {
	st, err := procStatus(m.srv.Pid())
	if err != nil {
		return st, heapStats{}, err
	}
	if m.profile != "" {
		if err := m.saveReading(m.readings + 1); err != nil {
			return st, heapStats{}, err
		}
	}
	h, err := readHeap(m.pprof)
	if err == nil {
		h.settled, err = settledStatus(m.srv.Pid())
	}
	if err == nil && m.profile != "" {
		m.readings++
		for _, p := range []struct{ path, ext string }{{"/debug/pprof/heap", "heap"}, {"/debug/pprof/heap?debug=1", "heap.txt"}, {"/debug/pprof/goroutine", "goroutine"}} {
			if err := saveURL("http://"+m.pprof+p.path, filepath.Join(m.profile, fmt.Sprintf("%s-%d.%s", m.name, m.readings, p.ext))); err != nil {
				return st, h, err
			}
		}
	}
	return st, h, err
}

// saveReading saves, with -profile, what the server holds at a reading before its collection:
// its memory maps (/proc/<pid>/smaps: Go's heap, the SQLite driver's own allocator, thread stacks
// and the binary's pages apart), what its file descriptors point at (the database's connections
// among them) and runtime.MemStats as the heap profile's text ends with them (HeapInuse, HeapIdle,
// HeapReleased, Stack, NextGC, NumGC): <server>-<reading>.smaps, .fds, .memstats.
func (m *measured) saveReading(n int) error {
	pid := m.srv.Pid()
	name := func(ext string) string { return filepath.Join(m.profile, fmt.Sprintf("%s-%d.%s", m.name, n, ext)) }
	smaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return err
	}
	if err := os.WriteFile(name("smaps"), smaps, 0o644); err != nil {
		return err
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return err
	}
	var fds strings.Builder
	for _, e := range ents {
		l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name())) // gone meanwhile: ""
		fds.WriteString(l + "\n")
	}
	if err := os.WriteFile(name("fds"), []byte(fds.String()), 0o644); err != nil {
		return err
	}
	return saveURL("http://"+m.pprof+"/debug/pprof/heap?debug=1", name("memstats"))
}

// saveURL saves what GET url answers in file.
func saveURL(url, file string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// heapStats is what the server's profiles say of its memory after a collection, and its resident
// memory once the runtime has returned to the system what that collection freed.
type heapStats struct {
	live, stacks int64 // bytes: the live heap (HeapAlloc) and the goroutines' stacks (StackInuse)
	goroutines   int
	settled      status // after the collection, once the scavenger has settled (settledStatus)
}

// settledStatus reads the process's memory once its resident size has stopped falling: after a
// collection, the runtime's scavenger returns the freed pages beyond about 10% of the heap in use
// to the system over the next seconds. This is what the server holds without what connecting
// left behind (garbage, freed stacks), which a reading just after connecting also counts: a lower
// bound. Left alone, an idle server stays somewhat above it (the runtime collects every two
// minutes, and keeps resident the heap that the garbage made meanwhile, such as heartbeats',
// reached at that collection). It waits until the resident size has fallen by less than 64 KiB
// in 4 s, at most 30 s.
func settledStatus(pid int) (status, error) {
	st, err := procStatus(pid)
	if err != nil {
		return st, err
	}
	mark, markAt, t0 := st.rss, time.Now(), time.Now()
	for time.Since(t0) < 30*time.Second {
		time.Sleep(500 * time.Millisecond)
		if st, err = procStatus(pid); err != nil {
			return st, err
		}
		if mark-st.rss >= 64<<10 {
			mark, markAt = st.rss, time.Now()
		} else if time.Since(markAt) >= 4*time.Second {
			break
		}
	}
	return st, nil
}

// readHeap reads the heap profile with gc=1 (a collection first; twice) and debug=1
// (runtime.MemStats at its end), and the goroutine profile's total.
func readHeap(addr string) (heapStats, error) {
	var h heapStats
	get := func(path string) (string, error) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
		}
		return string(b), err
	}
	// Two collections: what sync.Pools hold survives the first (their victim caches).
	if _, err := get("/debug/pprof/heap?gc=1"); err != nil {
		return h, err
	}
	heap, err := get("/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return h, err
	}
	for _, line := range strings.Split(heap, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[0] == "#" && f[2] == "=" {
			switch f[1] {
			case "HeapAlloc":
				h.live, _ = strconv.ParseInt(f[3], 10, 64)
			case "Stack":
				h.stacks, _ = strconv.ParseInt(f[3], 10, 64)
			}
		}
	}
	g, err := get("/debug/pprof/goroutine?debug=1")
	if err != nil {
		return h, err
	}
	first, _, _ := strings.Cut(g, "\n")
	if _, err := fmt.Sscanf(first, "goroutine profile: total %d", &h.goroutines); err != nil {
		return h, fmt.Errorf("goroutine profile: %q", first)
	}
	if h.live == 0 {
		return h, errors.New("no HeapAlloc in the heap profile")
	}
	return h, nil
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// connectAll calls dial for 0..n-1, conc at a time, and stops at the first error.
func connectAll(ctx context.Context, n, conc int, dial func(context.Context, int) error) (connectResult, error) {
	var res connectResult
	if n == 0 {
		return res, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idx := make(chan int)
	var mu sync.Mutex
	var firstErr error
	var failed int
	var wg sync.WaitGroup
	t0 := time.Now()
	for w := 0; w < min(conc, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range idx {
				if err := dial(ctx, i); err != nil {
					mu.Lock()
					failed++
					if firstErr == nil {
						firstErr = fmt.Errorf("connection %d: %w", i, err)
						cancel()
					}
					mu.Unlock()
				}
			}
		}()
	}
feed:
	for i := 0; i < n; i++ {
		select {
		case idx <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(idx)
	wg.Wait()
	res.n, res.elapsed = n, time.Since(t0)
	if firstErr != nil {
		return res, fmt.Errorf("%d failed; first: %w", failed, firstErr)
	}
	return res, ctx.Err()
}

type connectResult struct {
	n       int
	elapsed time.Duration
}

func (c connectResult) rate() float64 { return float64(c.n) / c.elapsed.Seconds() }

// runResult is one run's measurements.
type runResult struct {
	last, first    []time.Duration // per token: flush → last / first subscriber that read it
	ws, sse        []time.Duration // per delivery (subscriber, token)
	complete       int             // subscribers that read every token
	stalled        int             // subscribers that had not read the run's end by -run-timeout
	missing        int             // (subscriber, token) never read
	dups, stray    int64
	wall           time.Duration // first token flushed → last subscriber read the last token
	serverCPU      time.Duration // parley's CPU time during the run
	serverCPUAfter time.Duration // parley's CPU time in the settle time after the run
	clientCPU      time.Duration // this process's CPU time during the run
}

func (r runResult) all() []time.Duration { return append(slices.Clone(r.ws), r.sse...) }

// measureRun starts one run on the session and waits until every connected subscriber has read
// its done event, or -run-timeout.
func measureRun(ctx context.Context, o options, api *apiClient, session string, pid int, clients *subscribers, rd *runData, hc *http.Client) (runResult, error) {
	var res runResult
	cpu0, err := benchproc.CPU(pid)
	if err != nil {
		return res, err
	}
	self0 := selfCPU()
	clients.current.Store(rd)
	fmt.Fprintf(os.Stderr, "run %d: started\n", rd.n)
	chatErr := make(chan error, 1)
	go func() { chatErr <- api.chat(ctx, session, "fanout run "+strconv.Itoa(rd.n)) }()
	t0 := time.Now()
	deadline, progress := t0.Add(o.runTimeout), t0.Add(10*time.Second)
	// CPU times are read when the last subscriber that finishes does, so that a stalled one's
	// wait does not count.
	seen := int64(-1)
	cpu1, self1 := cpu0, self0
	for {
		if d := rd.done.Load(); d != seen {
			seen = d
			if c, err := benchproc.CPU(pid); err == nil {
				cpu1, self1 = c, selfCPU()
			}
		}
		if seen+int64(clients.droppedCount()) >= int64(rd.subs) {
			break
		}
		if time.Now().After(deadline) {
			// Reported, not fatal: a subscriber that never gets the end of a run is a finding.
			res.stalled = rd.subs - int(rd.done.Load()) - clients.droppedCount()
			stuck, after := clients.stuck(rd, 3)
			fmt.Fprintf(os.Stderr, "run %d: %d subscribers did not see its end within %s, among them:\n%s\n%s\n", rd.n, res.stalled,
				o.runTimeout, stuck, probe(ctx, hc, api.base, session, after))
			break
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if time.Now().After(progress) {
			fmt.Fprintf(os.Stderr, "run %d: %d of %d subscribers have seen its end after %.0f s\n", rd.n, rd.done.Load(), rd.subs, time.Since(t0).Seconds())
			progress = progress.Add(10 * time.Second)
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case err := <-chatErr:
		if err != nil {
			return res, err
		}
	case <-time.After(o.runTimeout):
		return res, errors.New("POST /api/v1/chat did not answer")
	}
	res.serverCPU, res.clientCPU = cpu1-cpu0, self1-self0
	res.dups, res.stray = rd.dups.Load(), rd.stray.Load()

	flush := make([]int64, rd.tokens)
	for i := range flush {
		flush[i] = atomic.LoadInt64(&rd.flush[i])
		if flush[i] == 0 {
			return res, fmt.Errorf("the model did not send token %d", i)
		}
	}
	lastRecv := make([]int64, rd.tokens)
	firstRecv := make([]int64, rd.tokens)
	for s := 0; s < rd.subs; s++ {
		got := 0
		for i := 0; i < rd.tokens; i++ {
			at := atomic.LoadInt64(&rd.recv[s*rd.tokens+i])
			if at == 0 {
				res.missing++
				continue
			}
			got++
			d := time.Duration(at - flush[i])
			if s < o.ws {
				res.ws = append(res.ws, d)
			} else {
				res.sse = append(res.sse, d)
			}
			lastRecv[i] = max(lastRecv[i], at)
			if firstRecv[i] == 0 || at < firstRecv[i] {
				firstRecv[i] = at
			}
		}
		if got == rd.tokens {
			res.complete++
		}
	}
	for i := 0; i < rd.tokens; i++ {
		if lastRecv[i] == 0 {
			continue
		}
		res.last = append(res.last, time.Duration(lastRecv[i]-flush[i]))
		res.first = append(res.first, time.Duration(firstRecv[i]-flush[i]))
	}
	if lastRecv[rd.tokens-1] != 0 {
		res.wall = time.Duration(lastRecv[rd.tokens-1] - flush[0])
	}
	return res, nil
}

// apiClient calls Parley's JSON API.
type apiClient struct {
	base string
	hc   *http.Client
}

func (a *apiClient) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: HTTP %d: %.300s", path, resp.StatusCode, data)
	}
	return json.Unmarshal(data, out)
}

func (a *apiClient) createSession(ctx context.Context) (string, error) {
	var s struct {
		ID string `json:"id"`
	}
	if err := a.post(ctx, "/api/v1/sessions", map[string]string{"title": "fanout"}, &s); err != nil {
		return "", err
	}
	return s.ID, nil
}

// chat runs one message on the session with POST /api/v1/chat, which answers when the run is done.
func (a *apiClient) chat(ctx context.Context, session, msg string) error {
	var out struct {
		FinishReason string `json:"finish_reason"`
	}
	if err := a.post(ctx, "/api/v1/chat", map[string]string{"message": msg, "session_id": session}, &out); err != nil {
		return err
	}
	if out.FinishReason != "stop" {
		return fmt.Errorf("run finished with %q", out.FinishReason)
	}
	return nil
}

// proc is parley serve as a child process.
type proc struct {
	*benchproc.Proc
	drops atomic.Int64 // "client dropped" lines it logged
}

// start runs parley with args and waits for its "listening" log line. Its whole log goes to
// logFile, if named; its warnings and errors are copied to stderr (the first 20), and the streams
// it says it dropped are counted.
func start(ctx context.Context, logFile string, env []string, bin string, args ...string) (*proc, error) {
	var logw io.Writer
	if logFile != "" {
		f, err := os.Create(logFile)
		if err != nil {
			return nil, err
		}
		logw = f // left open until this program exits: the process may log until then
	}
	p := &proc{}
	shown := 0
	bp, err := benchproc.StartWith(ctx, benchproc.Options{Env: env, Log: logw, OnLine: func(line string) {
		if strings.Contains(line, "client dropped") {
			p.drops.Add(1)
		}
		if (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) &&
			!strings.Contains(line, "authentication is off") && shown < 20 {
			shown++
			fmt.Fprintln(os.Stderr, "parley:", line)
		}
	}}, bin, args...)
	if err != nil {
		return nil, err
	}
	p.Proc = bp
	return p, nil
}

// status is what /proc/<pid>/status says of a process's memory.
type status struct {
	rss, hwm int64 // bytes: resident now, and its high-water mark
	anon     int64 // bytes: the anonymous part of rss (RssAnon: not the program's mapped code and files)
	threads  int
}

func procStatus(pid int) (status, error) {
	var s status
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			s.rss = v << 10
		case "VmHWM:":
			s.hwm = v << 10
		case "RssAnon:":
			s.anon = v << 10
		case "Threads:":
			s.threads = int(v)
		}
	}
	if s.rss == 0 {
		return s, errors.New("VmRSS not found in /proc/<pid>/status")
	}
	return s, nil
}

func selfRSS() int64 {
	s, _ := procStatus(os.Getpid())
	return s.rss
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) + " ms"
}

func mib(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) + " MiB" }

func kib(b float64) string { return strconv.FormatFloat(b/1024, 'f', 1, 64) + " KiB" }
