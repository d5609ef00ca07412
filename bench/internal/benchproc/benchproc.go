// Package benchproc starts and measures the server processes the benchmark programs under bench/
// drive: a child process that announces its listening address on stderr, stopped as SIGINT
// would, its log lines watched, and its memory and CPU time read from /proc.
package benchproc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is a child process that announced its listening address.
type Proc struct {
	Cmd *exec.Cmd
	URL string // http://host:port

	done chan struct{} // closed when the process has exited
	once sync.Once

	mu   sync.Mutex
	tail []string // its last log lines, for an error at start
}

// Options are what Start needs beyond the command line; the zero value is fine.
type Options struct {
	Env    []string     // added to this process's environment
	Log    io.Writer    // receives every line the process writes to stderr
	OnLine func(string) // called with every stderr line, in order, from one goroutine
	// Ready, when set, replaces the "listening" log line as the sign that the process has
	// started: it is called with every line until it returns a non-empty address (host:port).
	Ready func(line string) string
}

var listenRE = regexp.MustCompile(`msg=listening.*?addr=([0-9.]+:[0-9]+)`)

// ListenAddr returns the address of a "listening" log line of Parley's, or "".
func ListenAddr(line string) string {
	if m := listenRE.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

// Start runs bin with args and waits (30 s at most) for its "listening" log line.
func Start(ctx context.Context, bin string, args ...string) (*Proc, error) {
	return StartWith(ctx, Options{}, bin, args...)
}

// StartWith runs bin with args as Options say and waits (30 s at most) until it has started. The
// child is killed if this process dies.
func StartWith(ctx context.Context, o Options, bin string, args ...string) (*Proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Proc{Cmd: cmd, done: make(chan struct{})}
	ready := o.Ready
	if ready == nil {
		ready = ListenAddr
	}
	found := make(chan string, 1)
	read := make(chan struct{})
	go func() { // ends with the process's stderr
		defer close(read)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		started := false
		for sc.Scan() {
			line := sc.Text()
			if o.Log != nil {
				fmt.Fprintln(o.Log, line)
			}
			if o.OnLine != nil {
				o.OnLine(line)
			}
			p.mu.Lock()
			if p.tail = append(p.tail, line); len(p.tail) > 5 {
				p.tail = p.tail[1:]
			}
			p.mu.Unlock()
			if !started {
				if addr := ready(line); addr != "" {
					started = true
					found <- addr
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderr) // a line longer than the scanner's bound
	}()
	go func() { <-read; _ = cmd.Wait(); close(p.done) }()
	select {
	case addr := <-found:
		p.URL = "http://" + addr
		return p, nil
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, fmt.Errorf("%s %s exited at start:\n%s", filepath.Base(bin), first(args), strings.Join(p.tail, "\n"))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("%s %s did not start within 30 s", filepath.Base(bin), first(args))
	}
}

func first(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Stop interrupts the process and waits for it, killing it after 15 s. It may be called again.
func (p *Proc) Stop() {
	p.once.Do(func() {
		_ = p.Cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.Cmd.Process.Kill()
			<-p.done
		}
	})
}

// Build builds ./cmd/parley (run from the repository's root) into dir and returns its path.
func Build(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "parley")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/parley")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building parley: %w", err)
	}
	return bin, nil
}

// RSS reads one of a process's memory figures (VmRSS:, VmHWM:) from /proc, in bytes.
func RSS(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, field) {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New(field + " not found")
}

// CPU is the user and system CPU time a process has used, from /proc/<pid>/stat (in clock ticks
// of 1/100 s, Linux's USER_HZ).
func CPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("malformed /proc/<pid>/stat")
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, errors.New("malformed /proc/<pid>/stat")
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond, nil
}

// RaiseFDLimit sets the soft limit of open files to at least need, raising the hard limit when
// this process may (root), and fails when the result is below need. Children inherit the limit
// (Go's own raise at start is not passed on to them).
func RaiseFDLimit(need uint64) (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	want := syscall.Rlimit{Cur: max(l.Max, need), Max: max(l.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: l.Max, Max: l.Max} // without privilege: up to the hard limit
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
			return 0, err
		}
	}
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, err
	}
	if l.Cur < need {
		return l.Cur, fmt.Errorf("open files limit %d, need %d: raise the hard limit (ulimit -Hn) or run as root", l.Cur, need)
	}
	return l.Cur, nil
}

// Verdict is "PASS" or "FAIL".
func Verdict(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
