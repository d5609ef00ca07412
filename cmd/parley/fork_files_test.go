package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/files/filestest"
	"github.com/parleyhq/parley/images"
	"github.com/parleyhq/parley/provider/llmtest"
	"github.com/parleyhq/parley/store/postgres/pgtest"
)

// TestForkKeepsFilesOfDeletedSource: a chat with an attached file in which the model made an
// image (generate_image) is forked, and the source session deleted. The fork's copied messages
// still refer to the files, which are still served (the attachment by id, the image by the signed
// URL its tool result names), and the model's next request in the fork carries them both.
func TestForkKeepsFilesOfDeletedSource(t *testing.T) {
	onBothStores(t, testForkKeepsFilesOfDeletedSource)
}

func testForkKeepsFilesOfDeletedSource(t *testing.T, args []string) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	png := filestest.PNG(6, 6)
	imgs := fakeOpenAIImages(t, png)
	base := startInProcess(t, map[string]string{"IMG_KEY": "sk-img"}, append([]string{"--openai-base-url", hs.URL + "/v1",
		"--openai-api-key", "sk-test", "--model", "openai/gpt-4o", "--image-backend", "openai", "--image-model", "dall-e-2",
		"--image-base-url", imgs.URL + "/v1", "--image-api-key-env", "IMG_KEY"}, args...)...)

	notes := []byte("# Fork notes\n\nThe launch code word is heliotrope.\n")
	fid := uploadFiles(t, base, []string{"notes.md"}, map[string][]byte{"notes.md": notes})[0]
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_i", Type: "function",
		Function: parley.FunctionCall{Name: "generate_image", Arguments: `{"prompt":"a small square","size":"256x256"}`}}}},
		llmtest.Turn{Content: "Here is your square."}, llmtest.Turn{Content: "Still here."})
	src := chatWithFiles(t, base, "", "", "Read the notes and draw a square.", []string{fid})
	msgs := getMessages(t, base, src)
	var imageURL, imageID string
	for _, m := range msgs {
		var r images.Result
		if m.Role == parley.RoleTool && json.Unmarshal([]byte(m.Content.String()), &r) == nil && len(r.Images) == 1 {
			imageURL, imageID = r.Images[0].URL, r.Images[0].FileID
		}
	}
	if imageURL == "" || imageID == "" {
		t.Fatalf("no image in the tool result: %+v", msgs)
	}

	code, raw := postJSON(t, base+"/api/v1/sessions/"+src+"/fork", map[string]string{"message_id": msgs[len(msgs)-1].ID})
	var forked struct{ Session parley.Session }
	if code != 201 || json.Unmarshal(raw, &forked) != nil || forked.Session.ID == "" {
		t.Fatalf("fork: %d %s", code, raw)
	}
	fork := forked.Session.ID
	req, _ := http.NewRequest("DELETE", base+"/api/v1/sessions/"+src, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Fatalf("delete the source: %d", resp.StatusCode)
	}

	// The files are still served, and are the fork's.
	for _, c := range []struct {
		path string
		want []byte
	}{{"/api/v1/files/" + fid + "/content", notes}, {imageURL, png}} {
		r, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if r.StatusCode != 200 || !bytes.Equal(got, c.want) {
			t.Fatalf("GET %s after the source was deleted: %d %.80q", c.path, r.StatusCode, got)
		}
	}
	for _, id := range []string{fid, imageID} {
		var meta parley.File
		if code := getJSON(t, base+"/api/v1/files/"+id, &meta); code != 200 || meta.SessionID != fork {
			t.Fatalf("file %s: %d, in session %q, want the fork %q", id, code, meta.SessionID, fork)
		}
	}

	// The model's next request in the fork is sent both.
	n := len(fake.Requests())
	if _, answer, errs := chatTurn(t, base, fork, "", "What was the code word?"); len(errs) > 0 || answer != "Still here." {
		t.Fatalf("answer %q, errors %+v", answer, errs)
	}
	reqs := fake.Requests()[n:]
	if len(reqs) != 1 {
		t.Fatalf("%d model requests in the fork", len(reqs))
	}
	body := string(reqs[0].Raw)
	for _, w := range []string{"The launch code word is heliotrope.", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)} {
		if !strings.Contains(body, w) {
			t.Errorf("the fork's model request lacks %.60q:\n%.2000s", w, body)
		}
	}
}

// onBothStores runs fn as a subtest on SQLite (a file of the server's own) and on PostgreSQL (a
// schema of the test's), args being the server's flags that choose the store.
func onBothStores(t *testing.T, fn func(t *testing.T, args []string)) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			var args []string
			if kind == "postgres" {
				args = []string{"--database-url", pgtest.Schema(t)}
			}
			fn(t, args)
		})
	}
}
