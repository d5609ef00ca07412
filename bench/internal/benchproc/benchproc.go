// Package benchproc starts and measures the server processes the benchmark programs under bench/
// drive: a child process that announces its listening address on stderr, stopped as SIGINT
// would, and its memory read from /proc.
package benchproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Proc is a child process that announced its listening address.
type Proc struct {
	Cmd *exec.Cmd
	URL string // http://host:port
}

var listenRE = regexp.MustCompile(`msg=listening.*?addr=([0-9.]+:[0-9]+)`)

// Start runs bin with args and waits (30 s at most) for its "listening" log line.
func Start(ctx context.Context, bin string, args ...string) (*Proc, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	found := make(chan string, 1)
	go func() { // ends with the process's stderr
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case found <- m[1]:
				default:
				}
			}
		}
	}()
	select {
	case addr := <-found:
		return &Proc{Cmd: cmd, URL: "http://" + addr}, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%s %s did not start", bin, args[0])
	}
}

// Stop interrupts the process and waits for it, killing it after 10 s.
func (p *Proc) Stop() {
	_ = p.Cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.Cmd.Process.Kill()
	}
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
