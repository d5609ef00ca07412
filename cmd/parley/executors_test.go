package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/llmtest"
)

// fakeTavily speaks Tavily's search API: a Bearer key, a JSON body, results with usage.
func fakeTavily(t *testing.T, calls *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodPost || r.URL.Path != "/search" || r.Header.Get("Authorization") != "Bearer tvly-test" {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"detail":{"error":"Unauthorized: missing or invalid API key."}}`)
			return
		}
		io.WriteString(w, `{"query":"parley go","answer":null,"images":[],"results":[`+
			`{"title":"Parley","url":"https://github.com/parleyhq/parley","content":"A conversation server for LLM agents.","score":0.9,"raw_content":null}],`+
			`"response_time":"0.5","usage":{"credits":1},"request_id":"r1"}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// fakeSearXNG speaks a SearXNG instance's JSON API (GET /search?format=json).
func fakeSearXNG(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/search" || r.URL.Query().Get("format") != "json" {
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "<html><body>403 Forbidden</body></html>")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"query":`+strconv.Quote(r.URL.Query().Get("q"))+`,"number_of_results":0,"results":[`+
			`{"url":"https://github.com/parleyhq/parley","title":"Parley on GitHub","content":"A conversation server for LLM agents.","engine":"bing","score":1,"category":"general"},`+
			`{"url":"https://example.com/parley","title":"Parley notes","content":"Notes about it.","engine":"bing","score":0.5,"category":"general"}],`+
			`"answers":[],"corrections":[],"infoboxes":[],"suggestions":[],"unresponsive_engines":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func getJSON(t *testing.T, u string, out any) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == 200 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v: %s", u, err, b)
		}
	}
	return resp.StatusCode
}

func TestExecutorsEndToEnd(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	var searches atomic.Int32
	tavily := fakeTavily(t, &searches)
	base := startInProcess(t, nil, "--openai-base-url", hs.URL+"/v1", "--openai-api-key", "sk-test", "--model", "openai/gpt-4o",
		"--artifacts", "--search-backend", "tavily", "--tavily-base-url", tavily.URL, "--tavily-api-key", "tvly-test")

	// The tools are listed when configured; fetch_url is not.
	names := map[string]bool{}
	for _, tool := range getTools(t, base).Tools {
		names[tool.Name] = true
	}
	if !names["create_artifact"] || !names["update_artifact"] || !names["web_search"] || names["fetch_url"] {
		t.Fatalf("tools: %v", names)
	}

	component := "import { useState } from 'react';\nexport default function Counter() {\n  const [n, setN] = useState(0);\n" +
		"  return <button onClick={() => setN(n + 1)}>clicked {n}</button>;\n}\n"
	args, _ := json.Marshal(map[string]any{"type": "react", "title": "Counter", "content": component})
	fake.Enqueue(llmtest.Turn{ToolCalls: []parley.ToolCall{
		{ID: "call_a", Type: "function", Function: parley.FunctionCall{Name: "create_artifact", Arguments: string(args)}},
		{ID: "call_s", Type: "function", Function: parley.FunctionCall{Name: "web_search", Arguments: `{"query":"parley go","count":3}`}},
	}}, llmtest.Turn{Content: "Here is your counter."})

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp := postStream(t, ctx, base, map[string]any{"message": "Make me a counter and search for parley."})
	var (
		session string
		art     *parley.Artifact
		search  *parley.WebSearchInfo
		seqs    []int64
	)
	readSSE(t, resp.Body, func(ev sseEvent) bool {
		seqs = append(seqs, ev.Data.Seq)
		switch ev.Data.Type {
		case parley.EventStart:
			session = ev.Data.SessionID
		case parley.EventArtifact:
			if ev.Event != "artifact" {
				t.Errorf("SSE event name %q", ev.Event)
			}
			art = ev.Data.Artifact
		case parley.EventWebSearch:
			search = ev.Data.WebSearch
		case parley.EventError:
			t.Errorf("error event: %+v", ev.Data.Error)
		}
		return ev.Data.Type != parley.EventDone
	})
	resp.Body.Close()
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("sequence numbers not consecutive: %v", seqs)
		}
	}
	if art == nil || art.Version != 1 || art.Type != parley.ArtifactReact || art.SessionID != session || !strings.Contains(art.Content, "useState") {
		t.Fatalf("artifact event: %+v", art)
	}
	if search == nil || search.Query != "parley go" || search.ToolCallID != "call_s" || len(search.Sources) != 1 ||
		search.Sources[0].URL != "https://github.com/parleyhq/parley" {
		t.Fatalf("web_search event: %+v", search)
	}
	// The model got the formatted results.
	reqs := fake.Requests()
	if len(reqs) != 2 || !strings.Contains(fmt.Sprint(reqs[1].Messages), "WEB SEARCH RESULTS\nQuery: parley go\n\nSource 1: Parley\nURL: https://github.com/parleyhq/parley") {
		t.Fatalf("second model request lacks the search context")
	}

	// The API lists and returns it, with a signed page URL.
	var list struct {
		Artifacts []struct {
			parley.Artifact
			RenderURL string `json:"render_url"`
		} `json:"artifacts"`
	}
	if code := getJSON(t, base+"/api/v1/sessions/"+session+"/artifacts", &list); code != 200 || len(list.Artifacts) != 1 || list.Artifacts[0].ID != art.ID {
		t.Fatalf("list: %d %+v", code, list)
	}
	var one struct {
		parley.Artifact
		RenderURL string `json:"render_url"`
	}
	if code := getJSON(t, base+"/api/v1/artifacts/"+art.ID+"?version=1", &one); code != 200 || one.Content != art.Content || one.RenderURL == "" {
		t.Fatalf("get: %d %+v", code, one)
	}
	if code := getJSON(t, base+"/api/v1/artifacts/"+art.ID+"?version=2", nil); code != 404 {
		t.Fatalf("version 2: %d", code)
	}
	if code := getJSON(t, base+"/api/v1/artifacts/"+art.ID+"?version=x", nil); code != 400 {
		t.Fatalf("version x: %d", code)
	}

	// The page: React compiled in, sandboxed, no network.
	page, err := http.Get(base + one.RenderURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(page.Body)
	page.Body.Close()
	csp := page.Header.Get("Content-Security-Policy")
	if page.StatusCode != 200 || page.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %s", page.StatusCode, page.Header)
	}
	for _, want := range []string{"sandbox allow-scripts;", "default-src 'none'", "connect-src 'none'", "form-action 'none'", "script-src 'nonce-"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "allow-same-origin") || strings.Contains(csp, "'self'") || strings.Contains(csp, "http") {
		t.Errorf("CSP %q lets the page reach an origin", csp)
	}
	nonce := regexp.MustCompile(`'nonce-([A-Za-z0-9_-]+)'`).FindStringSubmatch(csp)
	if nonce == nil || !strings.Contains(string(body), `<script nonce="`+nonce[1]+`">`) || !strings.Contains(string(body), "createRoot") ||
		strings.Contains(string(body), "https://") && strings.Contains(string(body), "<script src") {
		t.Fatalf("page body does not carry its compiled script under the nonce")
	}
	if page.Header.Get("Set-Cookie") != "" || page.Header.Get("X-Content-Type-Options") != "nosniff" || page.Header.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("page headers: %v", page.Header)
	}
	// The signature is the page's authorization: altered, missing or for another version, refused.
	u, _ := url.Parse(one.RenderURL)
	q := u.Query()
	for name, mod := range map[string]func(url.Values){
		"altered sig":   func(v url.Values) { v.Set("sig", strings.Repeat("A", len(v.Get("sig")))) },
		"no sig":        func(v url.Values) { v.Del("sig") },
		"other version": func(v url.Values) { v.Set("version", "2") },
		"later expiry":  func(v url.Values) { v.Set("exp", "99999999999") },
	} {
		v := url.Values{}
		for k, vs := range q {
			v[k] = append([]string(nil), vs...)
		}
		mod(v)
		if code := getJSON(t, base+u.Path+"?"+v.Encode(), nil); code != 403 {
			t.Errorf("%s: %d, want 403", name, code)
		}
	}

	// The search's cost is in the caller's usage.
	var usage struct {
		Search parley.SearchUsage `json:"search"`
	}
	if code := getJSON(t, base+"/api/v1/usage", &usage); code != 200 || usage.Search.Calls != 1 || usage.Search.Dollars != 0.008 ||
		usage.Search.ByBackend["tavily"].Credits != 1 {
		t.Fatalf("usage: %d %+v", code, usage)
	}

	// The WebSocket replays the same events, the artifact as an "artifact" frame.
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/api/ws?convId="+session+"&after=0",
		&websocket.DialOptions{Subprotocols: []string{"parley.v1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(8 << 20)
	seen := map[string]bool{}
	for !seen["artifact"] || !seen["web_search"] {
		_, data, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("websocket: %v (seen %v)", err, seen)
		}
		var f struct {
			Type string       `json:"type"`
			Seq  int64        `json:"seq"`
			Data parley.Event `json:"data"`
		}
		json.Unmarshal(data, &f)
		seen[f.Type] = true
		if f.Type == "artifact" && (f.Data.Artifact == nil || f.Data.Artifact.ID != art.ID || f.Seq == 0) {
			t.Fatalf("artifact frame: %s", data)
		}
	}
}

func TestExecutorSettingsAreChecked(t *testing.T) {
	rejectsEach(t, [][]string{
		{"--search-backend", "google"},
		{"--search-backend", "tavily"},
		{"--search-backend", "brave"},
		{"--search-backend", "searxng"},
		{"--search-backend", "searxng", "--searxng-url", "ftp://x"},
		{"--search-attempts", "0"},
		{"--artifact-url-secret", "short"},
		{"--artifact-url-ttl", "0s"},
		{"--fetch-timeout", "0s"},
	})
}

func TestExecutorToolsAreOffUntilConfigured(t *testing.T) {
	names := func(base string) map[string]bool {
		out := map[string]bool{}
		for _, tool := range getTools(t, base).Tools {
			out[tool.Name] = true
		}
		return out
	}
	off := names(startInProcess(t, nil))
	for _, n := range []string{"create_artifact", "update_artifact", "web_search", "fetch_url"} {
		if off[n] {
			t.Errorf("%s is offered without configuration", n)
		}
	}
	// The keys come from the conventional variables too.
	on := names(startInProcess(t, map[string]string{"BRAVE_API_KEY": "BSA-x"}, "--search-backend", "brave", "--fetch-url"))
	if !on["web_search"] || !on["fetch_url"] || on["create_artifact"] {
		t.Errorf("tools with brave and fetch_url: %v", on)
	}
}

// The artifact model and the rewrite model are called through the provider layer, as any model.
func TestArtifactAndRewriteModelsEndToEnd(t *testing.T) {
	fake := llmtest.NewServer()
	hs := httptest.NewServer(fake)
	defer hs.Close()
	searx := fakeSearXNG(t)
	base := startInProcess(t, nil, "--openai-base-url", hs.URL+"/v1", "--openai-api-key", "sk-test", "--model", "openai/gpt-4o",
		"--artifact-model", "openai/artist", "--search-backend", "searxng", "--searxng-url", searx.URL, "--search-rewrite-model", "openai/small")

	fake.Enqueue(
		llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_a", Type: "function", Function: parley.FunctionCall{Name: "create_artifact",
			Arguments: `{"type":"svg","title":"Dot","instructions":"a red dot"}`}}}},
		// The artifact model's answer: prose, a fence, and a script that is cleaned away.
		llmtest.Turn{Content: "Here:\n```svg\n<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 10 10\"><script>alert(1)</script><circle cx=\"5\" cy=\"5\" r=\"4\" fill=\"red\"/></svg>\n```"},
		llmtest.Turn{ToolCalls: []parley.ToolCall{{ID: "call_s", Type: "function", Function: parley.FunctionCall{Name: "web_search",
			Arguments: `{"query":"what is that parley thing on github?"}`}}}},
		llmtest.Turn{Content: "parley github"}, // the rewrite
		llmtest.Turn{Content: "Done."},
	)
	session, answer, errs := chatTurn(t, base, "", "", "Draw a dot, then search.")
	if len(errs) > 0 || answer != "Done." {
		t.Fatalf("answer %q, errors %+v", answer, errs)
	}
	reqs := fake.Requests()
	if len(reqs) != 5 || reqs[1].Model != "artist" || reqs[3].Model != "small" {
		t.Fatalf("model requests: %d", len(reqs))
	}
	if sys := reqs[1].Messages[0].Content.String(); !strings.Contains(sys, "SVG") {
		t.Fatalf("the artifact model's prompt: %s", sys)
	}
	var list struct {
		Artifacts []parley.Artifact `json:"artifacts"`
	}
	if getJSON(t, base+"/api/v1/sessions/"+session+"/artifacts", &list); len(list.Artifacts) != 1 ||
		!strings.HasPrefix(list.Artifacts[0].Content, "<svg") || strings.Contains(list.Artifacts[0].Content, "script") {
		t.Fatalf("artifacts: %+v", list.Artifacts)
	}
	results := map[string]string{}
	for _, m := range getMessages(t, base, session) {
		if m.Role == parley.RoleTool {
			results[m.ToolCallID] = m.Content.String()
		}
	}
	if !strings.Contains(results["call_a"], "Removed as unsafe: 1 <script> element") {
		t.Fatalf("create_artifact result: %s", results["call_a"])
	}
	if !strings.HasPrefix(results["call_s"], "WEB SEARCH RESULTS\nQuery: parley github\n") {
		t.Fatalf("web_search result: %s", results["call_s"])
	}
}
