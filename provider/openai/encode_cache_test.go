package openai

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/parleyhq/parley"
	"github.com/parleyhq/parley/provider/internal/convert"
)

// referenceRequest is the request as one object, as the encoder wrote it before it was written
// in parts: the parts joined must be the same bytes.
type referenceRequest struct {
	Model               string             `json:"model"`
	Messages            []wireMessage      `json:"messages"`
	Tools               []wireTool         `json:"tools,omitempty"`
	ToolChoice          string             `json:"tool_choice,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
	MaxTokens           int                `json:"max_tokens,omitempty"`
	Stream              bool               `json:"stream"`
	StreamOptions       *wireStreamOptions `json:"stream_options,omitempty"`
}

func referenceEncode(t *testing.T, req *parley.ChatRequest, stream bool, opts EncodeOptions) []byte {
	t.Helper()
	w := referenceRequest{Model: req.Model, Temperature: req.Temperature, Stream: stream}
	for _, m := range req.Messages {
		wm, err := encodeMessage(m.OpenAI(), opts)
		if err != nil {
			t.Fatal(err)
		}
		w.Messages = append(w.Messages, wm)
	}
	for _, tl := range req.Tools {
		params := bytes.TrimSpace(tl.Parameters)
		if len(params) == 0 {
			params = []byte(`{"type":"object","properties":{}}`)
		}
		w.Tools = append(w.Tools, wireTool{Type: "function", Function: wireFunction{Name: tl.Name, Description: tl.Description, Parameters: params}})
	}
	if len(w.Tools) > 0 {
		w.ToolChoice = req.ToolChoice
	}
	if opts.LegacyMaxTokens {
		w.MaxTokens = req.MaxTokens
	} else {
		w.MaxCompletionTokens = req.MaxTokens
	}
	if stream {
		w.StreamOptions = &wireStreamOptions{IncludeUsage: true}
	}
	b, err := convert.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var calculator = parley.ToolSpec{Name: "calculator", Description: "Evaluates <arithmetic> & more",
	Parameters: json.RawMessage(` {"type": "object", "properties": {"expression": {"type": "string"}}, "required": ["expression"]} `)}

// The request written in parts, its tools from the client's cache or not, is byte for byte the
// request written as one object.
func TestEncodeRequestInPartsIsTheOneObject(t *testing.T) {
	temp := 0.25
	msgs := []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text("Be brief <b> & \"exact\"")},
		{Role: parley.RoleUser, Content: parley.Text("What is 2+2?")},
	}
	reqs := []*parley.ChatRequest{
		{Model: "gpt-x", Messages: msgs},
		{Model: "gpt-x", Messages: msgs, Tools: []parley.ToolSpec{calculator}, ToolChoice: "auto", Temperature: &temp, MaxTokens: 100},
		{Model: "gpt-x", Messages: msgs, Tools: []parley.ToolSpec{calculator, {Name: "clock"}}},
		{Model: "gpt-x", Messages: msgs, ToolChoice: "required", MaxTokens: 7},
	}
	var tc toolCache
	for i, req := range reqs {
		for _, stream := range []bool{true, false} {
			for _, opts := range []EncodeOptions{{}, {LegacyMaxTokens: true}} {
				want := referenceEncode(t, req, stream, opts)
				for round, cache := range []*toolCache{nil, &tc, &tc} {
					got, err := encodeRequest(req, stream, opts, cache)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("request %d (stream %v, %+v, round %d):\n got %s\nwant %s", i, stream, opts, round, got, want)
					}
				}
			}
		}
	}
}

// Requests of any mix of messages (text, null or parts, names, reasoning, tool calls and their
// results, HTML characters, U+2028, invalid UTF-8) with any options are written byte for byte
// as the request written as one object, whether the head is written directly or not.
func TestEncodeRequestMessagesAreTheOneObject(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	texts := []string{"", "plain", "<b>html</b> & co", "quote \" back \\", "line\nbreak\t", "\u2028\u2029", "bad \xff utf8", "é 日本"}
	str := func() string { return texts[rng.IntN(len(texts))] }
	roles := []parley.Role{parley.RoleSystem, parley.RoleUser, parley.RoleAssistant, parley.RoleTool}
	var tc toolCache
	for i := range 3000 {
		req := &parley.ChatRequest{Model: str() + "m"}
		for range 1 + rng.IntN(4) {
			m := parley.Message{Role: roles[rng.IntN(len(roles))], Name: str(), Reasoning: str(), ToolCallID: str(), ID: "meta"}
			switch rng.IntN(4) {
			case 0: // null
			case 1:
				m.Content = parley.Parts(parley.Part{Type: "text", Text: str()})
			case 2: // a long prompt (the client keeps a system prompt's encoding), one of a few
				m.Content = parley.Text(strings.Repeat(str()+"x", minCachedPrompt/2+rng.IntN(3)))
			default:
				m.Content = parley.Text(str())
			}
			if rng.IntN(4) == 0 { // encoded for an assistant's message only
				m.ToolCalls = []parley.ToolCall{{ID: str(), Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression": "1 < 2"}`}}}
			}
			req.Messages = append(req.Messages, m)
		}
		if rng.IntN(2) == 0 {
			req.Tools = []parley.ToolSpec{calculator}
		}
		if rng.IntN(2) == 0 {
			temps := []float64{0, 0.7, 1, 2, 1e-7, 1.5e21, -0.25, rng.Float64()}
			req.Temperature = &temps[rng.IntN(len(temps))]
		}
		req.MaxTokens = []int{0, 1, 4096}[rng.IntN(3)]
		req.ToolChoice = []string{"", "auto", "none", "required"}[rng.IntN(4)]
		opts := EncodeOptions{SendReasoning: rng.IntN(2) == 0, SendToolName: rng.IntN(2) == 0, LegacyMaxTokens: rng.IntN(2) == 0}
		stream := rng.IntN(2) == 0
		want := referenceEncode(t, req, stream, opts)
		got, err := encodeRequest(req, stream, opts, &tc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("case %d (%+v):\n got %s\nwant %s", i, opts, got, want)
		}
	}
}

// A temperature that is not a number is refused, as encoding/json refuses it.
func TestEncodeRequestRefusesATemperatureNotANumber(t *testing.T) {
	for _, temp := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		req := &parley.ChatRequest{Model: "m", Temperature: &temp, Messages: []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}}
		if _, err := encodeRequest(req, true, EncodeOptions{}, nil); parley.CodeOf(err) != parley.ECInvalid {
			t.Errorf("temperature %v: %v, want ECInvalid", temp, err)
		}
	}
}

// A client's cache of encoded tools follows the tools offered: a changed schema, description or
// list is encoded anew, and a change to the caller's bytes after a call does not reach the cache.
func TestToolCacheFollowsTheTools(t *testing.T) {
	var tc toolCache
	msgs := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi")}}
	params := []byte(`{"type":"object","properties":{"a":{"type":"string"}}}`)
	spec := parley.ToolSpec{Name: "t", Parameters: params}
	check := func(specs ...parley.ToolSpec) {
		t.Helper()
		req := &parley.ChatRequest{Model: "m", Messages: msgs, Tools: specs}
		got, err := encodeRequest(req, true, EncodeOptions{}, &tc)
		if err != nil {
			t.Fatal(err)
		}
		if want := referenceEncode(t, req, true, EncodeOptions{}); !bytes.Equal(got, want) {
			t.Fatalf("got %s\nwant %s", got, want)
		}
	}
	check(spec)
	copy(params, `{"type":"object","properties":{"b"`) // the caller's bytes change in place
	check(spec)
	check(parley.ToolSpec{Name: "t", Description: "now described", Parameters: params})
	check(spec, parley.ToolSpec{Name: "u"})
	check(spec)
	if _, err := encodeRequest(&parley.ChatRequest{Model: "m", Messages: msgs, Tools: []parley.ToolSpec{{Name: "bad", Parameters: []byte(`{`)}}}, true, EncodeOptions{}, &tc); parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("invalid parameters: %v, want ECInvalid", err)
	}
}

// BenchmarkEncodeRequest encodes bench/gateway's request (a system prompt, one question, the
// built-in tools' schemas) as a client does on every call.
func BenchmarkEncodeRequest(b *testing.B) {
	var specs []parley.ToolSpec
	for _, name := range []string{"calculator", "clock", "web_search", "fetch_url", "todo", "memory"} {
		specs = append(specs, parley.ToolSpec{Name: name, Description: "A tool that does " + name + " for the model, with a longer description of its use.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"input":{"type":"string","description":"what to do"},"limit":{"type":"integer","minimum":1,"maximum":100}},"required":["input"]}`)})
	}
	req := &parley.ChatRequest{Model: "bench-model", Tools: specs, Messages: []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text("You are a helpful assistant. Answer briefly.")},
		{Role: parley.RoleUser, Content: parley.Text("Tell me something about streaming servers, please.")},
	}}
	// A system prompt of 3 KB, as Parley's default one with a project's instructions.
	long := *req
	long.Messages = []parley.Message{
		{Role: parley.RoleSystem, Content: parley.Text(strings.Repeat("You are a helpful assistant: answer briefly, and use the tools <when> needed.\n", 40))},
		req.Messages[1],
	}
	for _, bc := range []struct {
		name  string
		req   *parley.ChatRequest
		cache *toolCache
	}{{"uncached", req, nil}, {"client", req, &toolCache{}}, {"client-long-prompt", &long, &toolCache{}}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := encodeRequest(bc.req, true, EncodeOptions{}, bc.cache); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// Text content is written as json.Marshal writes it, byte for byte, without its reflection.
func TestTextContentAsJSONMarshal(t *testing.T) {
	texts := []string{"", "plain", "quotes \" and \\ back", "<b>html</b> & co", "tab\tnew\nline\r\x00\x1f\x7f",
		"é 日本 😀", "line\u2028para\u2029", "bad \xff\xfe utf8 \xe2\x82", strings.Repeat("long system prompt. ", 200)}
	for _, s := range texts {
		c := parley.Text(s)
		got, err := encodeContent(c, false)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(c)
		if !bytes.Equal(got, want) {
			t.Errorf("encodeContent(%q) = %s, want %s", s, got, want)
		}
	}
	if got, _ := encodeContent(parley.Content{}, false); string(got) != "null" {
		t.Errorf("null content: %s", got)
	}
	text := parley.Text(strings.Repeat("You are a helpful assistant. Answer \"briefly\".\n", 50))
	if n := testing.AllocsPerRun(50, func() { _, _ = encodeContent(text, false) }); n > 1 {
		t.Errorf("text content: %v allocations, want 1", n)
	}
}
