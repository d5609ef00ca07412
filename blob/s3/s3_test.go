package s3

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7"
	"github.com/parleyhq/parley/blob/blobtest"
)

// The S3-compatible server is gofakes3, run by this test binary as a child process: its objects do
// not count in the heap of the process under test, so the suite's streaming check measures only the
// client side.

const (
	fakeChildEnv = "PARLEY_FAKES3_CHILD"
	testBucket   = "parley"
)

func TestMain(m *testing.M) {
	if os.Getenv(fakeChildEnv) != "" {
		serveFake()
		return
	}
	code := m.Run()
	stopFake()
	os.Exit(code)
}

// serveFake serves gofakes3 on a loopback port, prints the address, and exits when stdin closes
// (the parent ended, however it ended).
func serveFake() {
	backend := s3mem.New()
	if err := backend.CreateBucket(testBucket); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	srv := &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: time.Minute}
	go srv.Serve(ln)
	fmt.Println("listening", ln.Addr().String())
	io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

var fake struct {
	once sync.Once
	addr string
	err  error
	cmd  *exec.Cmd
	in   io.WriteCloser
}

// fakeAddr starts the child server once for the whole test binary.
func fakeAddr(t *testing.T) string {
	fake.once.Do(func() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fakeChildEnv+"=1")
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			fake.err = err
			return
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			fake.err = err
			return
		}
		if err := cmd.Start(); err != nil {
			fake.err = err
			return
		}
		fake.cmd, fake.in = cmd, in
		line := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(out)
			sc.Scan()
			line <- sc.Text()
			io.Copy(io.Discard, out)
		}()
		select {
		case l := <-line:
			addr, ok := strings.CutPrefix(l, "listening ")
			if !ok {
				fake.err = fmt.Errorf("the fake S3 server said %q", l)
				return
			}
			fake.addr = addr
		case <-time.After(time.Minute):
			fake.err = fmt.Errorf("the fake S3 server did not start within a minute")
		}
	})
	if fake.err != nil {
		t.Fatal(fake.err)
	}
	return fake.addr
}

func stopFake() {
	if fake.cmd != nil {
		fake.in.Close()
		done := make(chan struct{})
		go func() { fake.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			fake.cmd.Process.Kill()
			<-done
		}
	}
}

// newStore opens a store under a prefix of its own in the shared bucket.
func newStore(t *testing.T) *Store {
	var rnd [6]byte
	rand.Read(rnd[:])
	s, err := Open(t.Context(), Config{
		Endpoint:  fakeAddr(t),
		Bucket:    testBucket,
		Prefix:    "t-" + hex.EncodeToString(rnd[:]),
		AccessKey: "test",
		SecretKey: "test",
		Insecure:  true,
		PartSize:  minPartSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func leftovers(t *testing.T, s *Store) []string {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var out []string
	for obj := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.tmpPrefix(), Recursive: true}) {
		if obj.Err != nil {
			t.Fatal(obj.Err)
		}
		out = append(out, obj.Key)
	}
	for up := range s.c.ListIncompleteUploads(ctx, s.bucket, s.tmpPrefix(), true) {
		if up.Err != nil {
			t.Fatal(up.Err)
		}
		out = append(out, "upload "+up.Key)
	}
	return out
}

func TestContract(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Harness {
		s := newStore(t)
		return blobtest.Harness{Store: s, Leftovers: func(t *testing.T) []string { return leftovers(t, s) }}
	})
}

func TestLayout(t *testing.T) {
	s := newStore(t)
	b := bytes.Repeat([]byte("layout "), 1000)
	info, err := s.Put(t.Context(), bytes.NewReader(b), 0)
	if err != nil {
		t.Fatal(err)
	}
	obj, err := s.c.GetObject(t.Context(), s.bucket, s.prefix+"blobs/"+info.Key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	if got, err := io.ReadAll(obj); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("the blob is not at %sblobs/%s: %v", s.prefix, info.Key, err)
	}
}

func TestRemoveStaleTemp(t *testing.T) {
	s := newStore(t)
	// What a crashed Put leaves: a temporary object and an open multipart upload.
	if _, err := s.c.PutObject(t.Context(), s.bucket, s.tmpPrefix()+"crashed", bytes.NewReader([]byte("half")), 4, minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	core := minio.Core{Client: s.c}
	if _, err := core.NewMultipartUpload(t.Context(), s.bucket, s.tmpPrefix()+"crashed-multi", minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, s); len(got) != 2 {
		t.Fatalf("leftovers before = %v", got)
	}
	// Younger than the age: kept (another instance may be uploading).
	if n, err := s.RemoveStaleTemp(t.Context(), time.Hour); err != nil || n != 0 {
		t.Fatalf("RemoveStaleTemp(1h) = %d, %v; want 0", n, err)
	}
	if n, err := s.RemoveStaleTemp(t.Context(), -time.Minute); err != nil || n != 2 {
		t.Fatalf("RemoveStaleTemp(all) = %d, %v; want 2", n, err)
	}
	if got := leftovers(t, s); len(got) != 0 {
		t.Fatalf("leftovers after = %v", got)
	}
}
