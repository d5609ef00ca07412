// Command restartbench measures how a restart after a crash with many runs left open goes: it
// stores the state a killed server leaves (n sessions, each with a user message and a run still
// leased to the instance), starts `parley serve` under that instance's name as a real process,
// and reports the time until it listens, until it has taken back every run, and until every run
// has ended, and how many error lines it logged, as a Markdown table.
//
//	go run ./bench/restartbench -n 200 -rounds 5
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/sqlite"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "restartbench:", err)
		os.Exit(1)
	}
}

type result struct {
	listen, takenBack, ended time.Duration
	errors                   int
}

func run() error {
	n := flag.Int("n", 200, "runs left open by the crash")
	rounds := flag.Int("rounds", 5, "restarts measured (each on a fresh database)")
	bin := flag.String("parley", "", "the parley binary (default: built from ./cmd/parley)")
	delay := flag.Duration("mock-token-delay", 5*time.Millisecond, "delay between the mock model's chunks")
	flag.Parse()
	dir, err := os.MkdirTemp("", "restartbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if *bin == "" {
		*bin = filepath.Join(dir, "parley")
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/parley").CombinedOutput(); err != nil {
			return fmt.Errorf("building parley: %v\n%s", err, out)
		}
	}
	var res []result
	for i := range *rounds {
		db := filepath.Join(dir, fmt.Sprintf("r%d.db", i))
		sessions, err := seed(db, *n)
		if err != nil {
			return err
		}
		r, err := restart(*bin, db, sessions, *delay)
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "round %d: listening %v, all taken back %v, all ended %v, %d error lines\n", i+1, r.listen, r.takenBack, r.ended, r.errors)
		res = append(res, r)
	}
	pick := func(f func(result) time.Duration) (med, worst time.Duration) {
		var d []time.Duration
		for _, r := range res {
			d = append(d, f(r))
		}
		slices.Sort(d)
		return d[len(d)/2], d[len(d)-1]
	}
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
	fmt.Printf("| %d open runs, %d restarts | median | worst |\n|---|---|---|\n", *n, *rounds)
	for _, row := range []struct {
		name string
		f    func(result) time.Duration
	}{
		{"start to listening", func(r result) time.Duration { return r.listen }},
		{"start to every run taken back", func(r result) time.Duration { return r.takenBack }},
		{"start to every run ended", func(r result) time.Duration { return r.ended }},
	} {
		med, worst := pick(row.f)
		fmt.Printf("| %s | %s | %s |\n", row.name, ms(med), ms(worst))
	}
	worstErrors := 0
	for _, r := range res {
		worstErrors = max(worstErrors, r.errors)
	}
	fmt.Printf("| error lines logged | | %d |\n", worstErrors)
	return nil
}

// seed stores what a server killed with n runs under way leaves behind, and returns the sessions.
func seed(db string, n int) ([]string, error) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var sessions []string
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	for i := range n {
		s := &parley.Session{ID: parley.NewID(), Title: fmt.Sprintf("run %d", i), Owner: "bench", CreatedAt: at, UpdatedAt: at}
		if err := st.CreateSession(ctx, s); err != nil {
			return nil, err
		}
		sessions = append(sessions, s.ID)
		r := &parley.RunRecord{ID: parley.NewID(), SessionID: s.ID, Owner: "bench", Instance: "bench",
			LeaseUntil: time.Now().Add(30 * time.Second), CreatedAt: at}
		u := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Say hello in a long sentence, please."), RunID: r.ID, CreatedAt: at}
		if err := st.AppendMessages(ctx, s.ID, u); err != nil {
			return nil, err
		}
		if err := st.CreateRun(ctx, r); err != nil {
			return nil, err
		}
	}
	return sessions, nil
}

// restart starts the server on db and times it: listening and taking back from its logs, the
// runs' ends from the database.
func restart(bin, db string, sessions []string, delay time.Duration) (result, error) {
	n := len(sessions)
	cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--db", db, "--instance-id", "bench",
		"--log-format", "json", "--mock-token-delay", delay.String())
	cmd.Env = append(os.Environ(), "OPENAI_API_KEY=", "ANTHROPIC_API_KEY=", "GEMINI_API_KEY=", "OPENAI_BASE_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	defer func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}()
	var r result
	taken := 0
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			lines <- sc.Text()
		}
		io.Copy(io.Discard, stderr)
	}()
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		return r, err
	}
	defer st.Close()
	poll := time.NewTicker(20 * time.Millisecond)
	defer poll.Stop()
	timeout := time.After(5 * time.Minute)
	for taken < n || r.ended == 0 || r.listen == 0 {
		select {
		case line, ok := <-lines:
			if !ok {
				return r, fmt.Errorf("parley exited: %d of %d runs taken back", taken, n)
			}
			var rec struct {
				Level string `json:"level"`
				Msg   string `json:"msg"`
			}
			json.Unmarshal([]byte(line), &rec)
			if os.Getenv("RESTARTBENCH_DEBUG") != "" {
				fmt.Fprintln(os.Stderr, line)
			}
			switch {
			case rec.Msg == "listening":
				r.listen = time.Since(start)
			case strings.HasPrefix(rec.Msg, "taking over a run"):
				if taken++; taken == n {
					r.takenBack = time.Since(start)
				}
			}
			if rec.Level == "ERROR" {
				r.errors++
			}
		case <-poll.C:
			if taken < n || r.ended != 0 {
				continue
			}
			running := 0
			for _, s := range sessions {
				if _, err := st.ActiveRun(context.Background(), s); err == nil {
					running++
				}
			}
			if running == 0 {
				r.ended = time.Since(start)
			}
		case <-timeout:
			return r, fmt.Errorf("timed out: %d of %d runs taken back", taken, n)
		}
	}
	return r, nil
}
