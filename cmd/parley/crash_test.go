package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// TestCrashAtRandomPoints SIGKILLs a real server process many times, each time at a random
// moment of concurrent streamed chats that call tools, on both stores. After each kill it
// restarts the server on the same database and checks that every message acknowledged to a
// client (a record or tool_result event) is stored exactly as acknowledged, that every stored
// row reads back, and that every session's history is valid for the OpenAI API.
//
// PARLEY_CRASH_KILLS sets the number of kills per store (default 8; 3 with -short) and
// PARLEY_CRASH_SEED replays a run.
func TestCrashAtRandomPoints(t *testing.T) {
	t.Parallel() // with the browser suite and README's MCP example, after the package's other tests
	kills := 8
	if testing.Short() {
		kills = 3
	}
	if v, err := strconv.Atoi(os.Getenv("PARLEY_CRASH_KILLS")); err == nil && v > 0 {
		kills = v
	}
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("PARLEY_CRASH_SEED"), 10, 64); err == nil {
		seed = v
	}
	// One instance name across restarts: each restart takes back the runs the kill left at once.
	// The test's own checks (polling every session, paging its messages after every kill) are
	// not what the rate limits are for: off, or a long run hits them and fails on a 429.
	// The two stores run at once: each has a server process, a database and a random source of its
	// own, and the loop mostly waits (on the streams, the kill, the restart).
	limits := []string{"--rate-limit", "off", "--guest-rate-limit", "off"}
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		crashLoop(t, kills, seed, append(limits[:len(limits):len(limits)], "--instance-id", "crash", "--db", filepath.Join(t.TempDir(), "crash.db"))...)
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		crashLoop(t, kills, seed, append(limits[:len(limits):len(limits)], "--instance-id", "crash", "--database-url", pgtest.Schema(t), "--data-dir", t.TempDir())...)
	})
}

// The prompts make the mock model call one tool, two tools in parallel, or none.
var crashPrompts = []string{
	"What is 12*(3+4)?",
	"What time is it in UTC, and what is 2+3?",
	"Say hello in a long sentence, please, with many words in it.",
}

func crashLoop(t *testing.T, kills int, seed uint64, dbArgs ...string) {
	t.Logf("seed %d (PARLEY_CRASH_SEED=%d replays it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	acked := map[string]parley.Message{} // by message id, across all kills
	var sessions []string
	resumed := 0 // restarts that took over runs the kill left
	srv := startChild(t, append(dbArgs, "--mock-token-delay", "4ms")...)
	for k := 0; k < kills; k++ {
		// Two chats at once: one continues a session (when there is one), one starts a new one.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			errs []error
		)
		// A third of the kills come after a random delay, a third the moment a client sees its
		// n-th event, and a third when a client sees a tool call start: between a stored tool call
		// and its stored result, the window a crash must not leave broken.
		var (
			atEvent  = -1
			atTool   = false
			signal   = make(chan struct{})
			signaled sync.Once
		)
		switch rng.IntN(3) {
		case 1:
			atEvent = 1 + rng.IntN(30)
		case 2:
			atTool = true
		}
		for c := 0; c < 2; c++ {
			prompt := crashPrompts[rng.IntN(len(crashPrompts))]
			if atTool {
				prompt = crashPrompts[rng.IntN(2)] // one that calls a tool
			}
			body := map[string]any{"message": prompt}
			if c == 0 && len(sessions) > 0 {
				body["session_id"] = sessions[rng.IntN(len(sessions))]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 0
				got, session, err := streamUntilCut(ctx, srv.url, body, func(ev sseEvent) {
					if n++; n == atEvent || atTool && ev.Event == "tool_call" {
						signaled.Do(func() { close(signal) })
					}
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
				}
				for id, m := range got {
					acked[id] = m
				}
				if session != "" && !contains(sessions, session) {
					sessions = append(sessions, session)
				}
			}()
		}
		start := time.Now()
		timer := time.NewTimer(time.Duration(rng.IntN(600)) * time.Millisecond)
		if atEvent > 0 || atTool {
			timer.Reset(5 * time.Second) // in case neither chat gets that far
		}
		select {
		case <-timer.C:
		case <-signal:
			timer.Stop()
		}
		srv.kill(t)
		delay := time.Since(start).Round(time.Millisecond)
		wg.Wait()
		cancel()
		for _, err := range errs {
			t.Fatalf("kill %d: %v", k, err)
		}
		srv = startChild(t, dbArgs...)
		waitIdle(t, srv.url, sessions) // the runs taken over go on to their end
		if bytes.Contains(srv.logs.Bytes(), []byte("taking over a run")) {
			resumed++
		}
		checkAfterCrash(t, k, delay, srv.url, sessions, acked)
	}
	srv.kill(t)
	if len(acked) == 0 {
		t.Fatal("no message was ever acknowledged: the kills all came too early to test anything")
	}
	t.Logf("%d kills, %d sessions, %d acknowledged messages checked, %d restarts took over runs",
		kills, len(sessions), len(acked), resumed)
}

// streamUntilCut posts a streamed chat and collects the acknowledged messages until the stream
// ends or is cut by the kill, calling onEvent after each event. A request the kill refused is not
// an error.
func streamUntilCut(ctx context.Context, url string, body map[string]any, onEvent func(sseEvent)) (map[string]parley.Message, string, error) {
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/chat/stream", bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", nil // killed before it answered
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusConflict {
			return nil, "", nil // the continued session still had a run (killed just after start)
		}
		return nil, "", fmt.Errorf("chat/stream: %d %s", resp.StatusCode, msg)
	}
	got := map[string]parley.Message{}
	session := ""
	err = scanSSE(resp.Body, func(ev sseEvent) bool {
		if ev.Data.SessionID != "" {
			session = ev.Data.SessionID
		}
		if (ev.Event == "record" || ev.Event == "tool_result") && ev.Data.Message != nil {
			got[ev.Data.Message.ID] = *ev.Data.Message
		}
		onEvent(ev)
		return true
	})
	return got, session, err
}

func checkAfterCrash(t *testing.T, k int, delay time.Duration, url string, sessions []string, acked map[string]parley.Message) {
	t.Helper()
	stored := map[string]parley.Message{}
	for _, s := range sessions {
		msgs := getAllMessages(t, url, s)
		view := make([]parley.Message, len(msgs))
		for i, m := range msgs {
			stored[m.ID] = m
			view[i] = m.OpenAI()
			if m.Seq != int64(i+1) {
				t.Fatalf("kill %d (after %v): session %s: message %d has seq %d", k, delay, s, i, m.Seq)
			}
		}
		if err := parley.CheckHistory(view); err != nil {
			t.Fatalf("kill %d (after %v): session %s is not a valid OpenAI history: %v", k, delay, s, err)
		}
	}
	for id, want := range acked {
		got, ok := stored[id]
		if !ok {
			t.Fatalf("kill %d (after %v): acknowledged %s message %s lost", k, delay, want.Role, id)
		}
		wj, _ := json.Marshal(want)
		gj, _ := json.Marshal(got)
		if !bytes.Equal(wj, gj) {
			t.Fatalf("kill %d: message %s changed:\n sent %s\n read %s", k, id, wj, gj)
		}
	}
}

// waitIdle waits until no session has an active run.
func waitIdle(t *testing.T, url string, sessions []string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range sessions {
		for {
			resp, err := http.Get(url + "/api/v1/sessions/" + s)
			if err != nil {
				t.Fatal(err)
			}
			var sess struct {
				ActiveRun string `json:"active_run"`
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK { // a refusal says nothing about the run
				t.Fatalf("session %s: %d %s", s, resp.StatusCode, b)
			}
			if err := json.Unmarshal(b, &sess); err != nil {
				t.Fatal(err)
			}
			if sess.ActiveRun == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s: run %s still active 30s after the restart", s, sess.ActiveRun)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// getAllMessages pages through a session's messages.
func getAllMessages(t *testing.T, url, session string) []parley.Message {
	t.Helper()
	var all []parley.Message
	after := int64(0)
	for {
		resp, err := http.Get(fmt.Sprintf("%s/api/v1/sessions/%s/messages?limit=100&after=%d", url, session, after))
		if err != nil {
			t.Fatal(err)
		}
		var page struct {
			Messages []parley.Message
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("messages of %s: %d %s", session, resp.StatusCode, b)
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Messages...)
		if len(page.Messages) < 100 {
			return all
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
