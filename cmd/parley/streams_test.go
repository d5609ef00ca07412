package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// TestResumeAfterRestart: a client that lost a stream resumes it on a restarted server, which
// holds no run in memory: the events after the last id it saw come from the database, the same
// ones the first server sent.
func TestResumeAfterRestart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "resume.db")
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"serve", "--addr", "127.0.0.1:0", "--db", db, "--mock-token-delay", "0s"}, func(string) string { return "" }, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	var logs bytes.Buffer
	url := waitListening(t, pr, &logs)
	go io.Copy(io.Discard, pr)

	resp := postStream(t, context.Background(), url, map[string]any{"message": "What is 12*(3+4)?"})
	var first []sseEvent
	readSSE(t, resp.Body, func(ev sseEvent) bool { first = append(first, ev); return ev.Event != "done" })
	resp.Body.Close()
	if len(first) < 8 || first[len(first)-1].Event != "done" {
		t.Fatalf("first stream: %d events", len(first))
	}
	sid := first[0].Data.SessionID

	cancel() // the server stops (and stores what it has)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server did not stop")
	}

	url2 := startInProcess(t, nil, "--db", db)
	const after = 4
	req, _ := http.NewRequest("GET", url2+"/api/v1/sessions/"+sid+"/stream?until=done", nil)
	req.Header.Set("Last-Event-ID", itoa(after))
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	var rest []sseEvent
	readSSE(t, resp2.Body, func(ev sseEvent) bool { rest = append(rest, ev); return ev.Event != "done" })
	if len(rest) != len(first)-after {
		t.Fatalf("resumed with %d events, want %d", len(rest), len(first)-after)
	}
	for i, ev := range rest {
		want := first[after+i]
		if ev.ID != want.ID || ev.Event != want.Event || ev.Data.Content != want.Data.Content || ev.Data.RunID != want.Data.RunID {
			t.Fatalf("event %d after the restart: %+v, first server sent %+v", i, ev, want)
		}
	}

	// The next run of the session goes on numbering where the first stopped.
	resp3 := postStream(t, context.Background(), url2, map[string]any{"message": "And again?", "session_id": sid})
	defer resp3.Body.Close()
	var next sseEvent
	readSSE(t, resp3.Body, func(ev sseEvent) bool { next = ev; return false })
	if next.ID != itoa(len(first)+1) {
		t.Fatalf("the next run starts at id %s, want %d", next.ID, len(first)+1)
	}
}
