package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/blob/disk"
	"github.com/parleyhq/parley/files"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/httpapi"
)

type upFile struct {
	name, contentType string
	data              []byte
}

// multipartBody builds an upload: fields first (name, value pairs), then the files.
func multipartBody(t *testing.T, fields []string, fs ...upFile) (string, []byte) {
	t.Helper()
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	for i := 0; i+1 < len(fields); i += 2 {
		mw.WriteField(fields[i], fields[i+1])
	}
	for _, f := range fs {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(f.name)))
		if f.contentType != "" {
			h.Set("Content-Type", f.contentType)
		}
		w, _ := mw.CreatePart(h)
		w.Write(f.data)
	}
	mw.Close()
	return mw.FormDataContentType(), b.Bytes()
}

// upload posts files as user and returns the status and the decoded answer.
func (e *env) upload(t *testing.T, user, query string, fields []string, fs ...upFile) (int, map[string]any) {
	t.Helper()
	ct, body := multipartBody(t, fields, fs...)
	req, _ := http.NewRequest("POST", e.url+"/api/v1/files"+query, bytes.NewReader(body))
	req.Header.Set("Content-Type", ct)
	e.authorize(t, req, "X-Test-User", user)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("upload: non-JSON %q", raw)
	}
	return resp.StatusCode, out
}

func (e *env) uploadOne(t *testing.T, user, session string, f upFile) map[string]any {
	t.Helper()
	var fields []string
	if session != "" {
		fields = []string{"session_id", session}
	}
	code, out := e.upload(t, user, "", fields, f)
	if code != 201 {
		t.Fatalf("upload %s: %d %v", f.name, code, out)
	}
	return out["files"].([]any)[0].(map[string]any)
}

func (e *env) get(t *testing.T, user, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest("GET", e.url+path, nil)
	e.authorize(t, req, append([]string{"X-Test-User", user}, hdr...)...)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (e *env) blobCount(t *testing.T) int {
	n := 0
	for _, err := range e.blobs.Keys(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// TestUploadAndDownload: names are cleaned, media types sniffed (the client's Content-Type is
// ignored), an image is served inline, anything else (an HTML page sent as image/png) as a
// nosniff attachment.
func TestUploadAndDownload(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	img := filestest.PNG(4, 4)
	page := []byte("<!DOCTYPE html><html><body><script>alert(document.cookie)</script></body></html>")
	code, out := e.upload(t, "alice", "", []string{"session_id", sid},
		upFile{"../../../etc/chart.png", "text/plain", img},
		upFile{"evil.png", "image/png", page})
	if code != 201 {
		t.Fatalf("upload: %d %v", code, out)
	}
	list := out["files"].([]any)
	a, b := list[0].(map[string]any), list[1].(map[string]any)
	if a["name"] != "chart.png" || a["media_type"] != "image/png" || a["size"] != float64(len(img)) || a["session_id"] != sid || a["owner"] != "alice" {
		t.Fatalf("first file: %v", a)
	}
	if b["name"] != "evil.png" || b["media_type"] != "text/html; charset=utf-8" {
		t.Fatalf("second file: %v", b)
	}
	if a["url"] != "/api/v1/files/"+a["id"].(string)+"/content" {
		t.Fatalf("url %v", a["url"])
	}

	code, meta := e.do(t, "GET", "/api/v1/files/"+a["id"].(string), "")
	if code != 200 || meta["sha256"] != a["sha256"] || meta["name"] != "chart.png" {
		t.Fatalf("metadata: %d %v", code, meta)
	}

	resp, body := e.get(t, "alice", a["url"].(string))
	if resp.StatusCode != 200 || !bytes.Equal(body, img) {
		t.Fatalf("image download: %d, %d bytes", resp.StatusCode, len(body))
	}
	h := resp.Header
	if h.Get("Content-Type") != "image/png" || !strings.HasPrefix(h.Get("Content-Disposition"), "inline") ||
		h.Get("X-Content-Type-Options") != "nosniff" || h.Get("ETag") != `"`+a["sha256"].(string)+`"` {
		t.Fatalf("image headers: %v", h)
	}

	resp, body = e.get(t, "alice", b["url"].(string))
	h = resp.Header
	if resp.StatusCode != 200 || !bytes.Equal(body, page) {
		t.Fatalf("page download: %d %q", resp.StatusCode, body)
	}
	if !strings.HasPrefix(h.Get("Content-Disposition"), `attachment; filename="evil.png"`) || h.Get("X-Content-Type-Options") != "nosniff" ||
		h.Get("Content-Type") != "text/html; charset=utf-8" || !strings.Contains(h.Get("Content-Security-Policy"), "sandbox") {
		t.Fatalf("an HTML page must come back as a nosniff, sandboxed attachment: %v", h)
	}
}

// TestRangeAndConditionalDownloads: ranges, If-None-Match, If-Range, HEAD.
func TestRangeAndConditionalDownloads(t *testing.T) {
	e := newEnv(t, nil)
	data := make([]byte, 10_000)
	for i := range data {
		data[i] = byte(i * 7)
	}
	f := e.uploadOne(t, "alice", "", upFile{"data.bin", "", data})
	url, etag := f["url"].(string), `"`+f["sha256"].(string)+`"`

	resp, body := e.get(t, "alice", url, "Range", "bytes=100-199")
	if resp.StatusCode != 206 || !bytes.Equal(body, data[100:200]) || resp.Header.Get("Content-Range") != "bytes 100-199/10000" {
		t.Fatalf("range: %d %q %d bytes", resp.StatusCode, resp.Header.Get("Content-Range"), len(body))
	}
	resp, body = e.get(t, "alice", url, "Range", "bytes=-10")
	if resp.StatusCode != 206 || !bytes.Equal(body, data[9990:]) {
		t.Fatalf("suffix range: %d %d bytes", resp.StatusCode, len(body))
	}
	resp, _ = e.get(t, "alice", url, "Range", "bytes=20000-")
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Fatalf("range past the end: %d", resp.StatusCode)
	}
	resp, body = e.get(t, "alice", url, "If-None-Match", etag)
	if resp.StatusCode != 304 || len(body) != 0 {
		t.Fatalf("If-None-Match: %d", resp.StatusCode)
	}
	resp, body = e.get(t, "alice", url, "Range", "bytes=0-9", "If-Range", etag)
	if resp.StatusCode != 206 || !bytes.Equal(body, data[:10]) {
		t.Fatalf("If-Range with the ETag: %d", resp.StatusCode)
	}
	resp, body = e.get(t, "alice", url, "Range", "bytes=0-9", "If-Range", `"stale"`)
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("If-Range with another ETag: %d, %d bytes", resp.StatusCode, len(body))
	}
	req, _ := http.NewRequest("HEAD", e.url+url, nil)
	e.authorize(t, req)
	hr, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hr.Body.Close()
	if hr.StatusCode != 200 || hr.ContentLength != int64(len(data)) || hr.Header.Get("Accept-Ranges") != "bytes" {
		t.Fatalf("HEAD: %d %d %v", hr.StatusCode, hr.ContentLength, hr.Header)
	}
}

// TestUploadLimits: a file over --max-file-bytes and an upload past the quota are 413 with a clear
// message, and a request is all or nothing: the files before the refused one are not kept.
func TestUploadLimits(t *testing.T) {
	var fsvc *files.Service
	e := newEnv(t, func(d *httpapi.Deps) {
		fsvc = files.New(files.Config{Store: d.Store.(files.Store), Blobs: mustBlobs(t), MaxFileBytes: 1000, Quota: 1500})
		d.Files, d.Chat.Files = fsvc, fsvc
	})
	sid := e.newSession(t, "alice")
	code, out := e.upload(t, "alice", "", []string{"session_id", sid},
		upFile{"ok.txt", "", bytes.Repeat([]byte("a"), 500)},
		upFile{"big.bin", "", make([]byte, 1001)})
	if code != 413 || !strings.Contains(errMsg(out), `file "big.bin" is larger than the limit of 1000 bytes`) {
		t.Fatalf("a file over the limit: %d %v", code, out)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/files", ""); code != 200 || len(out["files"].([]any)) != 0 {
		t.Fatalf("files after a refused upload: %v", out)
	}
	e.uploadOne(t, "alice", sid, upFile{"a.bin", "", make([]byte, 1000)})
	code, out = e.upload(t, "alice", "", nil, upFile{"b.bin", "", bytes.Repeat([]byte("b"), 501)})
	if code != 413 || out["error"].(map[string]any)["code"] != "quota_exceeded" || !strings.Contains(errMsg(out), "quota of 1500 bytes") {
		t.Fatalf("past the quota: %d %v", code, out)
	}
	e.uploadOne(t, "alice", "", upFile{"c.bin", "", bytes.Repeat([]byte("c"), 500)})
	e.uploadOne(t, "bob", "", upFile{"d.bin", "", bytes.Repeat([]byte("d"), 1000)}) // bob's own quota
}

// TestUploadBadRequests: each malformed upload is a 4xx with the reason, and stores nothing.
func TestUploadBadRequests(t *testing.T) {
	e := newEnv(t, nil)
	bobs := e.newSession(t, "bob")
	f := upFile{"a.txt", "", []byte("hi")}
	cases := []struct {
		name   string
		query  string
		fields []string
		files  []upFile
		status int
		reason string
	}{
		{"no file", "", []string{"session_id", bobs}, nil, 400, "no file"},
		{"unknown field", "", []string{"title", "x"}, []upFile{f}, 400, `unknown form field "title"`},
		{"another user's session", "", []string{"session_id", bobs}, []upFile{f}, 403, "another user"},
		{"another user's session (query)", "?session_id=" + bobs, nil, []upFile{f}, 403, "another user"},
		{"no such session", "?session_id=0190a000-0000-7000-8000-000000000000", nil, []upFile{f}, 404, "not found"},
		{"malformed session", "?session_id=../x", nil, []upFile{f}, 404, "not found"},
	}
	for _, c := range cases {
		code, out := e.upload(t, "alice", c.query, c.fields, c.files...)
		if code != c.status || !strings.Contains(errMsg(out), c.reason) {
			t.Errorf("%s: %d %v, want %d %q", c.name, code, out, c.status, c.reason)
		}
	}
	// Not multipart.
	if code, out := e.do(t, "POST", "/api/v1/files", `{"file":"x"}`); code != 400 || !strings.Contains(errMsg(out), "multipart/form-data") {
		t.Errorf("JSON body: %d %v", code, out)
	}
	// session_id after a file.
	ct, body := multipartBody(t, nil, f)
	body = bytes.Replace(body, []byte("--"+strings.TrimPrefix(ct, "multipart/form-data; boundary=")+"--"),
		[]byte("--"+strings.TrimPrefix(ct, "multipart/form-data; boundary=")+"\r\nContent-Disposition: form-data; name=\"session_id\"\r\n\r\n"+bobs+"\r\n--"+strings.TrimPrefix(ct, "multipart/form-data; boundary=")+"--"), 1)
	resp, raw := e.raw(t, "POST", "/api/v1/files", string(body), "Content-Type", ct, "Authorization", "Bearer "+e.key(t, "alice"))
	if resp.StatusCode != 400 || !strings.Contains(raw, "session_id must come before the files") {
		t.Errorf("session_id after a file: %d %s", resp.StatusCode, raw)
	}
	if n := e.blobCount(t); n != 0 {
		t.Fatalf("%d blobs after refused uploads", n)
	}
}

// TestSessionFilesAndDeletion: listing a session's files a page at a time, deleting a file, and
// deleting a session with its files: the blobs go with their last file only.
func TestSessionFilesAndDeletion(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	other := e.newSession(t, "alice")
	var ids []string
	for i := 0; i < 3; i++ {
		f := e.uploadOne(t, "alice", sid, upFile{fmt.Sprintf("f%d.txt", i), "", []byte(fmt.Sprintf("file %d", i))})
		ids = append(ids, f["id"].(string))
	}
	shared := e.uploadOne(t, "alice", other, upFile{"same.txt", "", []byte("file 0")}) // the bytes of f0
	code, out := e.do(t, "GET", "/api/v1/sessions/"+sid+"/files?limit=2", "")
	page := out["files"].([]any)
	if code != 200 || len(page) != 2 || page[0].(map[string]any)["id"] != ids[0] || out["next_cursor"] != ids[1] {
		t.Fatalf("first page: %d %v", code, out)
	}
	_, out = e.do(t, "GET", "/api/v1/sessions/"+sid+"/files?limit=2&cursor="+ids[1], "")
	if page := out["files"].([]any); len(page) != 1 || page[0].(map[string]any)["id"] != ids[2] || out["next_cursor"] != "" {
		t.Fatalf("second page: %v", out)
	}
	if n := e.blobCount(t); n != 3 {
		t.Fatalf("%d blobs, want 3 (two files share one)", n)
	}

	if code, _ := e.do(t, "DELETE", "/api/v1/files/"+ids[2], ""); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if code, _ := e.do(t, "GET", "/api/v1/files/"+ids[2], ""); code != 404 {
		t.Fatalf("a deleted file: %d", code)
	}
	if n := e.blobCount(t); n != 2 {
		t.Fatalf("%d blobs after a delete, want 2", n)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/sessions/"+sid, ""); code != 204 {
		t.Fatalf("delete session: %d", code)
	}
	if code, _ := e.do(t, "GET", "/api/v1/files/"+ids[1], ""); code != 404 {
		t.Fatalf("a file of a deleted session: %d", code)
	}
	// f1's blob is gone; f0's stays for the file of the other session.
	if n := e.blobCount(t); n != 1 {
		t.Fatalf("%d blobs after the session went, want 1", n)
	}
	resp, body := e.get(t, "alice", shared["url"].(string))
	if resp.StatusCode != 200 || string(body) != "file 0" {
		t.Fatalf("the shared file: %d %q", resp.StatusCode, body)
	}
}

// TestChatWithFileIDs: file_ids on a chat store the user message with references (file parts
// naming the files), not bytes; a file in no session joins the chat's; other users' files and
// files of other sessions are refused and nothing is stored.
func TestChatWithFileIDs(t *testing.T) {
	e := newEnv(t, nil)
	f := e.uploadOne(t, "alice", "", upFile{"notes.md", "", []byte("# Notes\n")})
	fid := f["id"].(string)
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"summarize","file_ids":["`+fid+`"]}`)
	if code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	sid := out["session_id"].(string)
	h, err := e.store.History(context.Background(), sid)
	if err != nil {
		t.Fatal(err)
	}
	parts := h[0].Content.Parts()
	if len(parts) != 2 || parts[0].Text != "summarize" || parts[1].Type != "file" || parts[1].File.FileID != fid ||
		parts[1].File.Filename != "notes.md" || parts[1].File.FileData != "" {
		t.Fatalf("stored user message: %+v", h[0].Content)
	}
	raw, _ := json.Marshal(h[0].OpenAI())
	if want := `{"role":"user","content":[{"type":"text","text":"summarize"},{"type":"file","file":{"file_id":"` + fid + `","filename":"notes.md"}}]}`; string(raw) != want {
		t.Fatalf("stored message in OpenAI format:\n%s\nwant\n%s", raw, want)
	}
	if err := parley.CheckHistory(h); err != nil {
		t.Fatalf("history: %v", err)
	}
	if _, meta := e.do(t, "GET", "/api/v1/files/"+fid, ""); meta["session_id"] != sid {
		t.Fatalf("the attached file is in session %v, want %s", meta["session_id"], sid)
	}
	// A file with no text needs no message.
	g := e.uploadOne(t, "alice", sid, upFile{"b.txt", "", []byte("b")})
	if code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"","session_id":"`+sid+`","file_ids":["`+g["id"].(string)+`"]}`); code != 200 {
		t.Fatalf("files only: %d %v", code, out)
	}

	bobs := e.uploadOne(t, "bob", "", upFile{"bob.txt", "", []byte("bob")})
	elsewhere := e.uploadOne(t, "alice", e.newSession(t, "alice"), upFile{"x.txt", "", []byte("x")})
	before, _ := e.store.History(context.Background(), sid)
	for _, c := range []struct {
		body   string
		status int
		reason string
	}{
		{`{"message":"hi","session_id":"` + sid + `","file_ids":["` + bobs["id"].(string) + `"]}`, 403, "another user"},
		{`{"message":"hi","session_id":"` + sid + `","file_ids":["` + elsewhere["id"].(string) + `"]}`, 400, "another session"},
		{`{"message":"hi","session_id":"` + sid + `","file_ids":["0190a000-0000-7000-8000-000000000000"]}`, 404, "not found"},
		{`{"message":"hi","file_ids":["bad\u0000id"]}`, 400, "file_ids[0]"},
		{`{"message":"hi","file_ids":[` + strings.TrimSuffix(strings.Repeat(`"x",`, 21), ",") + `]}`, 400, "the limit is 20"},
	} {
		code, out := e.do(t, "POST", "/api/v1/chat", c.body)
		if code != c.status || !strings.Contains(errMsg(out), c.reason) {
			t.Errorf("%s: %d %v, want %d %q", c.body, code, out, c.status, c.reason)
		}
	}
	if after, _ := e.store.History(context.Background(), sid); len(after) != len(before) {
		t.Fatalf("a refused chat stored %d messages", len(after)-len(before))
	}
	if list, _, _ := e.store.ListSessions(context.Background(), "alice", parley.Page{Limit: 50}); len(list) != 2 {
		t.Fatalf("alice has %d sessions: a refused chat created one", len(list))
	}
}

// TestWebSocketFileIDs: fileIds on a user_message frame attach files as file_ids does.
func TestWebSocketFileIDs(t *testing.T) {
	e := newEnv(t, nil)
	sid := e.newSession(t, "alice")
	f := e.uploadOne(t, "alice", sid, upFile{"data.csv", "", []byte("a,b\n1,2\n")})
	c := e.ws(t, "alice", "?convId="+sid)
	c.expect("status", "")
	c.send(`{"type":"user_message","id":"m1","data":{"text":"read it","fileIds":["` + f["id"].(string) + `"]}}`)
	evs, _ := c.untilDone()
	ev := evs[1].event(t)
	parts := ev.Message.Content.Parts()
	if len(parts) != 2 || parts[1].Type != "file" || parts[1].File.FileID != f["id"] || parts[1].File.Filename != "data.csv" {
		t.Fatalf("user_message frame: %s", evs[1].Data)
	}
}

func mustBlobs(t *testing.T) parley.BlobStore {
	t.Helper()
	bs, err := diskOpen(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

var diskOpen = func(dir string) (parley.BlobStore, error) { return disk.Open(dir) }

// TestUploadCutShort: a body that ends in the middle of a file is a 400, and nothing is stored.
func TestUploadCutShort(t *testing.T) {
	e := newEnv(t, nil)
	ct, body := multipartBody(t, nil, upFile{"a.bin", "", bytes.Repeat([]byte("x"), 100_000)})
	body = body[:60_000]
	resp, raw := e.raw(t, "POST", "/api/v1/files", string(body), "Content-Type", ct, "Authorization", "Bearer "+e.key(t, "alice"))
	if resp.StatusCode != 400 || !strings.Contains(raw, "cut or malformed") {
		t.Fatalf("a cut upload: %d %s", resp.StatusCode, raw)
	}
	if n := e.blobCount(t); n != 0 {
		t.Fatalf("%d blobs after a cut upload", n)
	}
}

// TestDeletingAForkedSessionKeepsItsFiles: deleting a session hands its files to its fork, whose
// copied messages refer to them; their blobs are not collected. They go, blobs and all, with the
// fork.
func TestDeletingAForkedSessionKeepsItsFiles(t *testing.T) {
	bothStores(t, testDeletingAForkedSessionKeepsItsFiles)
}

func testDeletingAForkedSessionKeepsItsFiles(t *testing.T, e *env) {
	f := e.uploadOne(t, "alice", "", upFile{"plan.md", "", []byte("# The plan\n")})
	fid := f["id"].(string)
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"read it","file_ids":["`+fid+`"]}`)
	if code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	src := out["session_id"].(string)
	h, err := e.store.History(context.Background(), src)
	if err != nil || len(h) == 0 {
		t.Fatalf("history: %v %v", h, err)
	}
	code, out = e.do(t, "POST", "/api/v1/sessions/"+src+"/fork", `{"message_id":"`+h[len(h)-1].ID+`"}`)
	if code != 201 {
		t.Fatalf("fork: %d %v", code, out)
	}
	fork := out["session"].(map[string]any)["id"].(string)
	if code, _ := e.do(t, "DELETE", "/api/v1/sessions/"+src, ""); code != 204 {
		t.Fatalf("delete the source: %d", code)
	}
	if n := e.blobCount(t); n != 1 {
		t.Fatalf("%d blobs after the source went, want 1", n)
	}
	if code, meta := e.do(t, "GET", "/api/v1/files/"+fid, ""); code != 200 || meta["session_id"] != fork {
		t.Fatalf("the file after the source went: %d %v", code, meta)
	}
	if resp, body := e.get(t, "alice", f["url"].(string)); resp.StatusCode != 200 || string(body) != "# The plan\n" {
		t.Fatalf("download: %d %q", resp.StatusCode, body)
	}
	if code, out := e.do(t, "GET", "/api/v1/sessions/"+fork+"/files", ""); code != 200 || len(out["files"].([]any)) != 1 {
		t.Fatalf("the fork's files: %d %v", code, out)
	}
	if code, _ := e.do(t, "DELETE", "/api/v1/sessions/"+fork, ""); code != 204 {
		t.Fatalf("delete the fork: %d", code)
	}
	if code, _ := e.do(t, "GET", "/api/v1/files/"+fid, ""); code != 404 {
		t.Fatalf("the file after the last session went: %d", code)
	}
	if n := e.blobCount(t); n != 0 {
		t.Fatalf("%d blobs after the last session went, want 0", n)
	}
}

// TestReattachingInAFork: a fork's messages refer to the files of the session forked from, which
// stay that session's; attaching one of them again in the fork (or in a fork of the fork) is
// allowed and leaves the file where it is. A file of an unrelated session of the same user, or
// of a fork seen from its source, is still refused.
func TestReattachingInAFork(t *testing.T) {
	bothStores(t, testReattachingInAFork)
}

func testReattachingInAFork(t *testing.T, e *env) {
	fid := e.uploadOne(t, "alice", "", upFile{"plan.md", "", []byte("# The plan\n")})["id"].(string)
	code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"read it","file_ids":["`+fid+`"]}`)
	if code != 200 {
		t.Fatalf("chat: %d %v", code, out)
	}
	src := out["session_id"].(string)
	fork := func(sid string) string {
		t.Helper()
		h, err := e.store.History(context.Background(), sid)
		if err != nil || len(h) == 0 {
			t.Fatalf("history: %v %v", h, err)
		}
		code, out := e.do(t, "POST", "/api/v1/sessions/"+sid+"/fork", `{"message_id":"`+h[len(h)-1].ID+`"}`)
		if code != 201 {
			t.Fatalf("fork: %d %v", code, out)
		}
		return out["session"].(map[string]any)["id"].(string)
	}
	child := fork(src)
	grandchild := fork(child)
	for _, sid := range []string{child, grandchild} {
		code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"read it again","session_id":"`+sid+`","file_ids":["`+fid+`"]}`)
		if code != 200 {
			t.Fatalf("re-attaching the source's file in %s: %d %v", sid, code, out)
		}
		h, err := e.store.History(context.Background(), sid)
		if err != nil {
			t.Fatal(err)
		}
		var last parley.Message
		for _, m := range h {
			if m.Role == parley.RoleUser {
				last = m
			}
		}
		if parts := last.Content.Parts(); len(parts) != 2 || parts[0].Text != "read it again" || parts[1].File == nil || parts[1].File.FileID != fid {
			t.Fatalf("the fork's new message: %+v", last.Content)
		}
	}
	if _, meta := e.do(t, "GET", "/api/v1/files/"+fid, ""); meta["session_id"] != src {
		t.Fatalf("the re-attached file moved to session %v, want it left in %s", meta["session_id"], src)
	}

	elsewhere := e.uploadOne(t, "alice", e.newSession(t, "alice"), upFile{"x.txt", "", []byte("x")})["id"].(string)
	childs := e.uploadOne(t, "alice", child, upFile{"c.txt", "", []byte("c")})["id"].(string)
	for _, c := range []struct{ session, file string }{{child, elsewhere}, {src, childs}} {
		code, out := e.do(t, "POST", "/api/v1/chat", `{"message":"hi","session_id":"`+c.session+`","file_ids":["`+c.file+`"]}`)
		if code != 400 || !strings.Contains(errMsg(out), "another session") {
			t.Errorf("attaching %s in %s: %d %v, want 400 another session", c.file, c.session, code, out)
		}
	}
}
