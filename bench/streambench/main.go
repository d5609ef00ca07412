// Command streambench measures what Parley adds to a streamed chat. It starts `parley mockllm` (the
// fake OpenAI-compatible upstream) and `parley serve` pointed at it, as real processes on loopback,
// then runs the same concurrent streamed chats twice: directly against mockllm, and through
// Parley's /api/v1/chat/stream. It reports time to first token, the gap between chunks, streams per
// second and Parley's peak resident memory, as a Markdown table.
//
//	go run ./bench/streambench -n 50 -rounds 4
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "streambench:", err)
		os.Exit(1)
	}
}

type options struct {
	parley     string
	n, rounds  int
	tokenDelay time.Duration
	message    string
	timeout    time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.IntVar(&o.n, "n", 50, "concurrent streams")
	flag.IntVar(&o.rounds, "rounds", 4, "streams per concurrent client")
	flag.DurationVar(&o.tokenDelay, "token-delay", 5*time.Millisecond, "mockllm's delay between chunks")
	flag.StringVar(&o.message, "message", "Tell me something about streaming servers, please.", "user message (the mock answers without tools)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit for the whole benchmark")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "streambench")
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

	mock, err := start(ctx, o.parley, "mockllm", "--addr", "127.0.0.1:0", "--token-delay", o.tokenDelay.String())
	if err != nil {
		return err
	}
	defer mock.stop()
	srv, err := start(ctx, o.parley, "serve", "--addr", "127.0.0.1:0", "--db", filepath.Join(dir, "bench.db"),
		"--openai-base-url", mock.url+"/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
		"--max-conns-per-addr", "0") // every client is on loopback: one address
	if err != nil {
		return err
	}
	defer srv.stop()

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.n * 2, MaxConnsPerHost: o.n * 2}}
	direct := drive(ctx, o, func(ctx context.Context) (sample, error) { return streamDirect(ctx, client, mock.url, o.message) })
	through := drive(ctx, o, func(ctx context.Context) (sample, error) { return streamParley(ctx, client, srv.url, o.message) })
	if direct.err != nil {
		return fmt.Errorf("direct: %w", direct.err)
	}
	if through.err != nil {
		return fmt.Errorf("through parley: %w", through.err)
	}
	peak, err := peakRSS(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}

	fmt.Printf("%d concurrent streams × %d rounds, mockllm token delay %s, %d chunks per answer\n\n",
		o.n, o.rounds, o.tokenDelay, direct.chunks/max(direct.streams, 1))
	fmt.Println("| metric | direct to mockllm | through Parley | Parley's overhead |")
	fmt.Println("|---|---|---|---|")
	row := func(name string, d, p time.Duration) {
		fmt.Printf("| %s | %s | %s | %s |\n", name, ms(d), ms(p), ms(p-d))
	}
	row("time to first token, p50", pct(direct.ttft, 50), pct(through.ttft, 50))
	row("time to first token, p99", pct(direct.ttft, 99), pct(through.ttft, 99))
	row("gap between chunks, p50", pct(direct.gaps, 50), pct(through.gaps, 50))
	row("gap between chunks, p99", pct(direct.gaps, 99), pct(through.gaps, 99))
	fmt.Printf("| streams per second | %.1f | %.1f | |\n", direct.rate(), through.rate())
	fmt.Printf("| Parley peak RSS | | %.1f MiB | |\n", float64(peak)/(1<<20))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// sample is one stream's measurements.
type sample struct {
	ttft time.Duration
	gaps []time.Duration
}

type result struct {
	ttft, gaps []time.Duration
	streams    int
	chunks     int
	elapsed    time.Duration
	err        error
}

func (r result) rate() float64 { return float64(r.streams) / r.elapsed.Seconds() }

// drive runs o.n clients, each doing o.rounds streams one after another.
func drive(ctx context.Context, o options, stream func(context.Context) (sample, error)) result {
	var mu sync.Mutex
	var res result
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := 0; i < o.n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < o.rounds; r++ {
				s, err := stream(ctx)
				mu.Lock()
				if err != nil && res.err == nil {
					res.err = err
				}
				if err == nil {
					res.streams++
					res.chunks += len(s.gaps) + 1
					res.ttft = append(res.ttft, s.ttft)
					res.gaps = append(res.gaps, s.gaps...)
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	res.elapsed = time.Since(t0)
	return res
}

// streamDirect streams one chat completion from mockllm and times its content chunks.
func streamDirect(ctx context.Context, c *http.Client, base, msg string) (sample, error) {
	body, _ := json.Marshal(map[string]any{
		"model": "bench-model", "stream": true, "stream_options": map[string]bool{"include_usage": true},
		"messages": []map[string]string{{"role": "user", "content": msg}},
	})
	return timeStream(ctx, c, base+"/v1/chat/completions", body, func(data []byte) (bool, bool) {
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if string(data) == "[DONE]" {
			return false, true
		}
		_ = json.Unmarshal(data, &ch)
		return len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "", false
	})
}

// streamParley streams one chat through Parley (a new session each time) and times its chunk events.
func streamParley(ctx context.Context, c *http.Client, base, msg string) (sample, error) {
	body, _ := json.Marshal(map[string]any{"message": msg})
	return timeStream(ctx, c, base+"/api/v1/chat/stream", body, func(data []byte) (bool, bool) {
		var ev struct {
			Type         string `json:"type"`
			FinishReason string `json:"finish_reason"`
		}
		_ = json.Unmarshal(data, &ev)
		if ev.Type == "error" {
			return false, true
		}
		return ev.Type == "chunk", ev.Type == "done"
	})
}

// timeStream posts body and reads SSE data lines; classify says whether a data line is a content
// chunk and whether it ends the stream.
func timeStream(ctx context.Context, c *http.Client, url string, body []byte, classify func([]byte) (chunk, end bool)) (sample, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	t0 := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return sample{}, fmt.Errorf("%s: HTTP %d: %s", url, resp.StatusCode, b)
	}
	var s sample
	var last time.Time
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data: ")) {
			continue
		}
		chunk, end := classify(line[6:])
		now := time.Now()
		if chunk {
			if last.IsZero() {
				s.ttft = now.Sub(t0)
			} else {
				s.gaps = append(s.gaps, now.Sub(last))
			}
			last = now
		}
		if end {
			if last.IsZero() {
				return s, fmt.Errorf("%s: stream ended without content", url)
			}
			return s, nil
		}
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	return s, errors.New(url + ": stream ended early")
}

func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

// proc is a child process that announced its listening address.
type proc struct {
	cmd *exec.Cmd
	url string
}

var listenRE = regexp.MustCompile(`msg=listening.*?addr=([0-9.]+:[0-9]+)`)

func start(ctx context.Context, bin string, args ...string) (*proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			} else if strings.Contains(sc.Text(), "level=ERROR") {
				fmt.Fprintln(os.Stderr, sc.Text())
			}
		}
	}()
	select {
	case addr := <-found:
		return &proc{cmd: cmd, url: "http://" + addr}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s %s did not start", bin, args[0])
	}
}

func (p *proc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
	}
}

// peakRSS reads the process's high-water resident set size from /proc.
func peakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("VmHWM not found")
}
