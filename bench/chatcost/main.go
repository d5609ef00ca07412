// Command chatcost measures what one streamed chat costs Parley, in figures a loaded machine does
// not move much: the CPU time the server process used per chat (user + system, from
// /proc/<pid>/stat) and, on PostgreSQL, the transactions its database committed per chat
// (pg_stat_database.xact_commit: the writes, and the reads outside a transaction, which
// PostgreSQL counts as transactions too). It starts the fake model (`parley mockllm`, 3 chunks
// at once) and Parley on SQLite (a real file, fsynced) and, with -postgres, on PostgreSQL (a
// database of its own, dropped at the end), warms each up, then runs closed loops of -chats chats
// (`POST /api/v1/chat/stream`, a new session each) at each level of streams in flight.
//
//	go run ./bench/chatcost -parley /tmp/parley -levels 1,32 -chats 1000
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

func main() {
	bin := flag.String("parley", "", "parley binary (default: built from ./cmd/parley into a temp dir)")
	chats := flag.Int("chats", 1000, "chats per level")
	levels := flag.String("levels", "1,32", "streams in flight, comma-separated")
	pgURL := flag.String("postgres", "postgres://127.0.0.1:5432/test?sslmode=disable", "PostgreSQL server; empty: SQLite only")
	flag.Parse()
	if err := run(*bin, *chats, *levels, *pgURL); err != nil {
		fmt.Fprintln(os.Stderr, "chatcost:", err)
		os.Exit(1)
	}
}

func run(bin string, chats int, levelList, pgURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	var levels []int
	for _, f := range strings.Split(levelList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("bad level %q", f)
		}
		levels = append(levels, n)
	}
	dir, err := os.MkdirTemp("", "chatcost")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if bin == "" {
		if bin, err = benchproc.Build(ctx, dir); err != nil {
			return err
		}
	}
	mock, err := benchproc.Start(ctx, bin, "mockllm", "--addr", "127.0.0.1:0", "--token-delay", "0s", "--chunk-size", "20")
	if err != nil {
		return err
	}
	defer mock.Stop()
	serve := func(db ...string) []string {
		return append([]string{"serve", "--addr", "127.0.0.1:0",
			"--openai-base-url", mock.URL + "/v1", "--openai-api-key", "bench", "--model", "openai/bench-model",
			"--rate-limit", "off", "--max-runs", "0", "--max-conns-per-addr", "0"}, db...)
	}
	fmt.Printf("%s, load average %s\n", time.Now().UTC().Format(time.DateTime), loadavg())
	fmt.Println("| store | in flight | chats | chats/s | Parley CPU per chat | PostgreSQL transactions per chat |")
	fmt.Println("|---|---|---|---|---|---|")

	sq, err := benchproc.Start(ctx, bin, serve("--db", filepath.Join(dir, "bench.db"))...)
	if err != nil {
		return err
	}
	err = measure(ctx, "SQLite", sq, nil, "", levels, chats)
	sq.Stop()
	if err != nil || pgURL == "" {
		return err
	}

	admin, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	name := fmt.Sprintf("chatcost_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	defer admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	u := strings.Replace(pgURL, "/test?", "/"+name+"?", 1)
	pg, err := benchproc.Start(ctx, bin, serve("--database-url", u)...)
	if err != nil {
		return err
	}
	defer pg.Stop()
	return measure(ctx, "PostgreSQL", pg, admin, name, levels, chats)
}

func measure(ctx context.Context, store string, p *benchproc.Proc, admin *pgx.Conn, db string, levels []int, chats int) error {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	url := p.URL + "/api/v1/chat/stream"
	if err := loop(ctx, client, url, 32, 200); err != nil { // warm-up
		return fmt.Errorf("%s: warm-up: %w", store, err)
	}
	commits := func() (int64, error) {
		if admin == nil {
			return 0, nil
		}
		if _, err := admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
			return 0, err
		}
		var n int64
		err := admin.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", db).Scan(&n)
		return n, err
	}
	for _, level := range levels {
		// PostgreSQL reports its statistics with a delay: let those of the last loop arrive.
		time.Sleep(time.Second)
		c0, err := commits()
		if err != nil {
			return err
		}
		cpu0, err := benchproc.CPU(p.Pid())
		if err != nil {
			return err
		}
		t0 := time.Now()
		if err := loop(ctx, client, url, level, chats); err != nil {
			return fmt.Errorf("%s at %d: %w", store, level, err)
		}
		elapsed := time.Since(t0)
		cpu1, err := benchproc.CPU(p.Pid())
		if err != nil {
			return err
		}
		time.Sleep(time.Second)
		c1, err := commits()
		if err != nil {
			return err
		}
		tx := "—"
		if admin != nil {
			tx = fmt.Sprintf("%.2f", float64(c1-c0)/float64(chats))
		}
		fmt.Printf("| %s | %d | %d | %.0f | %.3f ms | %s |\n", store, level, chats, float64(chats)/elapsed.Seconds(),
			float64((cpu1-cpu0).Microseconds())/1000/float64(chats), tx)
	}
	return nil
}

// loop runs chats chats, level at a time, each to its done event.
func loop(ctx context.Context, client *http.Client, url string, level, chats int) error {
	var (
		mu      sync.Mutex
		started int
		first   error
		wg      sync.WaitGroup
	)
	for range level {
		wg.Go(func() {
			for {
				mu.Lock()
				if started >= chats || first != nil {
					mu.Unlock()
					return
				}
				started++
				mu.Unlock()
				if err := chat(ctx, client, url); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return first
}

func chat(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader(`{"message":"Tell me something about streaming servers, please."}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 16<<10), 4<<20)
	for sc.Scan() {
		if bytes.HasPrefix(sc.Bytes(), []byte("event: done")) {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the stream ended without done")
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
