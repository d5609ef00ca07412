package openai

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/parleyhq/parley"
)

// fastChunkCorpus holds chunks as providers send them and the edges of what fastChunk reads
// itself: it must decode each exactly as encoding/json does, or leave it to encoding/json.
var fastChunkCorpus = []string{
	`{"choices":[{"delta":{"content":"","refusal":null,"role":"assistant"},"finish_reason":null,"index":0,"logprobs":null}],"created":1795540253,"id":"chatcmpl-dn3","model":"m","object":"chat.completion.chunk","system_fingerprint":"fp_parley_mock","usage":null}`,
	`{"choices":[{"delta":{"content":"You said: hi\n\n(This is \"Parley\"\\ \/ \t\r\b\f)"},"finish_reason":null,"index":0,"logprobs":null}],"created":1,"id":"c","usage":null}`,
	`{"choices":[{"delta":{},"finish_reason":"stop","index":0,"logprobs":null}],"created":1,"id":"c","usage":null}`,
	`{"choices":[],"created":1795540253,"id":"c","usage":{"prompt_tokens":28,"completion_tokens":42,"total_tokens":70}}`,
	`{"id":"c","object":"chat.completion.chunk","created":1,"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":19,"completion_tokens":10,"total_tokens":29,"prompt_tokens_details":{"cached_tokens":3,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":5,"audio_tokens":0,"accepted_prediction_tokens":0}}}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"Let me think…"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"thinking"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":{"text":"x"}}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":null}}]}`,
	`{"choices":[{"index":0,"delta":{"refusal":"I can't"}}]}`,
	`{"choices":[{"index":1,"delta":{"content":"second"}},{"index":0,"delta":{"content":"first"}}]}`,
	`{"choices":[{"index":0,"delta":{"tool_calls":null,"content":"x"}}]}`,
	"  {\n \"choices\" : [ { \"index\" : 0 , \"delta\" : { \"content\" : \"a\" } } ] , \"usage\" : null }\r\n",
	`{"choices":[{"index":0,"delta":{"content":"é ü 日本 😀"}}]}`,
	`{"choices":[{"index":-0,"delta":{"content":null},"finish_reason":"length"}],"x":[1,-2.5e+3,0.1,true,false,null,{"a":[]},"s\u00e9"]}`,
	`{"choices":null,"usage":{"prompt_tokens":null,"completion_tokens":1,"total_tokens":0,"prompt_tokens_details":null,"completion_tokens_details":{}}}`,
	`{"choices":[{"index":null,"delta":null,"finish_reason":null}]}`,
	`{}`,
	// Left to encoding/json.
	`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"caf\u00e9 \ud83d\ude00 \ud800"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"a"},{"type":"image"}]}}]}`,
	`{"choices":[{"index":0,"delta":{"Content":"case"}}]}`,
	`{"Choices":[{"index":0,"delta":{"content":"case"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a","content":"b"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}],"choices":[{"index":0}]}`,
	`{"choices":[{"index":1.0,"delta":{"content":"a"}}]}`,
	`{"choices":[{"index":"0","delta":{"content":"a"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":5}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}],"error":null}`,
	`{"error":{"message":"overloaded","type":"server_error"}}`,
	`{"choices":[{"index":0,"delta":{"content":"bad \xff utf8"}}]}`,
	`{"choices":[{"index":0,"delta":{"ſ":"long s"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}]} x`,
	`{"choices":[{"index":0,"delta":{"content":"a"}}]`,
	`{"choices":[{"index":0,"delta":{"content":"a\x01"}}]}`,
	`{"choices":[{"index":0,"delta":{"content":"a"}},]}`,
	`{"usage":{"prompt_tokens":99999999999999999999}}`,
	`{"x":01}`,
	`{"x":[1,]}`,
	`{"x":tru}`,
	`[]`,
	`null`,
	``,
}

// checkFastChunk fails t if fastChunk decodes data other than encoding/json would.
func checkFastChunk(t *testing.T, data []byte) (fast bool) {
	t.Helper()
	var got, want wireChunk
	if !fastChunk(data, &got) {
		return false
	}
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatalf("fastChunk took %q, which encoding/json refuses: %v", data, err)
	}
	if len(got.Choices) == 0 && len(want.Choices) == 0 {
		got.Choices, want.Choices = nil, nil
	}
	if !reflect.DeepEqual(got, want) {
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		t.Fatalf("fastChunk(%q)\n got  %s\n want %s", data, gj, wj)
	}
	return true
}

func TestFastChunkDecodesAsEncodingJSON(t *testing.T) {
	for _, c := range fastChunkCorpus {
		checkFastChunk(t, []byte(c))
	}
	// The shapes a streamed answer is made of are read without encoding/json.
	for _, c := range fastChunkCorpus[:18] {
		var ch wireChunk
		if !fastChunk([]byte(c), &ch) {
			t.Errorf("fastChunk left %s to encoding/json", c)
		}
	}
	for _, c := range fastChunkCorpus[18:] {
		var ch wireChunk
		if fastChunk([]byte(c), &ch) {
			t.Errorf("fastChunk read %q itself, which it should leave to encoding/json", c)
		}
	}
}

func FuzzFastChunk(f *testing.F) {
	for _, c := range fastChunkCorpus {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkFastChunk(t, data)
	})
}

// A content chunk costs its text and nothing else; encoding/json took a dozen allocations.
func TestContentChunkAllocations(t *testing.T) {
	data := []byte(fastChunkCorpus[1])
	d := newChunkDecoder()
	out := make([]parley.StreamEvent, 0, 4)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		out, err = d.decode(out[:0], data)
		if err != nil || len(out) != 1 {
			t.Fatalf("decode: %v, %d events", err, len(out))
		}
	})
	if allocs > 2 {
		t.Errorf("a content chunk: %v allocations, want at most 2 (the text, its unescaping)", allocs)
	}
}

func BenchmarkDecodeChunk(b *testing.B) {
	for _, bc := range []struct {
		name string
		data string
	}{
		{"content", fastChunkCorpus[1]},
		{"usage", fastChunkCorpus[4]},
	} {
		b.Run(bc.name, func(b *testing.B) {
			d := newChunkDecoder()
			out := make([]parley.StreamEvent, 0, 4)
			data := []byte(bc.data)
			b.ReportAllocs()
			for b.Loop() {
				out, _ = d.decode(out[:0], data)
			}
		})
	}
}
