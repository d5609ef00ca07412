package httpapi

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/parleyhq/parley/chat"
)

// checkFastChatRequest fails t unless fastChatRequest(data) either declines (leaving v as it was)
// or decodes exactly what decodeStrict decodes, of a body decodeStrict accepts. It reports
// whether the fast path took data.
func checkFastChatRequest(t *testing.T, data []byte) bool {
	t.Helper()
	sentinel := chat.Request{Message: "untouched", FileIDs: []string{"f"}}
	fast := sentinel
	took := fastChatRequest(data, &fast)
	var strict chat.Request
	err := decodeStrict(data, &strict)
	if !took {
		if !reflect.DeepEqual(fast, sentinel) {
			t.Fatalf("fastChatRequest(%q) declined but changed the request: %+v", data, fast)
		}
		return false
	}
	if err != nil {
		t.Fatalf("fastChatRequest(%q) took a body decodeStrict refuses (%v): %+v", data, err, fast)
	}
	if !reflect.DeepEqual(fast, strict) {
		t.Fatalf("fastChatRequest(%q) = %+v, decodeStrict: %+v", data, fast, strict)
	}
	return true
}

func TestFastChatRequestAsDecodeStrict(t *testing.T) {
	for _, c := range []struct {
		body string
		took bool
	}{
		{`{"message":"Tell me something about streaming servers, please."}`, true},
		{` { "message" : "hi" , "session_id":"s1","model":"openai/x","project_id":"p","parent_id":"m" } ` + "\n", true},
		{`{}`, true},
		{`{"message":"tab\there \"quoted\" back\\slash \/ \b\f\n\r ünïcödé 日本"}`, true},
		{`{"message":""}`, true},
		{`{"message":"\u00e9"}`, false},               // \u: encoding/json's
		{`{"message":"\ud800"}`, false},               // a lone surrogate: U+FFFD by encoding/json
		{`{"Message":"hi"}`, false},                   // a name in other case: encoding/json matches it
		{`{"message":"a","message":"b"}`, false},      // repeated: the last wins in encoding/json
		{`{"message":"hi","file_ids":["f1"]}`, false}, // not a string member
		{`{"message":null}`, false},
		{`{"message":1}`, false},
		{`{"message":"hi","unknown":"x"}`, false},
		{`{"message":"hi"}{}`, false},
		{`{"message":"hi"} x`, false},
		{`{"message":"hi",}`, false},
		{`{"message":"hi"`, false},
		{`{"message":"h` + "\x01" + `i"}`, false},
		{`{"message":"h\xffi"}`, false},
		{`{"message":"h\xi"}`, false},
		{`[]`, false},
		{``, false},
		{`{"message" "hi"}`, false},
		{`{"message":"hi" "model":"m"}`, false},
	} {
		if took := checkFastChatRequest(t, []byte(c.body)); took != c.took {
			t.Errorf("fastChatRequest(%q) took it: %v, want %v", c.body, took, c.took)
		}
	}
}

// Random bodies built from the pieces a chat request is made of, well formed or not.
func TestFastChatRequestRandomBodies(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 7))
	keys := []string{"message", "session_id", "model", "project_id", "parent_id", "Model", "file_ids", "x"}
	texts := []string{"", "hi", `a\"b`, `\\`, `\n\t`, `\/`, "é日", `\u0041`, "\x7f", `\q`, `"`, "\x00"}
	values := []string{"null", "1", "[]", `["a"]`, "true", "{}"}
	spaces := []string{"", " ", "\n", "\t\r "}
	took := 0
	for range 20000 {
		var b strings.Builder
		b.WriteString(spaces[rng.IntN(len(spaces))] + "{")
		for m := rng.IntN(4); m > 0; m-- {
			b.WriteString(spaces[rng.IntN(len(spaces))] + `"` + keys[rng.IntN(len(keys))] + `"` + spaces[rng.IntN(len(spaces))] + ":")
			if rng.IntN(8) == 0 {
				b.WriteString(values[rng.IntN(len(values))])
			} else {
				b.WriteString(`"`)
				for k := rng.IntN(3); k > 0; k-- {
					b.WriteString(texts[rng.IntN(len(texts))])
				}
				b.WriteString(`"`)
			}
			if m > 1 || rng.IntN(20) == 0 {
				b.WriteString(",")
			}
		}
		b.WriteString(spaces[rng.IntN(len(spaces))] + "}")
		if rng.IntN(20) == 0 {
			b.WriteString("{}")
		}
		if checkFastChatRequest(t, []byte(b.String())) {
			took++
		}
	}
	if took < 1000 {
		t.Fatalf("the fast path took %d bodies of 20,000: the generator hardly exercises it", took)
	}
}

func FuzzFastChatRequest(f *testing.F) {
	for _, s := range []string{`{"message":"hi"}`, `{"message":"a\nb","model":"m"}`, `{}`, `{"message":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkFastChatRequest(t, data) })
}

// A chat's body of the common shape is decoded without encoding/json: its string and the
// request, not a decoder, its buffer and its scanner.
func TestChatBodyDecodeAllocations(t *testing.T) {
	spec := jsonBody[chat.Request](false, nil)
	data := []byte(`{"message":"Tell me something about streaming servers, please."}`)
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := spec.decode(data); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Fatalf("decoding a chat's body: %v allocations, want at most 2 (the request and its message)", allocs)
	}
}

func BenchmarkChatBodyDecode(b *testing.B) {
	spec := jsonBody[chat.Request](false, nil)
	data := []byte(`{"message":"Tell me something about streaming servers, please.","model":"openai/bench-model"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := spec.decode(data); err != nil {
			b.Fatal(err)
		}
	}
}
