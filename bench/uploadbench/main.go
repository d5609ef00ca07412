// Command uploadbench measures POST /api/v1/files: it starts `parley serve` as a real process (disk
// blob store), streams one file of each given size to it as multipart (generated on the fly, never
// held whole by the client either), and reports the throughput and the server's memory while it
// uploads: its resident size before, sampled every 50 ms during the upload (at each quarter of the
// bytes sent, and the largest), and its peak (VmHWM). It checks the server's SHA-256 against the
// client's. Output: a Markdown table.
//
//	go run ./bench/uploadbench -sizes 256M,1G
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parleyhq/parley/bench/internal/benchproc"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "uploadbench:", err)
		os.Exit(1)
	}
}

type result struct {
	size                int64
	elapsed             time.Duration
	before, max, hwm    int64
	quarters            [4]int64
	stored              string
	serverSHA, localSHA string
}

func run() error {
	sizes := flag.String("sizes", "256M,1G", "file sizes to upload, one upload each (K, M, G suffixes: powers of 1024)")
	bin := flag.String("parley", "", "the parley binary (default: built from ./cmd/parley)")
	dirFlag := flag.String("dir", "", "directory for the database and blobs (default: a temporary one, removed after)")
	flag.Parse()
	dir := *dirFlag
	if dir == "" {
		d, err := os.MkdirTemp("", "uploadbench")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	ctx := context.Background()
	if *bin == "" {
		*bin = filepath.Join(dir, "parley")
		if out, err := exec.Command("go", "build", "-o", *bin, "./cmd/parley").CombinedOutput(); err != nil {
			return fmt.Errorf("building parley: %v\n%s", err, out)
		}
	}
	var res []result
	for i, s := range strings.Split(*sizes, ",") {
		size, err := parseSize(s)
		if err != nil {
			return err
		}
		db := filepath.Join(dir, fmt.Sprintf("u%d.db", i))
		srv, err := benchproc.Start(ctx, *bin, "serve", "--addr", "127.0.0.1:0", "--db", db, "--max-file-bytes", strconv.FormatInt(size+1, 10),
			"--file-quota-bytes", "0")
		if err != nil {
			return err
		}
		r, err := measure(srv, size)
		srv.Stop()
		os.RemoveAll(db + ".data")
		if err != nil {
			return err
		}
		res = append(res, r)
	}
	fmt.Println("| file | time | throughput | server RSS before | RSS at 25% / 50% / 75% / 100% of the bytes | largest RSS sampled | peak (VmHWM) | SHA-256 matches |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range res {
		fmt.Printf("| %s | %.1f s | %.0f MB/s | %s | %s / %s / %s / %s | %s | %s | %v |\n", human(r.size), r.elapsed.Seconds(),
			float64(r.size)/1e6/r.elapsed.Seconds(), human(r.before), human(r.quarters[0]), human(r.quarters[1]), human(r.quarters[2]),
			human(r.quarters[3]), human(r.max), human(r.hwm), r.serverSHA == r.localSHA)
	}
	return nil
}

func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	mult := int64(1)
	for suf, m := range map[string]int64{"K": 1 << 10, "M": 1 << 20, "G": 1 << 30} {
		if strings.HasSuffix(s, suf) {
			mult, s = m, strings.TrimSuffix(s, suf)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q", s)
	}
	return n * mult, nil
}

func human(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	default:
		return fmt.Sprintf("%d KiB", b>>10)
	}
}

// source yields size pseudo-random bytes, hashing them and counting what was read.
type source struct {
	rng  *rand.ChaCha8
	left int64
	sent *atomic.Int64
	h    hash.Hash
}

func (s *source) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	s.rng.Read(p)
	s.h.Write(p)
	s.left -= int64(len(p))
	s.sent.Add(int64(len(p)))
	return len(p), nil
}

func measure(srv *benchproc.Proc, size int64) (result, error) {
	r := result{size: size}
	pid := srv.Cmd.Process.Pid
	var err error
	if r.before, err = benchproc.RSS(pid, "VmRSS:"); err != nil {
		return r, err
	}
	var sent atomic.Int64
	src := &source{rng: rand.NewChaCha8([32]byte{1}), left: size, sent: &sent, h: sha256.New()}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, err := mw.CreateFormFile("file", "big.bin")
		if err == nil {
			_, err = io.CopyBuffer(w, src, make([]byte, 256<<10))
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()

	// Sample the server's RSS while the upload runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		q := 0
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			v, err := benchproc.RSS(pid, "VmRSS:")
			if err != nil {
				continue
			}
			r.max = max(r.max, v)
			for q < 4 && sent.Load() >= size*int64(q+1)/4 {
				r.quarters[q] = v
				q++
			}
		}
	}()
	t0 := time.Now()
	req, _ := http.NewRequest("POST", srv.URL+"/api/v1/files", pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		close(stop)
		wg.Wait()
		return r, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.elapsed = time.Since(t0)
	close(stop)
	wg.Wait()
	if resp.StatusCode != 201 {
		return r, fmt.Errorf("upload: %d %s", resp.StatusCode, body)
	}
	var out struct {
		Files []struct {
			SHA256 string `json:"sha256"`
			Size   int64  `json:"size"`
		} `json:"files"`
	}
	if err := json.Unmarshal(body, &out); err != nil || len(out.Files) != 1 || out.Files[0].Size != size {
		return r, fmt.Errorf("upload answer: %s", body)
	}
	r.serverSHA, r.localSHA = out.Files[0].SHA256, hex.EncodeToString(src.h.Sum(nil))
	if r.quarters[3] == 0 { // the last quarter ended between samples
		r.quarters[3], _ = benchproc.RSS(pid, "VmRSS:")
	}
	r.hwm, err = benchproc.RSS(pid, "VmHWM:")
	return r, err
}
