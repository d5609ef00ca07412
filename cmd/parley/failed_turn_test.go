package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// retryStream posts a retry of the session's failed turn and reads its run to the done event,
// returning the final answer and the error events.
func retryStream(t *testing.T, url, session string) (string, []parley.Event) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/api/v1/sessions/"+session+"/retry", nil)
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		sc := bufio.NewScanner(resp.Body)
		sc.Scan()
		t.Fatalf("retry: %d %s", resp.StatusCode, sc.Text())
	}
	var answer string
	var errs []parley.Event
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		switch ev.Data.Type {
		case parley.EventRecord:
			if m := ev.Data.Message; m.Role == parley.RoleAssistant && len(m.ToolCalls) == 0 {
				answer = m.Content.String()
			}
		case parley.EventError:
			errs = append(errs, ev.Data)
		case parley.EventDone:
			return false
		}
		return true
	})
	return answer, errs
}

// TestFailedTurnDoesNotPoisonTheNext: for each wire format that merges adjacent user messages
// (Anthropic, Gemini) and for OpenAI, a turn whose stream is cut keeps what was streamed, marked
// as failed; the next turn's upstream request does not carry the unanswered question; a retry
// asks it again exactly once, without the partial answer; and the stored history stays valid.
func TestFailedTurnDoesNotPoisonTheNext(t *testing.T) {
	fake := llmtest.NewServer(llmtest.WithChunkSize(3))
	hs := httptest.NewServer(fake)
	defer hs.Close()
	url := startInProcess(t, map[string]string{"TEST_ANTHROPIC_KEY": "k"}, "--config", fourProviders(t, hs.URL))
	const partial = "This answer will be cut in the middle."
	for _, model := range []string{"oa/gpt-4o", "claude/claude-sonnet-4-5", "gem/gemini-3-pro-preview"} {
		t.Run(strings.Split(model, "/")[0], func(t *testing.T) {
			// The turn fails after tokens reached the client (a cut stream is never retried).
			fake.Enqueue(llmtest.Turn{Content: partial, CutAfter: 6})
			session, _, errs := chatTurn(t, url, "", model, "Tell me about the UNANSWERED-ONE.")
			if len(errs) != 1 || errs[0].Error.Code != parley.ECUpstream {
				t.Fatalf("error events %+v, want one upstream error", errs)
			}
			msgs := validHistory(t, url, session)
			last := msgs[len(msgs)-1]
			if len(msgs) != 2 || last.Role != parley.RoleAssistant || last.Error != parley.ECUpstream ||
				last.Content.String() == "" || !strings.HasPrefix(partial, last.Content.String()) {
				t.Fatalf("stored after the failure: %+v", msgs)
			}

			// The records view shows the failure too.
			resp, err := http.Get(url + "/api/v1/sessions/" + session + "/records")
			if err != nil {
				t.Fatal(err)
			}
			var recs struct{ Records []parley.Record }
			err = json.NewDecoder(resp.Body).Decode(&recs)
			resp.Body.Close()
			if n := len(recs.Records); err != nil || n != 2 || recs.Records[n-1].Error != parley.ECUpstream {
				t.Fatalf("records: %+v %v", recs.Records, err)
			}

			// The next turn: its upstream requests hold the new question only.
			before := len(fake.Requests())
			_, answer, errs := chatTurn(t, url, session, model, "What is 1+1?")
			if len(errs) > 0 || !strings.Contains(answer, "= 2") {
				t.Fatalf("next turn: %q %+v", answer, errs)
			}
			reqs := fake.Requests()[before:]
			if len(reqs) == 0 {
				t.Fatal("no upstream request for the next turn")
			}
			for _, r := range reqs {
				if raw := string(r.Raw); strings.Contains(raw, "UNANSWERED-ONE") || strings.Contains(raw, last.Content.String()) {
					t.Fatalf("the next turn's request carries the failed turn: %s", raw)
				}
			}

			// A provider error before any token (a 400 is not retried): an empty failed turn,
			// and again no trace of it in the next turn.
			fake.Enqueue(llmtest.Turn{Status: 400, ErrorMessage: "bad request"})
			_, _, errs = chatTurn(t, url, session, model, "Tell me about the REFUSED-ONE.")
			if len(errs) != 1 || errs[0].Error.Code != parley.ECUpstream {
				t.Fatalf("error events %+v, want one upstream error", errs)
			}
			msgs = validHistory(t, url, session)
			if last := msgs[len(msgs)-1]; last.Error != parley.ECUpstream || last.Content.String() != "" {
				t.Fatalf("stored after a refused call: %+v", last)
			}
			before = len(fake.Requests())
			if _, answer, errs := chatTurn(t, url, session, model, "What is 2+3?"); len(errs) > 0 || !strings.Contains(answer, "= 5") {
				t.Fatalf("turn after a refused call: %q %+v", answer, errs)
			}
			for _, r := range fake.Requests()[before:] {
				if raw := string(r.Raw); strings.Contains(raw, "REFUSED-ONE") || strings.Contains(raw, "UNANSWERED-ONE") {
					t.Fatalf("the next turn's request carries a failed turn: %s", raw)
				}
			}

			// Another failure, then a retry: the question is asked again once, without the
			// partial answer.
			fake.Enqueue(llmtest.Turn{Content: partial, CutAfter: 6})
			chatTurn(t, url, session, model, "What is 6*7, RETRIED-TWO?")
			before = len(fake.Requests())
			answer, errs = retryStream(t, url, session)
			if len(errs) > 0 || !strings.Contains(answer, "42") {
				t.Fatalf("retry: %q %+v", answer, errs)
			}
			first := string(fake.Requests()[before].Raw)
			if strings.Count(first, "RETRIED-TWO") != 1 || strings.Contains(first, "UNANSWERED-ONE") || strings.Contains(first, "This answ") {
				t.Fatalf("the retry's request: %s", first)
			}
			msgs = validHistory(t, url, session)
			if f := msgs[len(msgs)-1]; f.Failed() || f.Role != parley.RoleAssistant {
				t.Fatalf("after the retry the session ends with %+v", f)
			}
		})
	}
}
