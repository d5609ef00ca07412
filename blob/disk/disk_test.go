package disk

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parleyhq/parley/blob/blobtest"
)

func newHarness(t *testing.T) blobtest.Harness {
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return blobtest.Harness{Store: s, Leftovers: func(t *testing.T) []string {
		entries, err := os.ReadDir(filepath.Join(s.Dir(), tmpDir))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		return out
	}}
}

func TestContract(t *testing.T) { blobtest.Run(t, newHarness) }

func TestLayoutAndStrayFiles(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := []byte("hello, blob")
	info, err := s.Put(t.Context(), bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(dir, info.Key[:2], info.Key[2:4], info.Key)
	if got, err := os.ReadFile(want); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("the blob is not at %s: %v", want, err)
	}
	// Files that are not blobs where they belong are not listed.
	other := sha256.Sum256([]byte("elsewhere"))
	stray := hex.EncodeToString(other[:])
	os.WriteFile(filepath.Join(dir, stray), b, 0o600)
	os.WriteFile(filepath.Join(dir, info.Key[:2], info.Key[2:4], "notes.txt"), b, 0o600)
	n := 0
	for k, err := range s.Keys(t.Context()) {
		if err != nil || k.Key != info.Key {
			t.Fatalf("Keys yielded %+v, %v", k, err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("Keys yielded %d blobs, want 1", n)
	}
}

func TestOpenRemovesTemporaryFiles(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	left := filepath.Join(dir, tmpDir, "put-123")
	if err := os.WriteFile(left, []byte("half an upload"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(left); !os.IsNotExist(err) {
		t.Fatalf("the temporary file survived Open: %v", err)
	}
}

// The crash test. A child process (this test binary) puts blobs of known content into a directory
// and prints each key as soon as its Put returns; the parent SIGKILLs it while it writes, several
// times, then checks that every file under a blob name holds exactly the bytes of its name and that
// every acknowledged blob reads back byte-identical.

const crashChildEnv = "PARLEY_BLOB_CRASH_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashChildEnv); dir != "" {
		crashChild(dir)
		return
	}
	os.Exit(m.Run())
}

// crashSize is the size of the i-th blob of a child started with seed.
func crashSize(seed uint64, i int) int {
	r := rand.New(rand.NewPCG(seed, uint64(i)))
	return 1 + r.IntN(3<<20)
}

func crashContent(seed uint64, i int) []byte {
	return blobtest.Content(seed<<20|uint64(i), crashSize(seed, i))
}

// crashChild puts blobs until killed, printing "ok <i> <key>" after each.
func crashChild(dir string) {
	seed, _ := strconv.ParseUint(os.Getenv(crashChildEnv+"_SEED"), 10, 64)
	s, err := Open(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		b := crashContent(seed, i)
		// Small reads so that the kill lands in the middle of a file more often than not.
		info, err := s.Put(context.Background(), &chunked{r: bytes.NewReader(b), n: 8 << 10}, 0)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "ok %d %s\n", i, info.Key)
		out.Flush()
	}
}

type chunked struct {
	r io.Reader
	n int
}

func (c *chunked) Read(p []byte) (int, error) {
	if len(p) > c.n {
		p = p[:c.n]
	}
	return c.r.Read(p)
}

func TestCrashDuringUploads(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash test: skipped with -short")
	}
	dir := t.TempDir()
	acked := map[string][]byte{} // key → content
	const rounds = 16
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range rounds {
		seed := uint64(round + 1)
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), crashChildEnv+"="+dir, crashChildEnv+"_SEED="+strconv.FormatUint(seed, 10))
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill after a varying number of acknowledged Puts, so kills land at different points.
		killAfter := 2 + round%5
		sc := bufio.NewScanner(stdout)
		n := 0
		done := make(chan struct{})
		timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
		go func() {
			defer close(done)
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) != 3 || f[0] != "ok" {
					t.Errorf("child said %q", sc.Text())
					cmd.Process.Kill()
					continue
				}
				i, _ := strconv.Atoi(f[1])
				acked[f[2]] = crashContent(seed, i)
				n++
				if n == killAfter {
					// The child is already putting the next blob: kill it at a random point of that
					// Put (the delay only spreads the kill points; nothing waits on it).
					time.AfterFunc(time.Duration(rng.IntN(4000))*time.Microsecond, func() {
						cmd.Process.Signal(syscall.SIGKILL)
					})
				}
			}
		}()
		<-done
		timer.Stop()
		err = cmd.Wait()
		if n < killAfter {
			t.Fatalf("round %d: the child acknowledged %d Puts and ended (%v)", round, n, err)
		}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("round %d: the child ended with %v, not by SIGKILL", round, err)
		}
		checkBlobFiles(t, dir)
	}

	// Reopen (cleaning up temporary files) and read every acknowledged blob.
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range acked {
		r, err := s.Open(t.Context(), key)
		if err != nil {
			t.Fatalf("acknowledged blob %s: %v", key, err)
		}
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("acknowledged blob %s reads back %d bytes (%v), want %d identical", key, len(got), err, len(want))
		}
	}
	if left, _ := os.ReadDir(filepath.Join(dir, tmpDir)); len(left) != 0 {
		t.Fatalf("Open left %d temporary files", len(left))
	}
	t.Logf("%d rounds, %d acknowledged blobs", rounds, len(acked))
}

// checkBlobFiles hashes every file outside tmp/: each must hold exactly the bytes its name says.
func checkBlobFiles(t *testing.T, dir string) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == tmpDir && filepath.Dir(path) == dir {
				return fs.SkipDir
			}
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		if got := hex.EncodeToString(h.Sum(nil)); got != d.Name() {
			t.Errorf("%s holds bytes hashing to %s: a partial blob under a real name", path, got)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// BenchmarkPut measures Put throughput into a directory (fsync included) for a few sizes.
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s, err := Open(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			content := blobtest.Content(1, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Distinct content each time (dedup would skip the write): change the first bytes.
				i++
				binary.BigEndian.PutUint64(content, uint64(i))
				if _, err := s.Put(b.Context(), bytes.NewReader(content), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkWriteNoSync is the baseline for BenchmarkPut: the same bytes hashed and written to a new
// file, without fsync or rename. The difference is what durability costs.
func BenchmarkWriteNoSync(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20, 16 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			dir := b.TempDir()
			content := blobtest.Content(1, size)
			buf := make([]byte, 256<<10)
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				i++
				f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
				if err != nil {
					b.Fatal(err)
				}
				h := sha256.New()
				if _, err := io.CopyBuffer(io.MultiWriter(f, h), bytes.NewReader(content), buf); err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
		})
	}
}
