package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// TestServeFilesOnDiskByDefault: with no flag the blobs live beside the database, in <db>.data;
// a file uploaded there downloads after a restart.
func TestServeFilesOnDiskByDefault(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "p.db")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	pr, pw := io.Pipe()
	go func() {
		err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db}, func(string) string { return "" }, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	url := waitListening(t, pr, io.Discard)
	id := uploadFiles(t, url, []string{"a.txt"}, map[string][]byte{"a.txt": []byte("kept beside the database")})[0]
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(dir, "p.db.data", "blobs"))
	if err != nil || len(entries) < 2 { // tmp/ and one shard directory
		t.Fatalf("blobs directory: %v %v", entries, err)
	}
	url2 := startInProcess(t, nil, "--db", db, "--data-dir", filepath.Join(dir, "p.db.data"))
	if got := download(t, url2+"/api/v1/files/"+id+"/content"); string(got) != "kept beside the database" {
		t.Fatalf("after a restart: %q", got)
	}
}

// TestServeFilesOnS3: --blob-store s3 keeps the bytes in the bucket (an S3-compatible server,
// gofakes3, in this process), with credentials from the environment.
func TestServeFilesOnS3(t *testing.T) {
	backend := s3mem.New()
	if err := backend.CreateBucket("parley-files"); err != nil {
		t.Fatal(err)
	}
	s3srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer s3srv.Close()
	env := map[string]string{"AWS_ACCESS_KEY_ID": "test-access", "AWS_SECRET_ACCESS_KEY": "test-secret"}
	url := startInProcess(t, env, "--blob-store", "s3", "--s3-endpoint", strings.TrimPrefix(s3srv.URL, "http://"),
		"--s3-bucket", "parley-files", "--s3-insecure", "--s3-prefix", "p1")
	data := bytes.Repeat([]byte("object storage "), 1000)
	id := uploadFiles(t, url, []string{"big.txt"}, map[string][]byte{"big.txt": data})[0]
	if got := download(t, url+"/api/v1/files/"+id+"/content"); !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes", len(got))
	}
	list, err := backend.ListBucket("parley-files", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range list.Contents {
		if strings.HasPrefix(o.Key, "p1/blobs/") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no blob object under p1/blobs/ in the bucket: %+v", list.Contents)
	}
	req, _ := http.NewRequest("DELETE", url+"/api/v1/files/"+id, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("delete: %v %v", resp, err)
	}
	list, _ = backend.ListBucket("parley-files", &gofakes3.Prefix{}, gofakes3.ListBucketPage{})
	for _, o := range list.Contents {
		if strings.HasPrefix(o.Key, "p1/blobs/") {
			t.Fatalf("the blob outlived its only file: %s", o.Key)
		}
	}
}
