// Command gateway measures Parley side by side with what a streamed chat costs without it. It
// builds `parley` and starts, as real processes on loopback:
//
//   - the fake model, `parley mockllm` (OpenAI-compatible; every answer is 3 content chunks sent at
//     once, then usage and [DONE]);
//   - a bare Go reverse proxy to it (httputil.ReverseProxy, flushing every write; this program run
//     as a child), the practical limit of any HTTP gateway written in Go;
//   - Parley on SQLite and Parley on PostgreSQL (a database of its own, dropped at the end), both
//     pointed at the fake model, with the rate limit off and no run budget, so that neither
//     refuses a chat.
//
// It then runs the same closed-loop streamed chats through each path (a client starts its next
// chat when its last one ended; Parley: POST /api/v1/chat/stream with a new session each time),
// interleaved: for each round, for each concurrency level, every path in turn. Each loop is bounded
// in chats (-chats) and in time (-max-loop). Time to first token (TTFT) is measured from sending
// the request to the first content chunk: the first `chunk` event of Parley, the first content
// delta of the model. It reports TTFT p50/p99 at each level and streams per second, and the
// PostgreSQL connections Parley opened per 100 chats (pg_stat_database.sessions of its database).
//
//	go run ./bench/gateway                                  # 1, 32 and 128 in flight, 3 rounds
//	go run ./bench/gateway -levels 1,8 -chats 100 -rounds 1 # a quick check
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
	"time"

	"github.com/jackc/pgx/v5"
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
	levels   []int
	rounds   int
	chats    int
	maxLoop  time.Duration
	message  string
	timeout  time.Duration
}

func run() error {
	var o options
	var levels string
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.StringVar(&o.postgres, "postgres", "postgres://127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server (a database is created on it for Parley and dropped at the end); empty: no PostgreSQL path")
	flag.StringVar(&levels, "levels", "1,32,128", "streams in flight, comma-separated")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every level through every path once")
	flag.IntVar(&o.chats, "chats", 1000, "chats per loop (one level, one path, one round)")
	flag.DurationVar(&o.maxLoop, "max-loop", 20*time.Second, "time bound of one loop: no new chat starts after it")
	flag.StringVar(&o.message, "message", "Tell me something about streaming servers, please.", "user message (the mock answers without tools)")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "time bound of the whole benchmark")
	flag.Parse()
	for _, f := range strings.Split(levels, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 4096 {
			return fmt.Errorf("-levels: %q is not a number of streams from 1 to 4096", f)
		}
		o.levels = append(o.levels, n)
	}
	if o.rounds < 1 || o.chats < 1 || o.maxLoop <= 0 {
		return errors.New("-rounds and -chats must be at least 1, -max-loop positive")
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "gatewaybench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.parley == "" {
		o.parley = filepath.Join(dir, "parley")
		build := exec.CommandContext(ctx, "go", "build", "-o", o.parley, "./cmd/parley")
		build.Stderr = os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("building parley: %w", err)
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
	defer mock.stop()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	proxy, err := start(ctx, []string{proxyEnv + "=" + mock.url}, self)
	if err != nil {
		return err
	}
	defer proxy.stop()

	parleyArgs := func(db ...string) []string {
		return append([]string{"serve", "--addr", "127.0.0.1:0",
			"--openai-base-url", mock.url + "/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
			"--rate-limit", "off", "--max-runs", "0", "--max-conns-per-addr", "0"}, db...)
	}
	sqlite, err := start(ctx, nil, o.parley, parleyArgs("--db", filepath.Join(dir, "bench.db"))...)
	if err != nil {
		return err
	}
	defer sqlite.stop()

	paths := []*path{
		{name: "client → model directly", url: mock.url + "/v1/chat/completions", parley: false},
		{name: "bare Go reverse proxy", url: proxy.url + "/v1/chat/completions", parley: false},
		{name: "Parley, SQLite", url: sqlite.url + "/api/v1/chat/stream", parley: true},
	}
	var pg *pgBench
	if o.postgres != "" {
		pg, err = newPGBench(ctx, o.postgres)
		if err != nil {
			return err
		}
		defer pg.drop()
		srv, err := start(ctx, nil, o.parley, parleyArgs("--database-url", pg.url)...)
		if err != nil {
			return err
		}
		pg.proc = srv
		defer srv.stop()
		paths = append(paths, &path{name: "Parley, PostgreSQL", url: srv.url + "/api/v1/chat/stream", parley: true, pg: true})
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

	for round := 1; round <= o.rounds; round++ {
		for _, level := range o.levels {
			for _, p := range paths {
				res, err := loop(ctx, p, level, o.chats, o.maxLoop)
				if err != nil {
					return fmt.Errorf("%s, %d in flight: %w", p.name, level, err)
				}
				fmt.Fprintf(os.Stderr, "round %d, %3d in flight, %-24s %6d streams %8.1f streams/s  TTFT p50 %s p99 %s\n",
					round, level, p.name, res.streams, res.rate(), ms(pct(res.ttft, 50)), ms(pct(res.ttft, 99)))
				p.add(level, res)
			}
		}
	}

	var chatsPG int
	if pg != nil {
		for _, p := range paths {
			if p.pg {
				chatsPG = p.total
			}
		}
		pg.proc.stop()
	}
	report(o, size, paths)
	fmt.Printf("\nLines Parley logged at level ERROR (store errors among them): %d on SQLite", sqlite.errorLines())
	if pg != nil {
		fmt.Printf(", %d on PostgreSQL", pg.proc.errorLines())
	}
	fmt.Println(".")
	if pg != nil {
		opened, err := pg.sessions(ctx)
		if err != nil {
			return err
		}
		fmt.Printf("Parley on PostgreSQL opened %d connections for %d chats (warm-up included): %.1f per 100 chats; its pool holds max(4, cores) = %d.\n",
			opened, chatsPG, float64(opened)*100/float64(max(chatsPG, 1)), max(4, runtime.NumCPU()))
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
	client  *http.Client
	byLevel map[int]*result
	total   int // chats made, warm-up included
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
}

type result struct {
	ttft    []time.Duration
	streams int
	elapsed time.Duration
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
	defer mock.stop()
	body, _ := json.Marshal(map[string]any{"model": "bench-model", "messages": []map[string]string{{"role": "user", "content": o.message}}})
	resp, err := http.Post(mock.url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
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
	admin *pgx.Conn
	name  string
	url   string
	proc  *proc
}

func newPGBench(ctx context.Context, server string) (*pgBench, error) {
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
	return &pgBench{admin: admin, name: name, url: u.String()}, nil
}

// sessions waits until Parley's backends are gone (each reports its statistics as it ends) and
// returns how many sessions were established to its database.
func (p *pgBench) sessions(ctx context.Context) (int64, error) {
	for {
		var n int
		if err := p.admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", p.name).Scan(&n); err != nil {
			return 0, err
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := p.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, err
	}
	var s int64
	err := p.admin.QueryRow(ctx, "SELECT sessions FROM pg_stat_database WHERE datname = $1", p.name).Scan(&s)
	return s, err
}

func (p *pgBench) drop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+p.name+" WITH (FORCE)"); err != nil {
		fmt.Fprintln(os.Stderr, "gateway: dropping", p.name+":", err)
	}
	p.admin.Close(ctx)
}

func report(o options, size int, paths []*path) {
	fmt.Printf("Closed loop, %d round(s), at most %d chats or %s per loop; the fake model answers %d bytes in 3 chunks at once.\n\n",
		o.rounds, o.chats, o.maxLoop, size)
	var proxy *path
	for _, p := range paths {
		if strings.Contains(p.name, "proxy") {
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
	fmt.Println(head)
	fmt.Println(sep)
	for _, p := range paths {
		row := "| " + p.name + " |"
		for _, l := range o.levels {
			r := p.byLevel[l]
			if l == 1 {
				row += fmt.Sprintf(" %s / %s |", ms(pct(r.ttft, 50)), ms(pct(r.ttft, 99)))
				continue
			}
			ratio := ""
			if proxy != nil && p != proxy {
				ratio = fmt.Sprintf(" (%.2f×)", r.rate()/proxy.byLevel[l].rate())
			}
			row += fmt.Sprintf(" %.0f%s | %s / %s |", r.rate(), ratio, ms(pct(r.ttft, 50)), ms(pct(r.ttft, 99)))
		}
		fmt.Println(row)
	}
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

// proc is a child process that announced its listening address.
type proc struct {
	cmd    *exec.Cmd
	url    string
	once   sync.Once
	mu     sync.Mutex
	errors int // log lines at level ERROR
}

// errorLines returns how many lines the process logged at level ERROR.
func (p *proc) errorLines() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.errors
}

var listenRE = regexp.MustCompile(`msg=listening.*?addr=([0-9.]+:[0-9]+)`)

// start runs bin with args (and env added to this process's) and waits until it says where it
// listens. Its error lines are copied to stderr.
func start(ctx context.Context, env []string, bin string, args ...string) (*proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	p := &proc{cmd: cmd}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "level=ERROR") {
				p.mu.Lock()
				p.errors++
				p.mu.Unlock()
			}
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			} else if !strings.Contains(sc.Text(), "level=") || strings.Contains(sc.Text(), "level=ERROR") || strings.Contains(sc.Text(), "level=WARN") {
				fmt.Fprintln(os.Stderr, filepath.Base(bin), sc.Text())
			}
		}
	}()
	select {
	case addr := <-found:
		p.url = "http://" + addr
		return p, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("%s %s did not start", bin, strings.Join(args, " "))
	}
}

// stop ends the process as SIGINT does, killing it after 10 s; it may be called twice.
func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = p.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-done
		}
	})
}
