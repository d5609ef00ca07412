package benchproc

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// childEnv makes the test binary act as a child process: it writes the value's lines to stderr,
// then waits to be interrupted ("wait") or exits with status 3 ("exit").
const childEnv = "BENCHPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		mode, lines, _ := strings.Cut(v, ":")
		for _, l := range strings.Split(lines, "|") {
			fmt.Fprintln(os.Stderr, l)
		}
		if mode == "exit" {
			os.Exit(3)
		}
		time.Sleep(time.Minute) // SIGINT ends it
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestStartWith: the child's address is read from its "listening" line, every line reaches Log
// and OnLine in order, and Stop ends it.
func TestStartWith(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	var log strings.Builder
	p, err := StartWith(context.Background(), Options{
		Env: []string{childEnv + "=wait:level=INFO msg=starting|level=INFO msg=listening addr=127.0.0.1:4242|level=WARN msg=after"},
		Log: &syncWriter{w: &log, mu: &mu},
		OnLine: func(l string) {
			mu.Lock()
			seen = append(seen, l)
			mu.Unlock()
		},
	}, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if p.URL != "http://127.0.0.1:4242" {
		t.Errorf("URL %q, want http://127.0.0.1:4242", p.URL)
	}
	if rss, err := RSS(p.Pid(), "VmRSS:"); err != nil || rss <= 0 {
		t.Errorf("RSS of the child: %d, %v", rss, err)
	}
	if _, err := CPU(p.Pid()); err != nil {
		t.Errorf("CPU of the child: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() { p.Stop(); p.Stop(); close(done) }() // a second Stop is harmless
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("Stop did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != "level=INFO msg=starting" || seen[2] != "level=WARN msg=after" {
		t.Errorf("OnLine saw %q", seen)
	}
	if !strings.Contains(log.String(), "msg=starting\n") || !strings.Contains(log.String(), "msg=after\n") {
		t.Errorf("Log got %q", log.String())
	}
}

// TestStartWithExitAtStart: a child that exits before it listens is an error that quotes its
// last lines.
func TestStartWithExitAtStart(t *testing.T) {
	_, err := StartWith(context.Background(), Options{Env: []string{childEnv + `=exit:level=ERROR msg="address in use"`}}, os.Args[0], "serve")
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "address in use") {
		t.Fatalf("err = %v, want an exit at start quoting the child's log", err)
	}
}

func TestVerdictAndListenAddr(t *testing.T) {
	if Verdict(true) != "PASS" || Verdict(false) != "FAIL" {
		t.Error("Verdict")
	}
	if a := ListenAddr(`time=x level=INFO msg=listening addr=127.0.0.1:80 instance=a`); a != "127.0.0.1:80" {
		t.Errorf("ListenAddr = %q", a)
	}
	if a := ListenAddr(`level=INFO msg="metrics listening" addr=127.0.0.1:81`); a != "" {
		t.Errorf("ListenAddr took the metrics line: %q", a)
	}
}

type syncWriter struct {
	w  *strings.Builder
	mu *sync.Mutex
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
