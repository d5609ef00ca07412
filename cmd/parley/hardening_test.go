package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/provider/llmtest"
)

// serveLogged starts `parley serve` in-process with args (and env) and returns its URL and the
// log lines written up to the "listening" line. The server stops when the test ends.
func serveLogged(t *testing.T, env map[string]string, args ...string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	all := append([]string{"serve", "--addr", "127.0.0.1:0", "--mock-token-delay", "0s"}, args...)
	go func() {
		err := run(ctx, all, func(k string) string { return env[k] }, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	type result struct {
		url, logs string
		ok        bool
	}
	found := make(chan result, 1)
	go func() { // owned: it reads the pipe until the server ends (which closes it)
		sc := bufio.NewScanner(pr)
		var logs strings.Builder
		sent := false
		for sc.Scan() {
			if sent {
				continue
			}
			logs.WriteString(sc.Text() + "\n")
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				found <- result{"http://" + m[1], logs.String(), true}
				sent = true
			}
		}
		if !sent {
			found <- result{logs: logs.String()}
		}
	}()
	var r result
	select {
	case r = <-found:
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("server did not start in 60s")
	}
	if !r.ok {
		t.Fatalf("server exited before listening: %v\n%s", <-done, r.logs)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("serve did not stop within 20s of cancellation")
		}
	})
	return r.url, r.logs
}

// Redaction hides secrets, not routes: the start-up log names the database file, a 404 names the
// route asked for, and the hint of an unknown model names the route that lists them. Secrets in
// the same messages are still hidden.
func TestRoutesAndTheDatabaseAreNotRedacted(t *testing.T) {
	db := filepath.Join(t.TempDir(), "parley.db")
	url, logs := serveLogged(t, nil, "--db", db)
	if !strings.Contains(logs, "db="+db) {
		t.Fatalf("the start-up log does not name the database file %s:\n%s", db, logs)
	}
	get := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, url+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Error struct{ Message string } }
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Error.Message
	}
	if code, msg := get("GET", "/api/v1/nothing/here", ""); code != 404 || msg != "no route for GET /api/v1/nothing/here" {
		t.Fatalf("404: %d %q", code, msg)
	}
	if code, msg := get("POST", "/api/v1/chat", `{"message":"hi","model":"nope/x"}`); code != 400 || !strings.Contains(msg, "GET /api/v1/models lists them") {
		t.Fatalf("unknown model: %d %q", code, msg)
	}
	// A key in a path is still a key.
	if code, msg := get("GET", "/api/v1/x/sk-proj-abcdefghijklmnop", ""); code != 404 || strings.Contains(msg, "abcdefghijklmnop") {
		t.Fatalf("a key in a 404's path: %d %q", code, msg)
	}
}

// README's Ollama example, as written (only the address of the fake Ollama changed): a bare
// model name with PARLEY_OPENAI_BASE_URL starts the server, and chats reach that endpoint with
// that model.
func TestReadmeOllamaExampleStarts(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`(PARLEY_OPENAI_BASE_URL=http://localhost:11434/v1 PARLEY_MODEL=[^`]+)`").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no Ollama example `PARLEY_OPENAI_BASE_URL=http://localhost:11434/v1 PARLEY_MODEL=…`")
	}
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	env := map[string]string{}
	for _, kv := range strings.Fields(string(m[1])) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = strings.Replace(v, "http://localhost:11434", hs.URL, 1)
	}
	url, _ := serveLogged(t, env, "--db", filepath.Join(t.TempDir(), "p.db"))
	fake.Enqueue(llmtest.Turn{Content: "Hello from Ollama."})
	resp, err := http.Post(url+"/api/v1/chat", "application/json", strings.NewReader(`{"message":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Response, Model string
	}
	json.NewDecoder(resp.Body).Decode(&out)
	want := strings.TrimPrefix(env["PARLEY_MODEL"], "openai/")
	if resp.StatusCode != 200 || out.Response != "Hello from Ollama." || out.Model != "openai/"+want {
		t.Fatalf("chat: %d %+v", resp.StatusCode, out)
	}
	if reqs := fake.Requests(); len(reqs) != 1 || reqs[0].Model != want {
		t.Fatalf("requests to the endpoint: %+v", reqs)
	}
}
