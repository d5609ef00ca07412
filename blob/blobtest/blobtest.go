// Package blobtest is the contract suite every parley.BlobStore passes.
package blobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parleyhq/parley"
)

// Harness is one fresh, empty store and what the suite needs to see behind it.
type Harness struct {
	Store parley.BlobStore
	// Leftovers lists what failed or finished uploads left behind in the store's own temporary
	// space (temporary files, temporary objects, incomplete multipart uploads). It must be empty
	// whenever no Put is running.
	Leftovers func(t *testing.T) []string
}

// Run runs the contract suite; newHarness returns a fresh, empty store for each subtest.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, newHarness(t)) })
	t.Run("Dedup", func(t *testing.T) { testDedup(t, newHarness(t)) })
	t.Run("Ranges", func(t *testing.T) { testRanges(t, newHarness(t)) })
	t.Run("SizeLimit", func(t *testing.T) { testSizeLimit(t, newHarness(t)) })
	t.Run("FailedSource", func(t *testing.T) { testFailedSource(t, newHarness(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, newHarness(t)) })
	t.Run("MissingAndInvalidKeys", func(t *testing.T) { testMissing(t, newHarness(t)) })
	t.Run("ConcurrentSameContent", func(t *testing.T) { testConcurrent(t, newHarness(t)) })
	t.Run("BigStreamed", func(t *testing.T) { testBig(t, newHarness(t)) })
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// Content returns n pseudo-random bytes from seed.
func Content(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24), byte(seed >> 32)})
	r.Read(b)
	return b
}

func keyOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func readAll(t *testing.T, s parley.BlobStore, key string) []byte {
	t.Helper()
	r, err := s.Open(ctx(t), key)
	if err != nil {
		t.Fatalf("Open(%s): %v", key, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s: %v", key, err)
	}
	if r.Size() != int64(len(b)) {
		t.Fatalf("Size() = %d, read %d bytes", r.Size(), len(b))
	}
	return b
}

func keys(t *testing.T, s parley.BlobStore) map[string]int64 {
	t.Helper()
	m := map[string]int64{}
	for info, err := range s.Keys(ctx(t)) {
		if err != nil {
			t.Fatalf("Keys: %v", err)
		}
		if _, dup := m[info.Key]; dup {
			t.Fatalf("Keys yielded %s twice", info.Key)
		}
		m[info.Key] = info.Size
	}
	return m
}

func noLeftovers(t *testing.T, h Harness) {
	t.Helper()
	if h.Leftovers == nil {
		return
	}
	if l := h.Leftovers(t); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

func put(t *testing.T, s parley.BlobStore, b []byte) parley.BlobInfo {
	t.Helper()
	info, err := s.Put(ctx(t), bytes.NewReader(b), 0)
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(b), err)
	}
	return info
}

func testRoundTrip(t *testing.T, h Harness) {
	s := h.Store
	want := map[string]int64{}
	for i, n := range []int{0, 1, 4096, 1<<20 + 3} {
		b := Content(uint64(i), n)
		info := put(t, s, b)
		if info.Key != keyOf(b) || info.Size != int64(n) {
			t.Fatalf("Put(%d bytes) = %+v, want key %s size %d", n, info, keyOf(b), n)
		}
		if got := readAll(t, s, info.Key); !bytes.Equal(got, b) {
			t.Fatalf("read back %d bytes differ from the %d put", len(got), n)
		}
		st, err := s.Stat(ctx(t), info.Key)
		if err != nil || st != info {
			t.Fatalf("Stat = %+v, %v; want %+v", st, err, info)
		}
		want[info.Key] = info.Size
	}
	if got := keys(t, s); !equalMaps(got, want) {
		t.Fatalf("Keys = %v, want %v", got, want)
	}
	noLeftovers(t, h)
}

func equalMaps(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func testDedup(t *testing.T, h Harness) {
	s := h.Store
	b := Content(7, 100<<10)
	a1 := put(t, s, b)
	a2, err := s.Put(ctx(t), iotestOneByte(bytes.NewReader(b)), 0) // the same bytes, read differently
	if err != nil {
		t.Fatal(err)
	}
	if a1 != a2 {
		t.Fatalf("two Puts of the same bytes: %+v and %+v", a1, a2)
	}
	if got := keys(t, s); len(got) != 1 || got[a1.Key] != a1.Size {
		t.Fatalf("Keys = %v, want the one blob %+v", got, a1)
	}
	if got := readAll(t, s, a1.Key); !bytes.Equal(got, b) {
		t.Fatal("content differs after the second Put")
	}
	noLeftovers(t, h)
}

// iotestOneByte reads in small odd pieces, so a store cannot rely on the reader's chunking.
func iotestOneByte(r io.Reader) io.Reader { return &smallReader{r: r} }

type smallReader struct {
	r io.Reader
	i int
}

func (s *smallReader) Read(p []byte) (int, error) {
	s.i++
	n := 1 + s.i%4093
	if len(p) > n {
		p = p[:n]
	}
	return s.r.Read(p)
}

func testRanges(t *testing.T, h Harness) {
	s := h.Store
	b := Content(3, 300_001)
	info := put(t, s, b)

	r, err := s.Open(ctx(t), info.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, tc := range []struct {
		off    int64
		whence int
		at     int64 // the expected absolute offset
		n      int
	}{
		{1000, io.SeekStart, 1000, 500},
		{-10, io.SeekEnd, int64(len(b)) - 10, 10},
		{0, io.SeekStart, 0, 3},
		{200_000, io.SeekStart, 200_000, 65_536},
		{-100_000, io.SeekCurrent, 200_000 + 65_536 - 100_000, 7},
	} {
		pos, err := r.Seek(tc.off, tc.whence)
		if err != nil || pos != tc.at {
			t.Fatalf("Seek(%d, %d) = %d, %v; want %d", tc.off, tc.whence, pos, err, tc.at)
		}
		got := make([]byte, tc.n)
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatalf("reading %d bytes at %d: %v", tc.n, tc.at, err)
		}
		if !bytes.Equal(got, b[tc.at:tc.at+int64(tc.n)]) {
			t.Fatalf("bytes at %d differ", tc.at)
		}
	}
	// Reading past the end is EOF.
	if _, err := r.Seek(0, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
		t.Fatalf("Read at the end = %d, %v; want 0, EOF", n, err)
	}

	// What the files API will do: http.ServeContent with a Range header.
	r2, err := s.Open(ctx(t), info.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Range", "bytes=100000-100099")
	rec := httptest.NewRecorder()
	http.ServeContent(rec, req, "", time.Time{}, r2)
	if rec.Code != http.StatusPartialContent || !bytes.Equal(rec.Body.Bytes(), b[100000:100100]) {
		t.Fatalf("ServeContent with a Range: status %d, %d bytes", rec.Code, rec.Body.Len())
	}
}

func testSizeLimit(t *testing.T, h Harness) {
	s := h.Store
	b := Content(11, 64<<10)
	_, err := s.Put(ctx(t), bytes.NewReader(b), int64(len(b))-1)
	if parley.CodeOf(err) != parley.ECTooLarge {
		t.Fatalf("Put over the limit: %v, want code %s", err, parley.ECTooLarge)
	}
	if !strings.Contains(parley.MessageOf(err), "65535") {
		t.Fatalf("the message %q does not name the limit", parley.MessageOf(err))
	}
	if got := keys(t, s); len(got) != 0 {
		t.Fatalf("a Put over the limit stored %v", got)
	}
	if _, err := s.Stat(ctx(t), keyOf(b)); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Stat after a Put over the limit: %v", err)
	}
	noLeftovers(t, h)

	// A Put over the limit stops reading soon after the limit: it does not drain an endless source.
	src := &countingReader{r: endless{}}
	_, err = s.Put(ctx(t), src, 1<<20)
	if parley.CodeOf(err) != parley.ECTooLarge {
		t.Fatalf("Put of an endless source: %v", err)
	}
	if src.n > 64<<20 {
		t.Fatalf("read %d bytes of an endless source with a 1 MiB limit", src.n)
	}
	noLeftovers(t, h)

	// Exactly the limit is fine.
	info, err := s.Put(ctx(t), bytes.NewReader(b), int64(len(b)))
	if err != nil || info.Key != keyOf(b) {
		t.Fatalf("Put of exactly the limit: %+v, %v", info, err)
	}
	noLeftovers(t, h)
}

type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

type failingReader struct {
	r     io.Reader
	after int64
	err   error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if f.after <= 0 {
		return 0, f.err
	}
	if int64(len(p)) > f.after {
		p = p[:f.after]
	}
	n, err := f.r.Read(p)
	f.after -= int64(n)
	return n, err
}

func testFailedSource(t *testing.T, h Harness) {
	s := h.Store
	b := Content(12, 12<<20)
	boom := errors.New("the client went away")
	_, err := s.Put(ctx(t), &failingReader{r: bytes.NewReader(b), after: 7 << 20, err: boom}, 0)
	if err == nil {
		t.Fatal("Put from a failing reader succeeded")
	}
	// A cancelled context stops a Put whose source never ends.
	c, cancel := context.WithCancel(ctx(t))
	cr := &cancelAfter{r: endless{}, after: 9 << 20, cancel: cancel}
	if _, err := s.Put(c, cr, 0); err == nil {
		t.Fatal("Put with a cancelled context succeeded")
	}
	if got := keys(t, s); len(got) != 0 {
		t.Fatalf("failed Puts stored %v", got)
	}
	noLeftovers(t, h)
}

type cancelAfter struct {
	r      io.Reader
	after  int64
	cancel func()
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.after -= int64(n)
	if c.after <= 0 {
		c.cancel()
	}
	return n, err
}

func testDelete(t *testing.T, h Harness) {
	s := h.Store
	a := put(t, s, Content(20, 5000))
	b := put(t, s, Content(21, 6000))
	if err := s.Delete(ctx(t), a.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx(t), a.Key); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Open after Delete: %v", err)
	}
	if _, err := s.Stat(ctx(t), a.Key); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Stat after Delete: %v", err)
	}
	if err := s.Delete(ctx(t), a.Key); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("second Delete: %v", err)
	}
	if got := keys(t, s); len(got) != 1 || got[b.Key] != b.Size {
		t.Fatalf("Keys after Delete = %v, want only %s", got, b.Key)
	}
	// The same bytes can be put again.
	if again := put(t, s, Content(20, 5000)); again != a {
		t.Fatalf("Put after Delete = %+v, want %+v", again, a)
	}
	if got := readAll(t, s, a.Key); !bytes.Equal(got, Content(20, 5000)) {
		t.Fatal("content differs after Put, Delete, Put")
	}
}

func testMissing(t *testing.T, h Harness) {
	s := h.Store
	missing := keyOf([]byte("never stored"))
	if _, err := s.Open(ctx(t), missing); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Open(missing): %v", err)
	}
	if _, err := s.Stat(ctx(t), missing); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Stat(missing): %v", err)
	}
	if err := s.Delete(ctx(t), missing); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("Delete(missing): %v", err)
	}
	for _, key := range []string{
		"", "../../../etc/passwd", strings.ToUpper(missing), missing[:63], missing + "0",
		"../" + missing[3:], missing[:62] + "/x", "tmp/" + missing[4:],
	} {
		if _, err := s.Open(ctx(t), key); parley.CodeOf(err) != parley.ECInvalid {
			t.Errorf("Open(%q): %v, want %s", key, err, parley.ECInvalid)
		}
		if _, err := s.Stat(ctx(t), key); parley.CodeOf(err) != parley.ECInvalid {
			t.Errorf("Stat(%q): %v, want %s", key, err, parley.ECInvalid)
		}
		if err := s.Delete(ctx(t), key); parley.CodeOf(err) != parley.ECInvalid {
			t.Errorf("Delete(%q): %v, want %s", key, err, parley.ECInvalid)
		}
	}
}

func testConcurrent(t *testing.T, h Harness) {
	s := h.Store
	b := Content(30, 3<<20+17)
	const n = 6
	var wg sync.WaitGroup
	infos := make([]parley.BlobInfo, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			infos[i], errs[i] = s.Put(ctx(t), iotestOneByte(bytes.NewReader(b)), 0)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || infos[i].Key != keyOf(b) || infos[i].Size != int64(len(b)) {
			t.Fatalf("Put %d: %+v, %v", i, infos[i], errs[i])
		}
	}
	if got := keys(t, s); len(got) != 1 {
		t.Fatalf("Keys after concurrent Puts of one content = %v, want one", got)
	}
	if got := readAll(t, s, keyOf(b)); !bytes.Equal(got, b) {
		t.Fatal("content differs after concurrent Puts")
	}
	noLeftovers(t, h)
}

// BigSize is the size of the streamed Put of BigStreamed.
const BigSize = 64 << 20

// heapProbe is a generated source of BigSize bytes that measures the live heap (after a GC) every
// few MiB it hands out: if the store kept what it read, the live heap would grow with it.
type heapProbe struct {
	rng       *rand.ChaCha8
	left      int64
	sinceGC   int64
	base      uint64
	peak      uint64
	h         hashWriter
	probeEach int64
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func (p *heapProbe) Read(b []byte) (int, error) {
	if p.left == 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	p.rng.Read(b)
	p.h.Write(b)
	p.left -= int64(len(b))
	p.sinceGC += int64(len(b))
	if p.sinceGC >= p.probeEach {
		p.sinceGC = 0
		if h := liveHeap(); h > p.peak {
			p.peak = h
		}
	}
	return len(b), nil
}

func testBig(t *testing.T, h Harness) {
	if testing.Short() {
		t.Skip("a 64 MiB Put: skipped with -short")
	}
	s := h.Store
	p := &heapProbe{rng: rand.NewChaCha8([32]byte{42}), left: BigSize, h: sha256.New(), probeEach: 8 << 20}
	p.base = liveHeap()
	info, err := s.Put(ctx(t), p, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := hex.EncodeToString(p.h.Sum(nil))
	if info.Key != want || info.Size != BigSize {
		t.Fatalf("Put = %+v, want %s, %d", info, want, int64(BigSize))
	}
	// Loose bound: a store that buffers the content would hold at least 56 MiB by the last probe;
	// a streaming one holds its copy buffer (or one multipart part).
	growth := int64(p.peak) - int64(p.base)
	t.Logf("live heap: %d KiB before, %d KiB at the peak while putting %d MiB", p.base>>10, p.peak>>10, BigSize>>20)
	if growth > 24<<20 {
		t.Fatalf("the live heap grew by %d MiB during a %d MiB Put: the store buffers the upload", growth>>20, BigSize>>20)
	}
	// Read it back streaming and compare hashes.
	r, err := s.Open(ctx(t), info.Key)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	hh := sha256.New()
	if n, err := io.Copy(hh, r); err != nil || n != BigSize {
		t.Fatalf("reading back: %d bytes, %v", n, err)
	}
	if hex.EncodeToString(hh.Sum(nil)) != want {
		t.Fatal("the big blob reads back different")
	}
	noLeftovers(t, h)
}
