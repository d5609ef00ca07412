package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parleyhq/parley/internal/redistest"
	"github.com/parleyhq/parley/provider/llmtest"
)

// TestUIResumeOnAnotherInstance: two instances on one database and Redis; a useChat client whose
// POST went to A reconnects to B (GET /api/v1/ui/chat/{id}/stream) while A's run is held by the
// model, and B streams that run from its start, byte for byte what A streams. Once the run is
// over, B answers 204.
func TestUIResumeOnAnotherInstance(t *testing.T) {
	redistest.Client(t) // skips, or fails where Redis is required, when none answers
	up := &gatedUpstream{fake: llmtest.NewServer(llmtest.WithChunkSize(8))}
	upstream := httptest.NewServer(up)
	defer upstream.Close()
	db := filepath.Join(t.TempDir(), "shared.db")
	env := map[string]string{"PARLEY_OPENAI_BASE_URL": upstream.URL + "/v1"}
	common := []string{"--db", db, "--redis-url", redistest.URL(), "--rate-limit", "off", "--provider-attempts", "1", "--heartbeat", "1h"}
	a := startInProcess(t, env, append(common, "--instance-id", "ui-a")...)
	b := startInProcess(t, env, append(common, "--instance-id", "ui-b")...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	up.fake.Enqueue(llmtest.Turn{Content: "An answer held by the model after its first chunk.", Usage: usage1})
	gate := up.hold(3)
	defer func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	}()
	// A chat id of its own: the session id derives from it, and Redis keeps a session's relayed
	// events for an hour (a fixed id would meet the previous test run's events there).
	chat := "chatTwo" + strconv.FormatInt(time.Now().UnixNano(), 36)
	post, _ := http.NewRequestWithContext(ctx, "POST", a+"/api/v1/ui/chat",
		strings.NewReader(`{"id":"`+chat+`","messages":[{"id":"u1","role":"user","parts":[{"type":"text","text":"Go on"}]}],"trigger":"submit-message"}`))
	post.Header.Set("Content-Type", "application/json")
	onA, err := http.DefaultClient.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	defer onA.Body.Close()
	ra := bufio.NewReader(onA.Body)
	var headA string
	for !strings.Contains(headA, `"text-delta"`) { // the run is under way on A
		line, err := ra.ReadString('\n')
		if err != nil {
			t.Fatalf("A's stream: %v after %q", err, headA)
		}
		headA += line
	}

	get, _ := http.NewRequestWithContext(ctx, "GET", b+"/api/v1/ui/chat/"+chat+"/stream", nil)
	onB, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	defer onB.Body.Close()
	if onB.StatusCode != 200 || onB.Header.Get("x-vercel-ai-ui-message-stream") != "v1" {
		t.Fatalf("B: %d %v", onB.StatusCode, onB.Header)
	}
	rb := bufio.NewReader(onB.Body)
	first, err := rb.ReadString('\n')
	if err != nil || !strings.HasPrefix(headA, first) {
		t.Fatalf("B's first line %q %v; A's stream began %q", first, err, headA)
	}
	close(gate)
	restA, _ := io.ReadAll(ra)
	restB, _ := io.ReadAll(rb)
	fromA, fromB := headA+string(restA), first+string(restB)
	if fromA != fromB || !strings.HasSuffix(fromA, "data: [DONE]\n\n") {
		t.Fatalf("B's stream differs from A's:\n%s\n---\n%s", fromB, fromA)
	}
	resp, err := http.Get(b + "/api/v1/ui/chat/" + chat + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("after the run, B answers %d", resp.StatusCode)
	}
}
