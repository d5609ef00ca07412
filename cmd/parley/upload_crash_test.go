package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// TestSIGKILLDuringUploads kills the server at random moments while several clients upload files
// (some with the same bytes), restarts it, and checks: every upload the server acknowledged
// (201) downloads byte-identical; every file row that exists (acknowledged or not) downloads bytes
// that hash to its sha256; and every blob on disk holds exactly the bytes its name says (no
// partial blob under a real name) and belongs to a file (the restart collects the blobs of uploads
// the kill cut before their row), with no temporary file left.
//
// PARLEY_CRASH_KILLS sets the number of kills (default 4; 2 with -short); PARLEY_CRASH_SEED replays.
func TestSIGKILLDuringUploads(t *testing.T) {
	kills := 4
	if testing.Short() {
		kills = 2
	}
	if v, err := strconv.Atoi(os.Getenv("PARLEY_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("PARLEY_CRASH_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (PARLEY_CRASH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	args := []string{"--db", filepath.Join(dir, "up.db"), "--data-dir", dataDir, "--rate-limit", "off", "--guest-rate-limit", "off",
		"--max-file-bytes", "16777216", "--file-quota-bytes", "0"}
	srv := startChild(t, args...)
	session := newSessionAt(t, srv.url)

	// A few shared contents, so that concurrent uploads of the same bytes meet.
	shared := make([][]byte, 3)
	for i := range shared {
		shared[i] = randomBytes(rng, 256<<10+rng.IntN(256<<10))
	}
	acked := map[string][]byte{} // file id → bytes
	var mu sync.Mutex
	for k := 0; k < kills; k++ {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var wg sync.WaitGroup
		for c := 0; c < 4; c++ {
			contents := make([][]byte, 6)
			for i := range contents {
				if rng.IntN(3) == 0 {
					contents[i] = shared[rng.IntN(len(shared))]
				} else {
					contents[i] = randomBytes(rng, 32<<10+rng.IntN(768<<10))
				}
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i, data := range contents {
					id, err := uploadOneFile(ctx, srv.url, session, "f"+strconv.Itoa(i)+".bin", data)
					if err != nil {
						return // the kill cut it: not acknowledged
					}
					mu.Lock()
					acked[id] = data
					mu.Unlock()
				}
			}()
		}
		time.Sleep(time.Duration(20+rng.IntN(300)) * time.Millisecond) // when to kill: random, not a synchronization
		srv.kill(t)
		wg.Wait()
		cancel()
		srv = startChild(t, args...)
		checkUploads(t, k, srv.url, session, dataDir, acked)
	}
	srv.kill(t)
	if len(acked) == 0 {
		t.Fatal("no upload was ever acknowledged: the kills all came too early to test anything")
	}
	t.Logf("%d kills, %d acknowledged files checked", kills, len(acked))
}

func randomBytes(rng *rand.Rand, n int) []byte {
	var seed [32]byte
	for i := range 4 {
		v := rng.Uint64()
		for j := range 8 {
			seed[i*8+j] = byte(v >> (8 * j))
		}
	}
	b := make([]byte, n)
	rand.NewChaCha8(seed).Read(b)
	return b
}

func newSessionAt(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Post(url+"/api/v1/sessions", "application/json", bytes.NewReader([]byte(`{"title":"uploads"}`)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s parley.Session
	if resp.StatusCode != 201 || json.NewDecoder(resp.Body).Decode(&s) != nil {
		t.Fatalf("create session: %d", resp.StatusCode)
	}
	return s.ID
}

// uploadOneFile streams one file into session; an error is an upload that was not acknowledged.
func uploadOneFile(ctx context.Context, url, session, name string, data []byte) (string, error) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		w, err := mw.CreateFormFile("file", name)
		if err == nil {
			_, err = w.Write(data)
		}
		if err == nil {
			err = mw.Close()
		}
		pw.CloseWithError(err)
	}()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/files?session_id="+session, pr)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		Files []parley.File `json:"files"`
	}
	if resp.StatusCode != 201 {
		return "", errors.New(resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Files) != 1 {
		return "", errors.New("an acknowledgement cut short")
	}
	return out.Files[0].ID, nil
}

func download(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return b
}

func checkUploads(t *testing.T, k int, url, session, dataDir string, acked map[string][]byte) {
	t.Helper()
	for id, data := range acked {
		got := download(t, url+"/api/v1/files/"+id+"/content")
		if !bytes.Equal(got, data) {
			t.Fatalf("kill %d: acknowledged file %s downloads %d bytes that differ from the %d uploaded", k, id, len(got), len(data))
		}
	}
	// Every file row, acknowledged or not, has its whole bytes.
	cursor := ""
	rows := 0
	referenced := map[string]bool{}
	for {
		resp, err := http.Get(url + "/api/v1/sessions/" + session + "/files?limit=500&cursor=" + cursor)
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Files      []parley.File `json:"files"`
			NextCursor string        `json:"next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range page.Files {
			rows++
			referenced[f.SHA256] = true
			sum := sha256.Sum256(download(t, url+"/api/v1/files/"+f.ID+"/content"))
			if hex.EncodeToString(sum[:]) != f.SHA256 {
				t.Fatalf("kill %d: file %s's bytes do not hash to its sha256", k, f.ID)
			}
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if rows < len(acked) {
		t.Fatalf("kill %d: %d file rows, %d acknowledged", k, rows, len(acked))
	}
	// On disk: each blob's bytes hash to its name; no temporary file survived the restart.
	blobs := filepath.Join(dataDir, "blobs")
	err := filepath.WalkDir(blobs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(blobs, p)
		if filepath.Dir(rel) == "tmp" {
			t.Errorf("kill %d: a temporary file survived the restart: %s", k, rel)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != d.Name() {
			t.Errorf("kill %d: blob %s holds %d bytes that hash to another key: a partial blob", k, rel, len(b))
		}
		if !referenced[d.Name()] {
			t.Errorf("kill %d: blob %s belongs to no file: the restart should have collected it", k, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
