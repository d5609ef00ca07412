package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/redistest"
)

// TestTwoInstances runs two parley processes on one database and the machine's Redis. A client of
// instance B follows a run that instance A runs, live, event for event as A's own client sees it,
// and resumes it mid-run; B refuses a second run in that session; pause, resume and abort sent to
// B act on the run on A.
func TestTwoInstances(t *testing.T) {
	redistest.Client(t) // skips, or fails where Redis is required, when none answers
	db := filepath.Join(t.TempDir(), "shared.db")
	common := []string{"--db", db, "--redis-url", redistest.URL(), "--mock-token-delay", "40ms"}
	a := startChild(t, append(common, "--instance-id", "test-a")...)
	b := startChild(t, append(common, "--instance-id", "test-b")...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A runs the chat; its own client collects every event.
	prompt := "Say hello in a long sentence, please, with many words in it."
	onA := make(chan parley.Event, 1000)
	go func() {
		defer close(onA)
		resp := postStream(t, ctx, a.url, map[string]any{"message": prompt})
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool { onA <- ev.Data; return ev.Data.Type != parley.EventDone })
	}()
	start := <-onA
	if start.Type != parley.EventStart {
		t.Fatalf("first event on A: %+v", start)
	}
	session := start.SessionID

	// B joins the run (no position given: from the run's first event) and gets it live.
	fromB := followSSE(t, ctx, b.url, session, "")
	first := <-fromB
	if first.Type != parley.EventStart || first.RunID != start.RunID || first.Seq != start.Seq {
		t.Fatalf("B's first event %+v, want A's start %+v", first, start)
	}
	var seenOnB []parley.Event
	live := false
	for ev := range fromB {
		seenOnB = append(seenOnB, ev)
		if ev.Type == parley.EventChunk && len(seenOnB) == 3 {
			// B has chunks while A's run still goes: it is live, not read after the fact.
			var s struct {
				ActiveRun string `json:"active_run"`
			}
			getSession(t, b.url, session, &s)
			live = s.ActiveRun == start.RunID
		}
		if ev.Type == parley.EventDone {
			break
		}
	}
	var seenOnA []parley.Event
	for ev := range onA {
		if ev.Type != parley.EventStart {
			seenOnA = append(seenOnA, ev)
		}
	}
	if !live {
		t.Fatal("B saw no chunk while the run was active on A")
	}
	if !sameEvents(seenOnA, seenOnB) {
		t.Fatalf("B's events differ from A's:\n A %s\n B %s", render(seenOnA), render(seenOnB))
	}

	// Resume on B mid-run: exactly the events after the one named.
	mid := seenOnA[len(seenOnA)/2]
	resumed := collect(followSSE(t, ctx, b.url, session, strconv.FormatInt(mid.Seq, 10)), parley.EventDone)
	if !sameEvents(seenOnA[len(seenOnA)/2+1:], resumed) {
		t.Fatalf("resumed on B after %d: %s", mid.Seq, render(resumed))
	}

	// A second run in the session, on A; B refuses a third and controls this one.
	onA = make(chan parley.Event, 1000)
	go func() {
		defer close(onA)
		resp := postStream(t, ctx, a.url, map[string]any{"message": prompt, "session_id": session})
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool { onA <- ev.Data; return ev.Data.Type != parley.EventDone })
	}()
	run2 := <-onA
	// Paused first, so that the run cannot end before the steps after (a loaded machine).
	for i, step := range []struct{ action, state string }{{"pause", "paused"}, {"resume", "running"}, {"abort", "aborting"}} {
		if i == 1 {
			if code, body := postJSON(t, b.url+"/api/v1/chat/stream", map[string]any{"message": "me too", "session_id": session}); code != http.StatusConflict {
				t.Fatalf("a second run through B: %d %s, want 409", code, body)
			}
		}
		code, body := postJSON(t, b.url+"/api/v1/sessions/"+session+"/"+step.action, nil)
		var out struct{ RunID, State string }
		json.Unmarshal(body, &struct {
			RunID *string `json:"run_id"`
			State *string `json:"state"`
		}{&out.RunID, &out.State})
		if code != 200 || out.RunID != run2.RunID || out.State != step.state {
			t.Fatalf("%s through B: %d %s, want 200 with run %s state %s", step.action, code, body, run2.RunID, step.state)
		}
	}
	var states []string
	finish := ""
	for ev := range onA {
		if ev.Type == parley.EventStatus {
			states = append(states, ev.State)
		}
		if ev.Type == parley.EventDone {
			finish = ev.FinishReason
		}
	}
	if finish != parley.FinishAborted || len(states) != 2 || states[0] != parley.RunPaused || states[1] != parley.RunResumed {
		t.Fatalf("the run on A: statuses %v, finish %q; want paused, running and aborted", states, finish)
	}
	if code, body := postJSON(t, b.url+"/api/v1/sessions/"+session+"/abort", nil); code != http.StatusConflict {
		t.Fatalf("abort with no run: %d %s, want 409", code, body)
	}
	// Issue 24: B measured the relay lag of the events it read from A's runs.
	if n := sample(scrape(t, b.url, ""), "parley_relay_lag_seconds", nil); n == 0 {
		t.Errorf("B's parley_relay_lag_seconds has no samples after following A's runs")
	}
}

// followSSE reads the session stream of url (?until=done, after the given position) into a channel.
func followSSE(t *testing.T, ctx context.Context, url, session, lastEventID string) <-chan parley.Event {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url+"/api/v1/sessions/"+session+"/stream?until=done", nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream on %s: %d %s", url, resp.StatusCode, b)
	}
	out := make(chan parley.Event, 1000)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		scanSSE(resp.Body, func(ev sseEvent) bool { out <- ev.Data; return true })
	}()
	return out
}

func collect(ch <-chan parley.Event, until parley.EventType) []parley.Event {
	var out []parley.Event
	for ev := range ch {
		out = append(out, ev)
		if ev.Type == until {
			break
		}
	}
	return out
}

func sameEvents(a, b []parley.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, _ := json.Marshal(a[i])
		y, _ := json.Marshal(b[i])
		if !bytes.Equal(x, y) {
			return false
		}
	}
	return true
}

func render(evs []parley.Event) string {
	var b bytes.Buffer
	for _, ev := range evs {
		b.WriteString(strconv.FormatInt(ev.Seq, 10) + ":" + string(ev.Type) + " ")
	}
	return b.String()
}

func getSession(t *testing.T, url, session string, out any) {
	t.Helper()
	resp, err := http.Get(url + "/api/v1/sessions/" + session)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

func postJSON(t *testing.T, url string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader = http.NoBody
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	resp, err := http.Post(url, "application/json", r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
