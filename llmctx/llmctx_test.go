package llmctx

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	parley "github.com/parleyhq/parley"
)

// Compact builders for history tables.
func user(s string) parley.Message {
	return parley.Message{Role: parley.RoleUser, Content: parley.Text(s)}
}
func text(s string) parley.Message {
	return parley.Message{Role: parley.RoleAssistant, Content: parley.Text(s)}
}
func calls(ids ...string) parley.Message {
	m := parley.Message{Role: parley.RoleAssistant}
	for _, id := range ids {
		m.ToolCalls = append(m.ToolCalls, parley.ToolCall{ID: id, Type: "function",
			Function: parley.FunctionCall{Name: "tool_" + id, Arguments: `{"q":"` + id + `"}`}})
	}
	return m
}
func result(id string) parley.Message {
	return parley.Message{Role: parley.RoleTool, ToolCallID: id, Name: "tool_" + id, Content: parley.Text("result " + id)}
}

// show renders messages one per line: role, then tool calls as name(args) or a tool result.
func show(msgs []parley.Message) string {
	var b strings.Builder
	for _, m := range msgs {
		switch {
		case m.Role == parley.RoleTool:
			fmt.Fprintf(&b, "tool[%s]: %s\n", m.ToolCallID, m.Content.String())
		case len(m.ToolCalls) > 0:
			var cs []string
			for _, c := range m.ToolCalls {
				cs = append(cs, c.Function.Name+c.Function.Arguments)
			}
			fmt.Fprintf(&b, "assistant calls %s\n", strings.Join(cs, " "))
		default:
			fmt.Fprintf(&b, "%s: %s\n", m.Role, m.Content.String())
		}
	}
	return b.String()
}

// seedHistory is seed 000's example: three user messages, each followed by one tool round.
var seedHistory = []parley.Message{
	user("Msg1"), calls("1"), result("1"), text("Answer1"),
	user("Msg2"), calls("2"), result("2"), text("Answer2"),
	user("Msg3"), calls("3"), result("3"), text("Answer3"),
}

func TestBuildTruncation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []parley.Message
		rounds  int
		want    string
	}{
		{
			// The seed's picture: Tool1 keeps its name only, Tool2 and Tool3 stay whole. With the seed's
			// own formula (threshold = total − rounds) that is what two kept rounds give; Result1
			// stays as a placeholder so that the list remains valid for the API.
			name: "seed example, two rounds kept", history: seedHistory, rounds: 2,
			want: `user: Msg1
assistant calls tool_1{}
tool[1]: [omitted: result of an earlier tool call]
assistant: Answer1
user: Msg2
assistant calls tool_2{"q":"2"}
tool[2]: result 2
assistant: Answer2
user: Msg3
assistant calls tool_3{"q":"3"}
tool[3]: result 3
assistant: Answer3
`,
		},
		{
			name: "seed example, three rounds kept: threshold 0, nothing shortened", history: seedHistory, rounds: 3,
			want: show(seedHistory),
		},
		{
			name: "seed example, default rounds (10)", history: seedHistory, rounds: 0,
			want: show(seedHistory),
		},
		{
			name: "seed example, one round kept", history: seedHistory, rounds: 1,
			want: `user: Msg1
assistant calls tool_1{}
tool[1]: [omitted: result of an earlier tool call]
assistant: Answer1
user: Msg2
assistant calls tool_2{}
tool[2]: [omitted: result of an earlier tool call]
assistant: Answer2
user: Msg3
assistant calls tool_3{"q":"3"}
tool[3]: result 3
assistant: Answer3
`,
		},
		{
			name: "negative keeps none whole", history: seedHistory[:4], rounds: -1,
			want: `user: Msg1
assistant calls tool_1{}
tool[1]: [omitted: result of an earlier tool call]
assistant: Answer1
`,
		},
		{
			// A round is one assistant message with all its parallel calls: with two rounds kept,
			// three parallel calls of the latest round stay whole, and so does the round before.
			name: "parallel calls count as one round",
			history: []parley.Message{user("q"), calls("x"), result("x"), calls("y"), result("y"),
				calls("a", "b", "c"), result("b"), result("a"), result("c"), text("done")},
			rounds: 2,
			want: `user: q
assistant calls tool_x{}
tool[x]: [omitted: result of an earlier tool call]
assistant calls tool_y{"q":"y"}
tool[y]: result y
assistant calls tool_a{"q":"a"} tool_b{"q":"b"} tool_c{"q":"c"}
tool[a]: result a
tool[b]: result b
tool[c]: result c
assistant: done
`,
		},
		{
			// More parallel calls than the setting: the model is about to read these results for
			// the first time, so none of them is shortened.
			name:    "one round wider than the setting, not yet seen",
			history: []parley.Message{user("q"), calls("a", "b", "c"), result("a"), result("b"), result("c")},
			rounds:  1,
			want: `user: q
assistant calls tool_a{"q":"a"} tool_b{"q":"b"} tool_c{"q":"c"}
tool[a]: result a
tool[b]: result b
tool[c]: result c
`,
		},
		{
			name:    "none kept whole, but the results the model has not seen",
			history: []parley.Message{user("q"), calls("x"), result("x"), calls("a", "b"), result("a"), result("b")},
			rounds:  -1,
			want: `user: q
assistant calls tool_x{}
tool[x]: [omitted: result of an earlier tool call]
assistant calls tool_a{"q":"a"} tool_b{"q":"b"}
tool[a]: result a
tool[b]: result b
`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildBoth(t, tc.history, Options{ToolHistoryRounds: tc.rounds})
			if s := show(got); s != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", s, tc.want)
			}
			if err := parley.CheckHistory(got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBuildRepair(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []parley.Message
		want    string
	}{
		{
			name:    "interrupted mid-tool: the missing result is filled in",
			history: []parley.Message{user("q"), calls("a", "b"), result("a")},
			want: `user: q
assistant calls tool_a{"q":"a"} tool_b{"q":"b"}
tool[a]: result a
tool[b]: ` + MissingResult + `
`,
		},
		{
			name:    "interrupted, then the user wrote again",
			history: []parley.Message{user("q"), calls("a"), user("again"), text("ok")},
			want: `user: q
assistant calls tool_a{"q":"a"}
tool[a]: ` + MissingResult + `
user: again
assistant: ok
`,
		},
		{
			name:    "results stored out of order come back in call order",
			history: []parley.Message{user("q"), calls("a", "b", "c"), result("c"), result("a"), result("b")},
			want: `user: q
assistant calls tool_a{"q":"a"} tool_b{"q":"b"} tool_c{"q":"c"}
tool[a]: result a
tool[b]: result b
tool[c]: result c
`,
		},
		{
			name:    "orphan and duplicate tool messages are dropped",
			history: []parley.Message{user("q"), result("x"), calls("a"), result("a"), result("a"), text("t"), result("a")},
			want: `user: q
assistant calls tool_a{"q":"a"}
tool[a]: result a
assistant: t
`,
		},
		{
			name:    "an empty assistant message is dropped",
			history: []parley.Message{user("q"), {Role: parley.RoleAssistant}, user("q2")},
			want:    "user: q\nuser: q2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildBoth(t, tc.history, Options{})
			if s := show(got); s != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", s, tc.want)
			}
			if err := parley.CheckHistory(got); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestBuildSystemPromptAndMetadata(t *testing.T) {
	ok := true
	h := []parley.Message{{Role: parley.RoleUser, Content: parley.Text("hi"), ID: "x", Seq: 1, RunID: "r"},
		{Role: parley.RoleAssistant, Content: parley.Text("hello"), Reasoning: "think", LatencyMS: 5, Usage: &parley.Usage{TotalTokens: 3}},
		{Role: parley.RoleTool, ToolCallID: "nope", Success: &ok}}
	got := buildBoth(t, h, Options{SystemPrompt: "be brief"})
	b, _ := json.Marshal(got)
	want := `[{"role":"system","content":"be brief"},{"role":"user","content":"hi"},{"role":"assistant","content":"hello","reasoning_content":"think"}]`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

func TestBuildDoesNotChangeHistory(t *testing.T) {
	h := append([]parley.Message(nil), seedHistory...)
	before := show(h)
	Build(h, Options{ToolHistoryRounds: 1})
	if show(h) != before {
		t.Fatal("Build modified its input")
	}
}

func history10k() []parley.Message {
	var h []parley.Message
	for i := 0; len(h) < 10_000; i++ {
		id := fmt.Sprint(i)
		h = append(h, user("question "+id), calls(id), result(id), text("answer "+id))
	}
	return h
}

func BenchmarkBuild10k(b *testing.B) {
	h := history10k()
	b.ReportAllocs()
	for b.Loop() {
		Build(h, Options{})
	}
}

// buildBoth returns Build's answer after checking that BuildOwned, given a deep copy of the
// history, answers the same.
func buildBoth(t *testing.T, h []parley.Message, opts Options) []parley.Message {
	t.Helper()
	want := Build(h, opts)
	before, _ := json.Marshal(h)
	got := BuildOwned(slices.Clone(h), opts) // a shallow copy: the ToolCalls arrays are shared
	if after, _ := json.Marshal(h); string(after) != string(before) {
		t.Fatal("BuildOwned changed what the messages it was given point to")
	}
	wj, _ := json.Marshal(want)
	gj, _ := json.Marshal(got)
	if string(wj) != string(gj) {
		t.Fatalf("BuildOwned differs from Build:\nBuild      %s\nBuildOwned %s", wj, gj)
	}
	return want
}

func BenchmarkBuildOwned10k(b *testing.B) {
	h := history10k()
	owned := make([]parley.Message, len(h))
	b.ReportAllocs()
	for b.Loop() {
		copy(owned, h)
		BuildOwned(owned, Options{})
	}
}

// failed is the message a run stores when its model call fails: what was streamed, marked.
func failed(partial string) parley.Message {
	return parley.Message{Role: parley.RoleAssistant, Content: parley.Text(partial), Error: parley.ECUpstream}
}

func TestBuildLeavesFailedTurnsOut(t *testing.T) {
	for _, tc := range []struct {
		name    string
		history []parley.Message
		want    string
	}{
		{
			// The unanswered question does not reach the model beside the next one.
			name:    "a failed turn, then the next question",
			history: []parley.Message{user("Q1"), text("A1"), user("Q2"), failed("The answ"), user("Q3")},
			want:    "user: Q1\nassistant: A1\nuser: Q3\n",
		},
		{
			name:    "a failure before any text, then the next question",
			history: []parley.Message{user("Q2"), failed(""), user("Q3")},
			want:    "user: Q3\n",
		},
		{
			// Tool rounds of a failed turn go with it.
			name:    "a failed turn with tool rounds, then the next question",
			history: []parley.Message{user("Q2"), calls("a"), result("a"), failed("Half"), user("Q3")},
			want:    "user: Q3\n",
		},
		{
			// A retry: the last turn's question is answered again, with its completed rounds.
			name:    "retrying the last turn",
			history: []parley.Message{user("Q1"), text("A1"), user("Q2"), calls("a"), result("a"), failed("Half")},
			want:    "user: Q1\nassistant: A1\nuser: Q2\nassistant calls tool_a{\"q\":\"a\"}\ntool[a]: result a\n",
		},
		{
			name:    "a retry that failed again, retried once more",
			history: []parley.Message{user("Q2"), failed("x"), failed("")},
			want:    "user: Q2\n",
		},
		{
			// A retry that succeeded: the turn is whole, without the failure.
			name:    "a retried turn that was answered, then the next question",
			history: []parley.Message{user("Q2"), failed("Th"), calls("b"), result("b"), text("A2"), user("Q3")},
			want:    "user: Q2\nassistant calls tool_b{\"q\":\"b\"}\ntool[b]: result b\nassistant: A2\nuser: Q3\n",
		},
		{
			name:    "no failure: the history is kept as it is",
			history: []parley.Message{user("Q1"), text("A1"), user("Q2")},
			want:    "user: Q1\nassistant: A1\nuser: Q2\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := buildBoth(t, tc.history, Options{})
			if s := show(got); s != tc.want {
				t.Fatalf("got:\n%s\nwant:\n%s", s, tc.want)
			}
			if err := parley.CheckHistory(got); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(got); i++ {
				if got[i].Role == parley.RoleUser && got[i-1].Role == parley.RoleUser {
					t.Fatalf("two user messages in a row at %d: a provider would merge them", i)
				}
			}
		})
	}
}
