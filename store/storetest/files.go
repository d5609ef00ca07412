package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func newFile(owner, session, sha string, size int64, at time.Time) *parley.File {
	return &parley.File{ID: parley.NewID(), Owner: owner, SessionID: session, Name: "f-" + sha[:4] + ".txt", Size: size,
		SHA256: sha, MediaType: "text/plain; charset=utf-8", CreatedAt: at}
}

func sha(c byte) string { return strings.Repeat(string(c), 64) }

func testFiles(t *testing.T, s parley.Store) {
	sess := newSession(t, s, "alice", base)
	other := newSession(t, s, "alice", base)
	a := newFile("alice", sess.ID, sha('a'), 10, base)
	b := newFile("alice", sess.ID, sha('a'), 10, base.Add(time.Second)) // same bytes: one blob, two files
	c := newFile("alice", "", sha('c'), 7, base.Add(2*time.Second))     // in no session yet
	for _, f := range []*parley.File{a, b, c} {
		if err := s.CreateFile(ctx, f, 0); err != nil {
			t.Fatalf("CreateFile: %v", err)
		}
	}
	got, err := s.GetFile(ctx, a.ID)
	if err != nil || *got != *a {
		t.Fatalf("GetFile = %+v, %v; want %+v", got, err, a)
	}
	if _, err := s.GetFile(ctx, parley.NewID()); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("GetFile of an unknown id: %v", err)
	}
	if err := s.CreateFile(ctx, newFile("alice", parley.NewID(), sha('d'), 1, base), 0); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("CreateFile in an unknown session: %v", err)
	}
	list, err := s.ListSessionFiles(ctx, sess.ID, "", 10)
	if err != nil || len(list) != 2 || list[0].ID != a.ID || list[1].ID != b.ID {
		t.Fatalf("ListSessionFiles = %+v, %v", list, err)
	}
	if page, err := s.ListSessionFiles(ctx, sess.ID, a.ID, 10); err != nil || len(page) != 1 || page[0].ID != b.ID {
		t.Fatalf("ListSessionFiles after a: %+v, %v", page, err)
	}
	if page, err := s.ListSessionFiles(ctx, sess.ID, "", 1); err != nil || len(page) != 1 || page[0].ID != a.ID {
		t.Fatalf("ListSessionFiles limit 1: %+v, %v", page, err)
	}
	if n, err := s.FileBytes(ctx, "alice"); err != nil || n != 27 {
		t.Fatalf("FileBytes = %d, %v", n, err)
	}
	if n, err := s.FileBytes(ctx, "bob"); err != nil || n != 0 {
		t.Fatalf("FileBytes of bob = %d, %v", n, err)
	}
	if n, err := s.BlobRefs(ctx, sha('a')); err != nil || n != 2 {
		t.Fatalf("BlobRefs = %d, %v", n, err)
	}

	// Attaching: a file in no session joins one; one already in a session stays there.
	if err := s.AttachFile(ctx, c.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.AttachFile(ctx, a.ID, other.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetFile(ctx, c.ID); got.SessionID != other.ID {
		t.Fatalf("attached file in session %q", got.SessionID)
	}
	if got, _ := s.GetFile(ctx, a.ID); got.SessionID != sess.ID {
		t.Fatalf("a file in a session moved to %q", got.SessionID)
	}
	if err := s.AttachFile(ctx, parley.NewID(), other.ID); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("AttachFile of an unknown file: %v", err)
	}
	if err := s.AttachFile(ctx, c.ID, parley.NewID()); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("AttachFile to an unknown session: %v", err)
	}

	// Deleting one file of a shared blob leaves the other reference.
	if err := s.DeleteFile(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteFile(ctx, a.ID); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("DeleteFile twice: %v", err)
	}
	if n, _ := s.BlobRefs(ctx, sha('a')); n != 1 {
		t.Fatalf("BlobRefs after one delete = %d", n)
	}
	// Deleting a session deletes its files.
	if err := s.DeleteSession(ctx, sess.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetFile(ctx, b.ID); !errors.Is(err, parley.ErrNotFound) {
		t.Fatalf("a file of a deleted session: %v", err)
	}
	if n, _ := s.BlobRefs(ctx, sha('a')); n != 0 {
		t.Fatalf("BlobRefs after the session went = %d", n)
	}
	if _, err := s.GetFile(ctx, c.ID); err != nil {
		t.Fatalf("a file of another session: %v", err)
	}
}

func testFileQuota(t *testing.T, s parley.Store) {
	if err := s.CreateFile(ctx, newFile("alice", "", sha('a'), 60, base), 100); err != nil {
		t.Fatal(err)
	}
	err := s.CreateFile(ctx, newFile("alice", "", sha('b'), 41, base), 100)
	if parley.CodeOf(err) != parley.ECQuota {
		t.Fatalf("over the quota: %v", err)
	}
	if err := s.CreateFile(ctx, newFile("alice", "", sha('b'), 40, base), 100); err != nil {
		t.Fatalf("up to the quota: %v", err)
	}
	if err := s.CreateFile(ctx, newFile("bob", "", sha('b'), 100, base), 100); err != nil {
		t.Fatalf("another owner's quota: %v", err)
	}
	if n, _ := s.FileBytes(ctx, "alice"); n != 100 {
		t.Fatalf("alice uses %d bytes", n)
	}
}

// testFileQuotaConcurrent: uploads of one owner racing for the last of the quota; no more of them
// than fit are stored.
func testFileQuotaConcurrent(t *testing.T, s parley.Store) {
	const n, size, quota = 8, 10, 35
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- s.CreateFile(ctx, newFile("alice", "", sha('e'), size, base), quota)
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case parley.CodeOf(err) != parley.ECQuota:
			t.Fatalf("CreateFile: %v", err)
		}
	}
	if used, _ := s.FileBytes(ctx, "alice"); ok != 3 || used != 30 {
		t.Fatalf("%d uploads stored, %d bytes, want 3 and 30", ok, used)
	}
}
