package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/blob/disk"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/store/sqlite"
)

var ctx = context.Background()

type fixture struct {
	svc   *Service
	store *sqlite.Store
	blobs *disk.Store
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bs, err := disk.Open(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store, cfg.Blobs = st, bs
	return &fixture{svc: New(cfg), store: st, blobs: bs}
}

func (fx *fixture) blobCount(t *testing.T) int {
	t.Helper()
	n := 0
	for _, err := range fx.blobs.Keys(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

func key(b []byte) string { h := sha256.Sum256(b); return hex.EncodeToString(h[:]) }

func TestSniff(t *testing.T) {
	latin1 := append(bytes.Repeat([]byte("plain ascii "), 100), 0xe9, ' ', 'x')
	cases := []struct {
		name string
		data []byte
		want string
	}{
		{"photo.txt", filestest.PNG(2, 2), "image/png"},
		{"evil.png", []byte("<!DOCTYPE html><html><script>alert(1)</script></html>"), "text/html; charset=utf-8"},
		{"doc.bin", filestest.PDF("x"), "application/pdf"},
		{"notes.md", []byte("# Title\n\nSome *text*.\n"), "text/markdown; charset=utf-8"},
		{"data.csv", []byte("a,b\n1,2\n"), "text/csv; charset=utf-8"},
		{"data.json", []byte(`{"a": [1, 2]}`), "application/json"},
		{"main.go", []byte("package main\n\nfunc main() {}\n"), "text/x-go; charset=utf-8"},
		{"old.txt", latin1, "application/octet-stream"},
		{"prog.go", []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00"), "application/octet-stream"},
		{"nul.txt", []byte("text with a \x00 NUL"), "application/octet-stream"},
	}
	for _, c := range cases {
		chk := &textCheck{}
		// Written in 7-byte pieces, so characters and the head are cut across writes.
		for i := 0; i < len(c.data); i += 7 {
			chk.Write(c.data[i:min(i+7, len(c.data))])
		}
		if got := Sniff(chk.head, chk.text(), c.name); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

func TestTextCheckAcrossWrites(t *testing.T) {
	s := []byte("héllo wörld — 日本語 🎉")
	for cut := 1; cut < len(s); cut++ {
		chk := &textCheck{}
		chk.Write(s[:cut])
		chk.Write(s[cut:])
		if !chk.text() {
			t.Fatalf("valid UTF-8 cut at %d judged not text", cut)
		}
	}
	for _, bad := range [][]byte{{0xe2, 0x82}, {'a', 0xe2, 'b'}, {0xff}, {0xc0, 0x80}} {
		chk := &textCheck{}
		chk.Write(bad[:1])
		chk.Write(bad[1:])
		if chk.text() {
			t.Fatalf("%x judged text", bad)
		}
	}
}

func TestCleanName(t *testing.T) {
	long := strings.Repeat("é", 200) + ".txt"
	cases := map[string]string{
		"../../etc/passwd":       "passwd",
		`..\..\windows\win.ini`:  "win.ini",
		"a\x00b\nc\x1b[31m.txt":  "abc[31m.txt",
		"\u202egnp.exe":          "gnp.exe",
		"..":                     "file",
		"":                       "file",
		"  .hidden ":             "hidden",
		"report 2026.pdf":        "report 2026.pdf",
		"dir/":                   "file",
		"bad\xffutf8.txt":        "badutf8.txt",
		"/abs/path/to/notes.md":  "notes.md",
		"C:\\Users\\me\\cv.docx": "cv.docx",
	}
	for in, want := range cases {
		if got := CleanName(in); got != want {
			t.Errorf("CleanName(%q) = %q, want %q", in, got, want)
		}
	}
	got := CleanName(long)
	if len(got) > MaxNameBytes || !strings.HasSuffix(got, ".txt") || !strings.HasPrefix(got, "éé") || !utf8Valid(got) {
		t.Errorf("CleanName of a long name = %q (%d bytes)", got, len(got))
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }

func TestUploadStoresAndSniffs(t *testing.T) {
	fx := newFixture(t, Config{})
	sess := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: fixedNow, UpdatedAt: fixedNow}
	if err := fx.store.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	data := []byte("<html><body>hi</body></html>")
	f, err := fx.svc.Upload(ctx, "alice", sess.ID, "../x/page.png", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Name != "page.png" || f.MediaType != "text/html; charset=utf-8" || f.Size != int64(len(data)) || f.SHA256 != key(data) || f.SessionID != sess.ID {
		t.Fatalf("uploaded %+v", f)
	}
	got, err := fx.store.GetFile(ctx, f.ID)
	if err != nil || *got != *f {
		t.Fatalf("stored %+v %v", got, err)
	}
	rd, err := fx.svc.Open(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rd)
	rd.Close()
	if !bytes.Equal(b, data) {
		t.Fatal("content differs")
	}
	if _, err := fx.svc.Get(ctx, "bob", f.ID); parley.CodeOf(err) != parley.ECForbidden {
		t.Fatalf("bob gets alice's file: %v", err)
	}
	if _, err := fx.svc.Get(ctx, "alice", parley.NewID()); parley.CodeOf(err) != parley.ECNotFound {
		t.Fatalf("unknown file: %v", err)
	}
}

func TestUploadLimits(t *testing.T) {
	fx := newFixture(t, Config{MaxFileBytes: 100, Quota: 150})
	_, err := fx.svc.Upload(ctx, "alice", "", "big.bin", bytes.NewReader(make([]byte, 101)))
	if parley.CodeOf(err) != parley.ECTooLarge || !strings.Contains(err.Error(), "limit of 100 bytes") {
		t.Fatalf("101 bytes over a 100-byte limit: %v", err)
	}
	if n := fx.blobCount(t); n != 0 {
		t.Fatalf("%d blobs after a refused upload", n)
	}
	if _, err := fx.svc.Upload(ctx, "alice", "", "a", bytes.NewReader(bytes.Repeat([]byte("a"), 100))); err != nil {
		t.Fatal(err)
	}
	_, err = fx.svc.Upload(ctx, "alice", "", "b", bytes.NewReader(bytes.Repeat([]byte("b"), 60)))
	if parley.CodeOf(err) != parley.ECQuota || !strings.Contains(err.Error(), "quota of 150 bytes") {
		t.Fatalf("over the quota: %v", err)
	}
	if _, err := fx.svc.Upload(ctx, "alice", "", "c", bytes.NewReader(bytes.Repeat([]byte("c"), 50))); err != nil {
		t.Fatalf("up to the quota: %v", err)
	}
	if _, err := fx.svc.Upload(ctx, "alice", "", "d", strings.NewReader("d")); parley.CodeOf(err) != parley.ECQuota {
		t.Fatalf("a full quota: %v", err)
	}
	if _, err := fx.svc.Upload(ctx, "alice", "", "empty", strings.NewReader("")); err != nil {
		t.Fatalf("an empty file with a full quota: %v", err)
	}
	if _, err := fx.svc.Upload(ctx, "bob", "", "b", bytes.NewReader(bytes.Repeat([]byte("b"), 60))); err != nil {
		t.Fatalf("bob's own quota: %v", err)
	}
	if n := fx.blobCount(t); n != 4 { // a, c, empty, bob's b
		t.Fatalf("%d blobs, want 4", n)
	}
}

func TestSharedBlobCollectedWithLastFile(t *testing.T) {
	fx := newFixture(t, Config{})
	data := []byte("the same bytes")
	a, err := fx.svc.Upload(ctx, "alice", "", "a.txt", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b, err := fx.svc.Upload(ctx, "bob", "", "b.txt", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if fx.blobCount(t) != 1 {
		t.Fatal("two files of the same bytes should share one blob")
	}
	if err := fx.svc.Delete(ctx, "bob", a.ID); parley.CodeOf(err) != parley.ECForbidden {
		t.Fatalf("bob deletes alice's file: %v", err)
	}
	if err := fx.svc.Delete(ctx, "alice", a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.blobs.Stat(ctx, key(data)); err != nil {
		t.Fatalf("the blob bob's file still uses: %v", err)
	}
	if err := fx.svc.Delete(ctx, "bob", b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.blobs.Stat(ctx, key(data)); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("the blob after its last file: %v", err)
	}
}

// TestCollectionDuringUpload: a collection of the same bytes falls between an upload's Put and its
// row (the blob existed, its last file was deleted). The upload must not be acknowledged without
// its bytes.
func TestCollectionDuringUpload(t *testing.T) {
	fx := newFixture(t, Config{})
	data := []byte("contested bytes")
	first, err := fx.svc.Upload(ctx, "alice", "", "a.txt", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	fx.svc.afterPut = func(string) {
		fx.svc.afterPut = nil
		if err := fx.svc.Delete(ctx, "alice", first.ID); err != nil {
			t.Error(err)
		}
	}
	f, err := fx.svc.Upload(ctx, "alice", "", "b.txt", bytes.NewReader(data))
	if err == nil {
		if _, serr := fx.blobs.Stat(ctx, f.SHA256); serr != nil {
			t.Fatalf("an acknowledged upload has no bytes: %v", serr)
		}
		return
	}
	if parley.CodeOf(err) != parley.ECUnavailable {
		t.Fatalf("upload: %v", err)
	}
	if n, _ := fx.store.BlobRefs(ctx, key(data)); n != 0 {
		t.Fatalf("a refused upload left %d rows", n)
	}
	// Sent again, it is stored.
	f, err = fx.svc.Upload(ctx, "alice", "", "b.txt", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fx.blobs.Stat(ctx, f.SHA256); err != nil {
		t.Fatal(err)
	}
}

func TestSweep(t *testing.T) {
	fx := newFixture(t, Config{})
	sess := &parley.Session{ID: parley.NewID(), Owner: "alice", CreatedAt: fixedNow, UpdatedAt: fixedNow}
	if err := fx.store.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	keep, _ := fx.svc.Upload(ctx, "alice", "", "keep.txt", strings.NewReader("keep"))
	gone, _ := fx.svc.Upload(ctx, "alice", sess.ID, "gone.txt", strings.NewReader("gone"))
	keys, err := fx.svc.SessionBlobs(ctx, sess.ID)
	if err != nil || len(keys) != 1 || keys[0] != gone.SHA256 {
		t.Fatalf("SessionBlobs = %v %v", keys, err)
	}
	if err := fx.store.DeleteSession(ctx, sess.ID); err != nil { // the row goes with the session
		t.Fatal(err)
	}
	n, err := fx.svc.Sweep(ctx)
	if err != nil || n != 1 {
		t.Fatalf("Sweep = %d %v", n, err)
	}
	if _, err := fx.blobs.Stat(ctx, gone.SHA256); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("the swept blob: %v", err)
	}
	if _, err := fx.blobs.Stat(ctx, keep.SHA256); err != nil {
		t.Fatalf("the kept blob: %v", err)
	}
}

func TestExtractPDFText(t *testing.T) {
	p := filestest.PDF("Quarterly revenue grew", "by 12 percent")
	text, cut, err := ExtractPDFText(bytes.NewReader(p), int64(len(p)), 1000)
	if err != nil || cut || !strings.Contains(text, "Quarterly revenue grew") || !strings.Contains(text, "by 12 percent") {
		t.Fatalf("%q %v %v", text, cut, err)
	}
	text, cut, err = ExtractPDFText(bytes.NewReader(p), int64(len(p)), 10)
	if err != nil || !cut || len(text) > 10 {
		t.Fatalf("budget 10: %q %v %v", text, cut, err)
	}
	bad := []byte("%PDF-1.4\n1 0 obj << /Type /Catalog garbage")
	if _, _, err := ExtractPDFText(bytes.NewReader(bad), int64(len(bad)), 1000); err == nil {
		t.Fatal("a malformed PDF gave no error")
	}
}
