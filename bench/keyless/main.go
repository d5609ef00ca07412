// Command keyless measures what a flood of large request bodies costs a Parley server. It builds
// parley, starts `parley serve --auth keys` as a real process on loopback, and sends -n concurrent
// POST /api/v1/chat requests, each with a body of -size bytes (a JSON message), without an API key
// (or, with -with-key, with a valid one). While they run it probes /healthz, and afterwards it
// reports the statuses, the server's peak resident memory (VmHWM) and the probe latencies.
//
//	go run ./bench/keyless -n 100 -size 8000000
//	go run ./bench/keyless -n 100 -size 8000000 -with-key
package main

import (
	"bytes"
	"context"
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

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "keyless:", err)
		os.Exit(1)
	}
}

type options struct {
	parley  string
	n, size int
	withKey bool
	rounds  int
	timeout time.Duration
	extra   string
}

func run() error {
	var o options
	flag.StringVar(&o.parley, "parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	flag.IntVar(&o.n, "n", 100, "concurrent requests")
	flag.IntVar(&o.rounds, "rounds", 1, "requests per concurrent client, one after another")
	flag.IntVar(&o.size, "size", 8_000_000, "body size in bytes")
	flag.BoolVar(&o.withKey, "with-key", false, "send a valid API key (the bodies are then read and decoded)")
	flag.StringVar(&o.extra, "serve-flags", "", "extra flags for parley serve, space-separated")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "limit for the whole benchmark")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "keyless")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.parley == "" {
		if o.parley, err = benchproc.Build(ctx, dir); err != nil {
			return err
		}
	}
	db := filepath.Join(dir, "bench.db")
	key := ""
	if o.withKey {
		out, err := exec.CommandContext(ctx, o.parley, "keys", "create", "--db", db, "--user", "bench").CombinedOutput()
		if err != nil {
			return fmt.Errorf("keys create: %v: %s", err, out)
		}
		key = regexp.MustCompile(`pk_[A-Za-z0-9_-]{43}`).FindString(string(out))
		if key == "" {
			return fmt.Errorf("keys create printed no key: %s", out)
		}
	}
	args := []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--auth", "keys"}
	if o.extra != "" {
		args = append(args, strings.Fields(o.extra)...)
	}
	srv, err := benchproc.Start(ctx, o.parley, args...)
	if err != nil {
		return err
	}
	defer srv.Stop()
	base, err := benchproc.RSS(srv.Cmd.Process.Pid, "VmRSS:")
	if err != nil {
		return err
	}

	body := make([]byte, 0, o.size)
	body = append(body, `{"message":"`...)
	body = append(body, bytes.Repeat([]byte("a"), max(o.size-len(`{"message":""}`), 0))...)
	body = append(body, `"}`...)

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.n, DisableKeepAlives: true}}
	var mu sync.Mutex
	statuses := map[string]int{}
	var wg sync.WaitGroup
	t0 := time.Now()
	stopProbe := make(chan struct{})
	probes := make(chan []time.Duration, 1)
	go func() { probes <- probe(ctx, srv.URL, stopProbe) }()
	for range o.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range o.rounds {
				st := post(ctx, client, srv.URL+"/api/v1/chat", body, key)
				mu.Lock()
				statuses[st]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(stopProbe)
	lat := <-probes
	peak, err := benchproc.RSS(srv.Cmd.Process.Pid, "VmHWM:")
	if err != nil {
		return err
	}

	fmt.Printf("%d concurrent × %d requests of %d bytes, key: %v, in %.2f s\n\n", o.n, o.rounds, o.size, o.withKey, elapsed.Seconds())
	fmt.Println("| measure | value |")
	fmt.Println("|---|---|")
	var keys []string
	for k := range statuses {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Printf("| answers %s | %d |\n", k, statuses[k])
	}
	fmt.Printf("| server RSS before | %.1f MiB |\n", float64(base)/(1<<20))
	fmt.Printf("| server peak RSS (VmHWM) | %.1f MiB |\n", float64(peak)/(1<<20))
	if len(lat) > 0 {
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		fmt.Printf("| /healthz during the flood, p50 / max (%d probes) | %.1f ms / %.1f ms |\n", len(lat),
			float64(lat[len(lat)/2].Microseconds())/1000, float64(lat[len(lat)-1].Microseconds())/1000)
	}
	return nil
}

// post sends one request and names its outcome: the status, or the kind of transport error.
func post(ctx context.Context, c *http.Client, url string, body []byte, key string) string {
	req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
	if err != nil {
		return "error: " + err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		switch {
		case strings.Contains(err.Error(), "reset by peer"), strings.Contains(err.Error(), "broken pipe"):
			return "connection closed by the server while sending"
		default:
			return "error: " + err.Error()
		}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return strconv.Itoa(resp.StatusCode)
}

// probe times GET /healthz every 100 ms until stop is closed.
func probe(ctx context.Context, base string, stop <-chan struct{}) []time.Duration {
	var out []time.Duration
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return out
		case <-ctx.Done():
			return out
		case <-t.C:
		}
		t0 := time.Now()
		resp, err := c.Get(base + "/healthz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out = append(out, time.Since(t0))
		}
	}
}
