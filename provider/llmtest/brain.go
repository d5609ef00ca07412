package llmtest

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"

	parley "github.com/parleyhq/parley"
)

var (
	// exprRun finds arithmetic: digits, operators, parentheses, dots and spaces.
	exprRun  = regexp.MustCompile(`[0-9+\-*/^%().\s]+`)
	timeWord = regexp.MustCompile(`(?i)\b(time|date|clock)\b`)
	hasOp    = regexp.MustCompile(`[0-9)]\s*[+\-*/^%]\s*[0-9(.-]`)
	callSeq  atomic.Int64
)

// findExpression returns the longest arithmetic expression in text, or "".
func findExpression(text string) string {
	best := ""
	for _, m := range exprRun.FindAllString(text, -1) {
		m = strings.TrimSpace(m)
		m = strings.TrimRight(m, "+-*/^%.( ")
		m = strings.TrimLeft(m, "+*/^%.) ")
		if len(m) > len(best) && strings.ContainsAny(m, "0123456789") && hasOp.MatchString(m) {
			best = m
		}
	}
	return best
}

func offered(req *Request, name string) bool {
	for _, t := range req.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

func newCallID() string { return "call_mock" + strconv.FormatInt(callSeq.Add(1), 10) }

// demo is the deterministic "brain" that answers when no turn is scripted.
func demo(req *Request) Turn {
	last := -1
	for i, m := range req.Messages {
		if m.Role == parley.RoleUser {
			last = i
		}
	}
	if last < 0 {
		return Turn{Content: "Hello! I am Parley's offline mock model. Configure a real provider (OPENAI_API_KEY or PARLEY_OPENAI_BASE_URL) for real answers."}
	}
	question := req.Messages[last].Content.String()
	var results []parley.Message
	calls := map[string]parley.ToolCall{}
	for _, m := range req.Messages[last+1:] {
		for _, c := range m.ToolCalls {
			calls[c.ID] = c
		}
		if m.Role == parley.RoleTool {
			results = append(results, m)
		}
	}
	if len(results) > 0 {
		return answerFromResults(results, calls)
	}

	var t Turn
	var why []string
	if expr := findExpression(question); expr != "" && offered(req, "calculator") {
		t.ToolCalls = append(t.ToolCalls, parley.ToolCall{ID: newCallID(), Type: "function",
			Function: parley.FunctionCall{Name: "calculator", Arguments: fmt.Sprintf(`{"expression":%q}`, expr)}})
		why = append(why, "the calculator for "+expr)
	}
	if timeWord.MatchString(question) && offered(req, "get_current_time") {
		t.ToolCalls = append(t.ToolCalls, parley.ToolCall{ID: newCallID(), Type: "function",
			Function: parley.FunctionCall{Name: "get_current_time", Arguments: `{"timezone":"UTC"}`}})
		why = append(why, "the clock for the current time")
	}
	if len(t.ToolCalls) > 0 {
		t.Reasoning = "The user asks: " + truncate(question, 80) + " I will use " + strings.Join(why, " and ") + "."
		return t
	}
	if strings.TrimSpace(question) == "" {
		return Turn{Content: "Hello! I am Parley's offline mock model. Ask me to calculate something, or for the time."}
	}
	return Turn{Content: "You said: " + truncate(question, 500) + "\n\n(This is Parley's offline mock model: it can use the calculator and the clock. " +
		"Configure a real provider with OPENAI_API_KEY or PARLEY_OPENAI_BASE_URL.)"}
}

func answerFromResults(results []parley.Message, calls map[string]parley.ToolCall) Turn {
	var parts []string
	for _, r := range results {
		text := r.Content.String()
		c := calls[r.ToolCallID]
		name := c.Function.Name
		if name == "" {
			name = r.Name
		}
		if strings.HasPrefix(text, "error") {
			parts = append(parts, fmt.Sprintf("The %s tool failed: %s", name, truncate(text, 300)))
			continue
		}
		switch name {
		case "calculator":
			var expr string
			if m := regexp.MustCompile(`"expression"\s*:\s*"([^"]*)"`).FindStringSubmatch(c.Function.Arguments); m != nil {
				expr = m[1]
			}
			parts = append(parts, fmt.Sprintf("%s = %s.", expr, text))
		case "get_current_time":
			parts = append(parts, "The current time is "+text+".")
		default:
			parts = append(parts, fmt.Sprintf("%s returned: %s", name, truncate(text, 300)))
		}
	}
	return Turn{Content: strings.Join(parts, " ")}
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
