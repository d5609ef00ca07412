package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// TestForkKeepsArtifactsOfDeletedSource: the model makes an artifact (two versions) in a chat
// that is then forked. The fork may read it but not change it (update_artifact says why), and
// when the source is deleted the artifact, every version, is still served and is the fork's.
func TestForkKeepsArtifactsOfDeletedSource(t *testing.T) {
	onBothStores(t, testForkKeepsArtifactsOfDeletedSource)
}

func testForkKeepsArtifactsOfDeletedSource(t *testing.T, args []string) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	base := startInProcess(t, nil, append([]string{"--openai-base-url", hs.URL + "/v1", "--openai-api-key", "sk-test",
		"--model", "openai/gpt-4o", "--artifacts"}, args...)...)
	call := func(name string, a map[string]any) llmtest.Turn {
		b, _ := json.Marshal(a)
		return llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_" + name, Type: "function",
			Function: parley.FunctionCall{Name: name, Arguments: string(b)}}}}
	}
	type listed struct {
		Artifacts []struct {
			parley.Artifact
			RenderURL string `json:"render_url"`
		} `json:"artifacts"`
	}

	fake.Enqueue(call("create_artifact", map[string]any{"type": "markdown", "title": "Plan", "content": "# Plan\n\nStep one.\n"}),
		llmtest.Turn{Content: "Here is the plan."})
	src, _, errs := chatTurn(t, base, "", "", "Write a plan.")
	var list listed
	if code := getJSON(t, base+"/api/v1/sessions/"+src+"/artifacts", &list); len(errs) > 0 || code != 200 || len(list.Artifacts) != 1 {
		t.Fatalf("the source's artifacts: %d %+v, errors %+v", code, list, errs)
	}
	id := list.Artifacts[0].ID
	fake.Enqueue(call("update_artifact", map[string]any{"id": id, "content": "# Plan\n\nStep two.\n"}),
		llmtest.Turn{Content: "Updated."})
	if _, answer, errs := chatTurn(t, base, src, "", "Add step two."); len(errs) > 0 || answer != "Updated." {
		t.Fatalf("update in the source: %q %+v", answer, errs)
	}

	msgs := getMessages(t, base, src)
	code, raw := postJSON(t, base+"/api/v1/sessions/"+src+"/fork", map[string]string{"message_id": msgs[len(msgs)-1].ID})
	var forked struct{ Session parley.Session }
	if code != 201 || json.Unmarshal(raw, &forked) != nil || forked.Session.ID == "" {
		t.Fatalf("fork: %d %s", code, raw)
	}
	fork := forked.Session.ID

	// The fork may not change it: the source shows it too.
	fake.Enqueue(call("update_artifact", map[string]any{"id": id, "content": "# Plan\n\nStep three.\n"}),
		llmtest.Turn{Content: "I could not."})
	if _, answer, errs := chatTurn(t, base, fork, "", "Add step three."); len(errs) > 0 || answer != "I could not." {
		t.Fatalf("update in the fork: %q %+v", answer, errs)
	}
	var result string
	for _, m := range getMessages(t, base, fork) {
		if m.Role == parley.RoleTool && m.ToolCallID == "call_update_artifact" {
			result = m.Content.String()
		}
	}
	if !strings.Contains(result, "made before this conversation was forked") || !strings.Contains(result, "call create_artifact") {
		t.Fatalf("the fork's update_artifact result: %q", result)
	}

	// Read from the fork's side while the source exists, and after it was deleted.
	check := func(when, session string) {
		t.Helper()
		for v, want := range map[int]string{1: "Step one.", 2: "Step two."} {
			var a parley.Artifact
			u := base + "/api/v1/artifacts/" + id + "?version=" + strconv.Itoa(v)
			if code := getJSON(t, u, &a); code != 200 || !strings.Contains(a.Content, want) || a.SessionID != session {
				t.Fatalf("%s: GET version %d: %d %+v; want it in session %s", when, v, code, a, session)
			}
		}
	}
	check("before the source was deleted", src)
	req, _ := http.NewRequest("DELETE", base+"/api/v1/sessions/"+src, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("delete the source: %d", resp.StatusCode)
	}
	check("after the source was deleted", fork)
	list = listed{}
	if code := getJSON(t, base+"/api/v1/sessions/"+fork+"/artifacts", &list); code != 200 || len(list.Artifacts) != 1 ||
		list.Artifacts[0].ID != id || list.Artifacts[0].Version != 2 {
		t.Fatalf("the fork's artifacts after the source was deleted: %d %+v", code, list)
	}
	page, err := http.Get(base + list.Artifacts[0].RenderURL)
	if err != nil {
		t.Fatal(err)
	}
	page.Body.Close()
	if page.StatusCode != 200 {
		t.Fatalf("the artifact's page after the source was deleted: %d", page.StatusCode)
	}
}
