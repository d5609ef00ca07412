// Command gateway measures Parley side by side with what a streamed chat costs without it (issue
// 25, item 5). It builds `parley` and starts, as real processes on loopback (bench/internal/benchproc):
//
//   - the fake model, `parley mockllm` (OpenAI-compatible; every answer is 3 content chunks sent at
//     once, then usage and [DONE]);
//   - a bare Go reverse proxy to it (httputil.ReverseProxy, flushing every write; this program run
//     as a child), the practical limit of any HTTP gateway written in Go;
//   - Parley on SQLite (a real file, synchronous=FULL: every commit fsynced) and Parley on
//     PostgreSQL (a database of its own, dropped at the end; the server's fsync and
//     synchronous_commit are read and reported), both pointed at the fake model, with the rate
//     limit off and no run budget, so that neither refuses a chat.
//
// It then runs the same closed-loop streamed chats through each path in one run (a client starts
// its next chat when its last one ended; Parley: POST /api/v1/chat/stream with a new session each
// time), interleaved: for each round, for each concurrency level, every path in turn. Each loop
// is bounded in chats (-chats) and in time (-max-loop). Time to first token (TTFT) is measured
// from sending the request to the first content chunk: Parley's first `chunk` event, the model's
// first content delta. It reports TTFT p50/p99 at each level and streams per second, the
// PostgreSQL connections Parley opened per 100 chats (pg_stat_database.sessions of its database)
// and the lines each Parley logged at level ERROR; then issue 25's targets, each with PASS or FAIL.
// With -profile DIR it also profiles Parley on SQLite at 32 in flight (its --pprof-addr).
//
//	go run ./bench/gateway                                  # 1, 32 and 128 in flight, 3 rounds
//	go run ./bench/gateway -levels 1,8 -chats 100 -rounds 1 # a quick check
//	go run ./bench/gateway -chats 300 -rounds 1 -profile /tmp/prof
//	go run ./bench/gateway -levels 32 -chats 10000 -rounds 4 -pg-diag   # what PostgreSQL spends, loop by loop
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parleyhq/parley/bench/internal/benchproc"
)

// proxyEnv, set in this program's environment, makes it the reverse proxy to the URL it holds.
const proxyEnv = "PARLEY_BENCH_PROXY_TARGET"

func main() {
	if target := os.Getenv(proxyEnv); target != "" {
		if err := serveProxy(target); err != nil {
			fmt.Fprintln(os.Stderr, "gateway proxy:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// serveProxy is the bare reverse proxy: loopback, a free port announced on stderr as Parley does.
func serveProxy(target string) error {
	u, err := url.Parse(target)
	if err != nil {
		return err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	// The request body is read whole before it is sent on, as a gateway that looks at the request
	// (the model, the messages) does.
	direct := rp.Director
	rp.Director = func(r *http.Request) {
		direct(r)
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body.Close()
		if err != nil {
			body = nil
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.ContentLength = int64(len(body))
	}
	rp.FlushInterval = -1 // flush after every write, as a streaming gateway must
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0, IdleConnTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "msg=listening addr=%s\n", ln.Addr())
	return http.Serve(ln, rp)
}

type options struct {
	parley   string
	postgres string
	pgPool   int
	levels   []int
	rounds   int
	chats    int
	maxLoop  time.Duration
	message  string
	timeout  time.Duration
	profile  string
	profSecs int
	profPG   bool
	pgDiag   bool
}

func run() error {
	var o options
	var levels string
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.StringVar(&o.postgres, "postgres", "postgres://127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (a database is created on it for Parley and dropped at the end); empty: no PostgreSQL path")
	flag.IntVar(&o.pgPool, "pg-pool", 0, "Parley's PostgreSQL pool size (pool_max_conns in its URL); 0: pgx's default, max(4, cores)")
	flag.StringVar(&levels, "levels", "1,32,128", "streams in flight, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every level through every path once")
	flag.IntVar(&o.chats, "chats", 1000, "chats per loop (one level, one path, one round)")
	flag.DurationVar(&o.maxLoop, "max-loop", 20*time.Second, "time bound of one loop: no new chat starts after it")
	flag.StringVar(&o.message, "message", "Tell me something about streaming servers, please.", "user message (the mock answers without tools)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "time bound of the whole benchmark")
	flag.StringVar(&o.profile, "profile", "", "after the rounds, profile Parley on SQLite at 32 in flight and write cpu.pprof, mutex.pprof, block.pprof and allocs.pprof into this directory (it runs with --pprof-addr)")
	flag.IntVar(&o.profSecs, "profile-seconds", 15, "length of the -profile loop")
	flag.BoolVar(&o.profPG, "profile-postgres", false, "with -profile: profile Parley on PostgreSQL instead of SQLite")
	flag.BoolVar(&o.pgDiag, "pg-diag", false, "after each loop on PostgreSQL, print what it cost the server a chat: WAL records, full page images and bytes, buffers the backends wrote, blocks read, checkpoints, the database's size, the sessions' and runs' updates (how many HOT) and dead rows, and the CPU of each kind of server process (a diagnostic: the WAL and buffer figures are server-wide)")
	flag.Parse()
	for _, f := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return fmt.Errorf("-levels: %q is not a number of streams from 1 to 4096", f)
		}
		o.levels = append(o.levels, n)
	}
	if o.rounds < 1 || o.chats < 1 || o.maxLoop <= 0 || o.pgPool < 0 || o.profSecs < 1 {
		return errors.New("-rounds, -chats and -profile-seconds must be at least 1, -max-loop positive, -pg-pool not negative")
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "gatewaybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.parley == "" {
		if o.parley, err = benchproc.Build(ctx, dir); err != nil {
			return err
		}
	}

	// The fake model: its answer to o.message is cut into 3 chunks of equal size.
	size, err := answerSize(ctx, o)
	if err != nil {
		return err
	}
	mock, err := start(ctx, nil, o.parley, "mockllm", "--addr", "127.0.0.1:0", "--token-delay", "0s",
		"--chunk-size", strconv.Itoa((size+2)/3), "--log-level", "info")
	if err != nil {
		return err
	}
	defer mock.Stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	proxy, err := start(ctx, []string{proxyEnv + "=" + mock.URL}, self)
	if err != nil {
		return err
	}
	defer proxy.Stop()

	// Parley as it ships: SQLite opens with synchronous=FULL (each commit fsynced), PostgreSQL
	// commits as the server says (checked below). Only what would refuse chats is turned off.
	parleyArgs := func(db ...string) []string {
		return append([]string{"serve", "--addr", "127.0.0.1:0",
			"--openai-base-url", mock.URL + "/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
			"--rate-limit", "off", "--max-runs", "0", "--max-conns-per-addr", "0"}, db...)
	}
	sqliteArgs := parleyArgs("--db", filepath.Join(dir, "bench.db"))
	if o.profile != "" && !o.profPG {
		sqliteArgs = append(sqliteArgs, "--pprof-addr", "127.0.0.1:0")
	}
	sqlite, err := start(ctx, nil, o.parley, sqliteArgs...)
	if err != nil {
		return err
	}
	defer sqlite.Stop()

	paths := []*path{
		{name: "client → model directly", url: mock.URL + "/v1/chat/completions", parley: false},
		{name: "bare Go reverse proxy", url: proxy.URL + "/v1/chat/completions", parley: false, proxy: true, proc: proxy},
		{name: "Parley, SQLite", url: sqlite.URL + "/api/v1/chat/stream", parley: true, proc: sqlite},
	}
	var pg *pgBench
	if o.postgres != "" {
		pg, err = newPGBench(ctx, o.postgres, o.pgPool)
		if err != nil {
			return err
		}
		defer pg.drop()
		pgArgs := parleyArgs("--database-url", pg.parleyURL)
		if o.profile != "" && o.profPG {
			pgArgs = append(pgArgs, "--pprof-addr", "127.0.0.1:0")
		}
		srv, err := start(ctx, nil, o.parley, pgArgs...)
		if err != nil {
			return err
		}
		pg.proc = srv
		defer srv.Stop()
		paths = append(paths, &path{name: "Parley, PostgreSQL", url: srv.URL + "/api/v1/chat/stream", parley: true, pg: true, proc: srv})
		if err := pg.watch(ctx); err != nil {
			return err
		}
	}
	maxLevel := slices.Max(o.levels)
	for _, p := range paths {
		p.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: maxLevel * 2, IdleConnTimeout: time.Minute}}
		p.byLevel = map[int]*result{}
		if p.parley {
			p.body, _ = json.Marshal(map[string]any{"message": o.message})
		} else {
			p.body, _ = json.Marshal(map[string]any{
				"model": "bench-model", "stream": true, "stream_options": map[string]bool{"include_usage": true},
				"messages": []map[string]string{{"role": "user", "content": o.message}},
			})
		}
		// Warm-up: a connection for every client of the highest level, caches, the database's
		// first pages.
		if _, err := loop(ctx, p, maxLevel, 2*maxLevel, o.maxLoop); err != nil {
			return fmt.Errorf("%s: warm-up: %w", p.name, err)
		}
	}

	t0 := time.Now()
	for round := 1; round <= o.rounds; round++ {
		for _, level := range o.levels {
			for _, p := range paths {
				b0 := p.backendCPU(ctx, pg)
				var d0 pgSnap
				if o.pgDiag && p.pg {
					d0, _ = pg.diagSnap(ctx)
				}
				res, err := measured(ctx, p, level, o.chats, o.maxLoop)
				if err != nil {
					return fmt.Errorf("%s, %d in flight: %w", p.name, level, err)
				}
				fmt.Fprintf(os.Stderr, "round %d, %3d in flight, %-24s %6d streams %8.1f streams/s  TTFT p50 %s p99 %s%s\n",
					round, level, p.name, res.streams, res.rate(), ms(pct(res.ttft, 50)), ms(pct(res.ttft, 99)),
					res.costs()+backendPerChat(b0, p.backendCPU(ctx, pg), res.streams))
				if o.pgDiag && p.pg {
					d1, err := pg.diagSnap(ctx)
					if err != nil {
						fmt.Fprintln(os.Stderr, "  pg-diag:", err)
					}
					fmt.Fprintln(os.Stderr, diagLine(d0, d1, res.streams))
				}
				p.add(level, res)
			}
		}
	}
	elapsed := time.Since(t0)

	var profiled string
	if o.profile != "" {
		prof, p := sqlite, paths[2]
		if o.profPG && pg != nil {
			prof, p = pg.proc, paths[3]
		}
		if profiled, err = profileSQLite(ctx, o, prof, p); err != nil {
			return err
		}
	}

	var st pgStats
	if pg != nil {
		pg.proc.Stop()
		if st, err = pg.stats(ctx, paths[3].total); err != nil {
			return err
		}
	}
	sqlite.Stop()
	report(os.Stdout, o, size, elapsed, paths, sqlite, pg, st)
	if profiled != "" {
		fmt.Println("\n" + profiled)
	}
	return nil
}

// path is one way to the model, and what was measured through it.
type path struct {
	name    string
	url     string
	body    []byte
	parley  bool
	pg      bool
	proxy   bool
	proc    *proc // the server on this path, whose CPU is measured; nil: none (the model itself)
	client  *http.Client
	byLevel map[int]*result
	total   int // chats made, warm-up included
}

// backendCPU is the CPU time the PostgreSQL backends connected to the database of p's Parley have
// used so far (0 off PostgreSQL): per chat, a measure the machine's load changes little.
func (p *path) backendCPU(ctx context.Context, pg *pgBench) time.Duration {
	if !p.pg || pg == nil {
		return 0
	}
	return pg.backendCPU(ctx)
}

// backendPerChat formats the backends' CPU used from b0 to b1 per chat, for the progress lines.
func backendPerChat(b0, b1 time.Duration, chats int) string {
	if b1 <= b0 || chats == 0 {
		return ""
	}
	return fmt.Sprintf(", PostgreSQL backends %.3f ms/chat", float64(b1-b0)/float64(time.Millisecond)/float64(chats))
}

func (p *path) add(level int, r *result) {
	agg := p.byLevel[level]
	if agg == nil {
		agg = &result{}
		p.byLevel[level] = agg
	}
	agg.ttft = append(agg.ttft, r.ttft...)
	agg.streams += r.streams
	agg.elapsed += r.elapsed
	agg.cpu += r.cpu
	agg.allocs.bytes += r.allocs.bytes
	agg.allocs.objects += r.allocs.objects
}

type result struct {
	ttft    []time.Duration
	streams int
	elapsed time.Duration
	cpu     time.Duration // the path's server's user and system CPU over the loop; 0: not measured
	allocs  memStats      // what the path's server allocated over the loop (Parley with -profile)
}

// cpuPerChat is the server's CPU time per chat, in milliseconds; 0: not measured.
func (r *result) cpuPerChat() float64 {
	if r.streams == 0 {
		return 0
	}
	return float64(r.cpu.Microseconds()) / 1000 / float64(r.streams)
}

// costs describes what a chat cost the path's server, for the line of a loop.
func (r *result) costs() string {
	var s string
	if r.cpu > 0 {
		s += fmt.Sprintf("  CPU %.3f ms/chat", r.cpuPerChat())
	}
	if r.allocs.bytes > 0 && r.streams > 0 {
		s += fmt.Sprintf("  %.1f KB, %d allocs/chat", float64(r.allocs.bytes)/1000/float64(r.streams), r.allocs.objects/uint64(r.streams))
	}
	return s
}

// measured runs loop and measures the CPU time of the path's server over it (utime and stime of
// /proc/<pid>/stat, in 10 ms ticks: a loop of a few hundred chats gives a figure good to a few
// percent) and, where the server serves pprof, what it allocated (runtime.MemStats).
func measured(ctx context.Context, p *path, level, chats int, maxLoop time.Duration) (*result, error) {
	var cpu0 time.Duration
	var mem0 memStats
	if p.proc != nil {
		cpu0, _ = benchproc.CPU(p.proc.Pid())
		mem0, _ = readMemStats(p.proc.pprofAddr())
	}
	res, err := loop(ctx, p, level, chats, maxLoop)
	if err != nil || p.proc == nil {
		return res, err
	}
	if cpu1, err := benchproc.CPU(p.proc.Pid()); err == nil && cpu0 > 0 {
		res.cpu = cpu1 - cpu0
	}
	if mem1, err := readMemStats(p.proc.pprofAddr()); err == nil && mem0.bytes > 0 {
		res.allocs = memStats{bytes: mem1.bytes - mem0.bytes, objects: mem1.objects - mem0.objects}
	}
	return res, nil
}

// memStats is what a process allocated since it started: bytes and objects.
type memStats struct{ bytes, objects uint64 }

var memStatRE = regexp.MustCompile(`(?m)^# (TotalAlloc|Mallocs) = (\d+)$`)

// readMemStats reads a Go process's runtime.MemStats from its pprof listener at addr (the heap
// profile in text, whose end lists them).
func readMemStats(addr string) (memStats, error) {
	if addr == "" {
		return memStats{}, errors.New("no pprof address")
	}
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?debug=1")
	if err != nil {
		return memStats{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return memStats{}, err
	}
	var m memStats
	for _, sm := range memStatRE.FindAllSubmatch(b, -1) {
		n, _ := strconv.ParseUint(string(sm[2]), 10, 64)
		if string(sm[1]) == "TotalAlloc" {
			m.bytes = n
		} else {
			m.objects = n
		}
	}
	if m.bytes == 0 {
		return memStats{}, errors.New("no MemStats in the heap profile")
	}
	return m, nil
}

func (r *result) rate() float64 { return float64(r.streams) / r.elapsed.Seconds() }

// loop runs a closed loop of `level` clients until `chats` chats have started or maxLoop has
// passed, and waits for the chats in flight. Any failed chat fails the loop.
func loop(ctx context.Context, p *path, level, chats int, maxLoop time.Duration) (*result, error) {
	var (
		mu      sync.Mutex
		res     = &result{}
		started int
		firstEr error
		wg      sync.WaitGroup
	)
	t0 := time.Now()
	deadline := t0.Add(maxLoop)
	for range level {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if started >= chats || firstEr != nil || time.Now().After(deadline) || ctx.Err() != nil {
					mu.Unlock()
					return
				}
				started++
				mu.Unlock()
				ttft, err := stream(ctx, p)
				mu.Lock()
				if err != nil {
					if firstEr == nil {
						firstEr = err
					}
				} else {
					res.streams++
					res.ttft = append(res.ttft, ttft)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	p.total += started
	if firstEr == nil && ctx.Err() != nil {
		firstEr = ctx.Err()
	}
	return res, firstEr
}

// stream makes one streamed chat and returns the time from sending it to its first content
// chunk. The stream is read to its end, so that the connection is reused.
func stream(ctx context.Context, p *path) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", p.url, bytes.NewReader(p.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return 0, fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	var ttft time.Duration
	chunks, ended := 0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 16<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		chunk, end, err := classify(p.parley, line[6:])
		if err != nil {
			return 0, err
		}
		if chunk {
			if chunks == 0 {
				ttft = time.Since(t0)
			}
			chunks++
		}
		if end {
			ended = true
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	switch {
	case !ended:
		return 0, errors.New("the stream ended early")
	case chunks != 3:
		return 0, fmt.Errorf("%d content chunks, want 3", chunks)
	}
	return ttft, nil
}

// classify says whether an SSE data line is a content chunk and whether it ends the stream; an
// error event of Parley's is an error.
func classify(parley bool, data []byte) (chunk, end bool, err error) {
	if parley {
		var ev struct {
			Type  string          `json:"type"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return false, false, err
		}
		if ev.Type == "error" {
			return false, false, fmt.Errorf("error event: %s", ev.Error)
		}
		return ev.Type == "chunk", ev.Type == "done", nil
	}
	if string(data) == "[DONE]" {
		return false, true, nil
	}
	var ch struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &ch); err != nil {
		return false, false, err
	}
	return len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "", false, nil
}

// answerSize asks a fake model that answers in one chunk how long its answer to o.message is.
func answerSize(ctx context.Context, o options) (int, error) {
	mock, err := start(ctx, nil, o.parley, "mockllm", "--addr", "127.0.0.1:0", "--chunk-size", "1000000")
	if err != nil {
		return 0, err
	}
	defer mock.Stop()
	body, _ := json.Marshal(map[string]any{"model": "bench-model", "messages": []map[string]string{{"role": "user", "content": o.message}}})
	resp, err := http.Post(mock.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) == 0 {
		return 0, fmt.Errorf("the fake model's answer: %v", err)
	}
	return len(out.Choices[0].Message.Content), nil
}

// pgBench is Parley's PostgreSQL database, made for the benchmark.
type pgBench struct {
	admin     *pgx.Conn
	name      string
	parleyURL string
	pool      int // Parley's pool size
	proc      *proc

	peak      atomic.Int64 // the most backends seen on the database at once
	stopWatch context.CancelFunc
	watched   chan struct{}
}

// pgStats is what the benchmark read of Parley's PostgreSQL connections and durability.
type pgStats struct {
	opened, peak int64
	chats, pool  int
	fsync, sync  string // the server's fsync and synchronous_commit
}

func newPGBench(ctx context.Context, server string, pool int) (*pgBench, error) {
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		return nil, fmt.Errorf("PostgreSQL (-postgres; empty to leave it out): %w", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "parley_bench_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		admin.Close(ctx)
		return nil, fmt.Errorf("creating the benchmark's database: %w", err)
	}
	u, err := url.Parse(server)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	p := &pgBench{admin: admin, name: name, pool: max(4, runtime.NumCPU())}
	if pool > 0 {
		q := u.Query()
		q.Set("pool_max_conns", strconv.Itoa(pool))
		u.RawQuery = q.Encode()
		p.pool = pool
	}
	p.parleyURL = u.String()
	return p, nil
}

// watch samples, every 50 ms until stats, how many backends are connected to Parley's
// database, on a connection of its own.
func (p *pgBench) watch(ctx context.Context) error {
	cfg := p.admin.Config().Copy()
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	ctx, p.stopWatch = context.WithCancel(ctx)
	p.watched = make(chan struct{})
	go func() {
		defer close(p.watched)
		defer c.Close(context.Background())
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			var n int64
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", p.name).Scan(&n); err == nil && n > p.peak.Load() {
				p.peak.Store(n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// backendCPU sums the CPU time of the backends connected to Parley's database (Parley's pool
// keeps its connections between loops, so the same processes are read before and after one).
func (p *pgBench) backendCPU(ctx context.Context) time.Duration {
	rows, err := p.admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1", p.name)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, pid := range pids {
		if c, err := benchproc.CPU(int(pid)); err == nil {
			sum += c
		}
	}
	return sum
}

// stats, once Parley has stopped, waits until its backends are gone (each reports its
// statistics as it ends) and reads how many sessions were established to its database.
func (p *pgBench) stats(ctx context.Context, chats int) (pgStats, error) {
	st := pgStats{chats: chats, pool: p.pool}
	if p.stopWatch != nil {
		p.stopWatch()
		<-p.watched
	}
	st.peak = p.peak.Load()
	for {
		var n int
		if err := p.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", p.name).Scan(&n); err != nil {
			return st, err
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := p.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return st, err
	}
	if err := p.admin.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = $1", p.name).Scan(&st.opened); err != nil {
		return st, err
	}
	if err := p.admin.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('synchronous_commit')").Scan(&st.fsync, &st.sync); err != nil {
		return st, err
	}
	// A setting of the database or of Parley's role would override the server's.
	var over string
	if err := p.admin.QueryRow(ctx, `SELECT coalesce(string_agg(array_to_string(setconfig, ','), ','), '')
		FROM pg_db_role_setting s LEFT JOIN pg_database d ON d.oid = s.setdatabase
		WHERE d.datname = $1 OR s.setdatabase = 0`, p.name).Scan(&over); err != nil {
		return st, err
	}
	if strings.Contains(over, "synchronous_commit") || strings.Contains(over, "fsync") {
		st.sync += " (overridden: " + over + ")"
	}
	return st, nil
}

func (p *pgBench) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+p.name+" WITH (FORCE)"); err != nil {
		fmt.Fprintln(os.Stderr, "gateway: dropping", p.name+":", err)
	}
	p.admin.Close(ctx)
}

// profileSQLite runs a closed loop of 32 streams through Parley on SQLite for o.profSecs and
// meanwhile fetches its CPU, mutex, block and allocation profiles into o.profile; it returns
// the top of the CPU profile.
func profileSQLite(ctx context.Context, o options, sqlite *proc, p *path) (string, error) {
	addr := sqlite.pprofAddr()
	if addr == "" {
		return "", errors.New("-profile: Parley did not log its pprof address")
	}
	if err := os.MkdirAll(o.profile, 0o755); err != nil {
		return "", err
	}
	secs := strconv.Itoa(o.profSecs)
	kinds := map[string]string{"cpu": "profile", "mutex": "mutex", "block": "block", "allocs": "allocs"}
	errs := make(chan error, len(kinds)+1)
	for name, route := range kinds {
		go func() {
			resp, err := http.Get("http://" + addr + "/debug/pprof/" + route + "?seconds=" + secs)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("%s profile: HTTP %d %.200s", name, resp.StatusCode, b)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(o.profile, name+".pprof"), b, 0o644)
			}
			errs <- err
		}()
	}
	var res *result
	go func() {
		var err error
		res, err = loop(ctx, p, 32, 1<<30, time.Duration(o.profSecs+1)*time.Second)
		errs <- err
	}()
	for range len(kinds) + 1 {
		if err := <-errs; err != nil {
			return "", fmt.Errorf("-profile: %w", err)
		}
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=30", filepath.Join(o.profile, "cpu.pprof")).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v: %s", err, out)
	}
	return fmt.Sprintf("Profiled %s at 32 in flight for %d s (%d streams, %.0f/s); profiles in %s. CPU, by own time:\n%s",
		p.name, o.profSecs, res.streams, res.rate(), o.profile, out), nil
}

// report prints the table of every path and level, then issue 25's targets with a verdict each.
func report(w io.Writer, o options, size int, elapsed time.Duration, paths []*path, sqlite *proc, pg *pgBench, st pgStats) {
	fmt.Fprintf(w, "Closed loop, %d round(s), at most %d chats or %s per loop, all paths interleaved in one run (%.0f s); the fake model answers %d bytes in 3 chunks at once. %d CPUs, load average %s.\n\n",
		o.rounds, o.chats, o.maxLoop, elapsed.Seconds(), size, runtime.NumCPU(), loadavg())
	var proxy *path
	for _, p := range paths {
		if p.proxy {
			proxy = p
		}
	}
	head := "| path |"
	sep := "|---|"
	for _, l := range o.levels {
		if l == 1 {
			head += " TTFT p50 / p99, 1 stream |"
			sep += "---|"
			continue
		}
		head += fmt.Sprintf(" streams/s, %d in flight (× proxy) | TTFT p50 / p99, %d in flight |", l, l)
		sep += "---|---|"
	}
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, p := range paths {
		row := "| " + p.name + " |"
		for _, l := range o.levels {
			r := p.byLevel[l]
			if l == 1 {
				row += fmt.Sprintf(" %s / %s |", ms(pct(r.ttft, 50)), ms(pct(r.ttft, 99)))
				continue
			}
			ratio := ""
			if p != proxy {
				ratio = fmt.Sprintf(" (%.2f×)", r.rate()/proxy.byLevel[l].rate())
			}
			row += fmt.Sprintf(" %.0f%s | %s / %s |", r.rate(), ratio, ms(pct(r.ttft, 50)), ms(pct(r.ttft, 99)))
		}
		fmt.Fprintln(w, row)
	}

	costs(w, o, paths)

	fmt.Fprintln(w, "\nIssue 25's targets (Parley against the bare proxy of this run):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| target | measured | verdict |")
	fmt.Fprintln(w, "|---|---|---|")
	line := func(target, measured string, ok bool) {
		fmt.Fprintf(w, "| %s | %s | %s |\n", target, measured, benchproc.Verdict(ok))
	}
	for _, p := range paths {
		if !p.parley {
			continue
		}
		store, floor := "SQLite", 0.5
		if p.pg {
			store, floor = "PostgreSQL", 0.4
		}
		for _, l := range []int{32, 128} {
			if r, pr := p.byLevel[l], proxy.byLevel[l]; r != nil && pr != nil {
				x := r.rate() / pr.rate()
				line(fmt.Sprintf("%s streams/s ≥ %.1f × proxy at %d in flight", store, floor, l), fmt.Sprintf("%.0f / %.0f = %.2f×", r.rate(), pr.rate(), x), x >= floor)
			}
		}
		if r, pr := p.byLevel[1], proxy.byLevel[1]; r != nil && pr != nil {
			d50 := pct(r.ttft, 50) - pct(pr.ttft, 50)
			d99 := pct(r.ttft, 99) - pct(pr.ttft, 99)
			line(store+" TTFT overhead at 1 stream, p50 ≤ 1 ms", fmt.Sprintf("%s − %s = %s", ms(pct(r.ttft, 50)), ms(pct(pr.ttft, 50)), ms(d50)), d50 <= time.Millisecond)
			line(store+" TTFT overhead at 1 stream, p99 ≤ 3 ms", fmt.Sprintf("%s − %s = %s", ms(pct(r.ttft, 99)), ms(pct(pr.ttft, 99)), ms(d99)), d99 <= 3*time.Millisecond)
		}
		if r, pr := p.byLevel[128], proxy.byLevel[128]; r != nil && pr != nil {
			x := float64(pct(r.ttft, 99)) / float64(pct(pr.ttft, 99))
			line(store+" TTFT p99 at 128 in flight ≤ 2 × proxy", fmt.Sprintf("%s / %s = %.2f×", ms(pct(r.ttft, 99)), ms(pct(pr.ttft, 99)), x), x <= 2)
		}
		errs := sqlite.errorLines()
		if p.pg {
			errs = pg.proc.errorLines()
		}
		line(store+": no line logged at level ERROR", fmt.Sprint(errs), errs == 0)
	}
	if pg != nil {
		per100 := float64(st.opened) * 100 / float64(max(st.chats, 1))
		line(fmt.Sprintf("PostgreSQL backends opened per 100 chats ≤ the pool size (%d)", st.pool),
			fmt.Sprintf("%d opened for %d chats (warm-up included) = %.1f per 100; at most %d at once", st.opened, st.chats, per100, st.peak),
			per100 <= float64(st.pool))
		line("PostgreSQL commits durably (fsync on, synchronous_commit not off)", "fsync="+st.fsync+", synchronous_commit="+st.sync,
			st.fsync == "on" && st.sync != "off" && !strings.Contains(st.sync, "overridden"))
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, "Durability: SQLite opens with synchronous=FULL (every commit fsynced; Parley has no other mode)")
	if pg != nil {
		fmt.Fprintf(w, "; PostgreSQL server fsync=%s, synchronous_commit=%s", st.fsync, st.sync)
	}
	fmt.Fprintln(w, ".")
}

// costs prints what a chat cost each path's server: CPU time (and, for Parley run with
// -profile, bytes and objects allocated) per chat at each level.
func costs(w io.Writer, o options, paths []*path) {
	head, sep := "| server |", "|---|"
	for _, l := range o.levels {
		head += fmt.Sprintf(" CPU per chat, %d in flight |", l)
		sep += "---|"
	}
	var rows []string
	for _, p := range paths {
		row, any := "| "+p.name+" |", false
		for _, l := range o.levels {
			r := p.byLevel[l]
			if r == nil || r.cpu == 0 {
				row += " |"
				continue
			}
			any = true
			row += fmt.Sprintf(" %.3f ms", r.cpuPerChat())
			if r.allocs.bytes > 0 {
				row += fmt.Sprintf(" (%.1f KB, %d allocs)", float64(r.allocs.bytes)/1000/float64(r.streams), r.allocs.objects/uint64(r.streams))
			}
			row += " |"
		}
		if any {
			rows = append(rows, row)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nWhat a chat cost the server of each path (its user and system CPU time over the loop, from /proc; allocations where it serves pprof):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, head)
	fmt.Fprintln(w, sep)
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
}

// loadavg is the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

func ms(d time.Duration) string {
	v := float64(d.Microseconds()) / 1000
	if v >= 100 {
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.2f ms", v)
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

// proc is a child process (benchproc) whose log lines at level ERROR are counted and whose
// warnings and errors are copied to stderr.
type proc struct {
	*benchproc.Proc
	errors atomic.Int64 // log lines at level ERROR
	pprof  atomic.Pointer[string]
}

var pprofRE = regexp.MustCompile(`msg="pprof listening" addr=([0-9.]+:[0-9]+)`)

// pprofAddr is the address of the process's pprof listener, if it logged one.
func (p *proc) pprofAddr() string {
	if a := p.pprof.Load(); a != nil {
		return *a
	}
	return ""
}

// errorLines returns how many lines the process logged at level ERROR.
func (p *proc) errorLines() int64 { return p.errors.Load() }

// start runs bin with args (and env added to this process's) and waits until it says where it
// listens.
func start(ctx context.Context, env []string, bin string, args ...string) (*proc, error) {
	p := &proc{}
	name := filepath.Base(bin)
	bp, err := benchproc.StartWith(ctx, benchproc.Options{Env: env, OnLine: func(line string) {
		if m := pprofRE.FindStringSubmatch(line); m != nil {
			p.pprof.Store(&m[1])
		}
		isErr := strings.Contains(line, "level=ERROR")
		if isErr {
			p.errors.Add(1)
		}
		if benchproc.ListenAddr(line) == "" && (isErr || strings.Contains(line, "level=WARN") || !strings.Contains(line, "level=")) &&
			!strings.Contains(line, "authentication is off") {
			fmt.Fprintln(os.Stderr, name, line)
		}
	}}, bin, args...)
	if err != nil {
		return nil, err
	}
	p.Proc = bp
	return p, nil
}
