// Package llmctx turns a session's stored history into the message list a model is sent (seed
// 000's get_messages_for_llm): it repairs what an interrupted run left behind, so the list is always
// valid for the OpenAI API, and shortens old tool calls so that long sessions stay affordable.
package llmctx

import (
	parley "github.com/parleyhq/parley"
)

// DefaultToolHistoryRounds is seed 000's tool_history_rounds.
const DefaultToolHistoryRounds = 10

// Placeholders that replace what truncation and repair take out. Arguments stay valid JSON, since
// some providers parse them.
const (
	OmittedArguments = "{}"
	OmittedResult    = "[omitted: result of an earlier tool call]"
	MissingResult    = "error: no result was recorded for this tool call (the run was interrupted)"
)

// Options shape the model's view of a history.
type Options struct {
	// SystemPrompt, when set, is sent first.
	SystemPrompt string
	// ToolHistoryRounds is how many of the latest tool calls are kept whole; older calls keep their
	// name while their arguments and result are replaced by placeholders. 0 means
	// DefaultToolHistoryRounds; a negative value keeps none whole.
	ToolHistoryRounds int
}

// Build returns the messages to send to a model for history (a session's stored messages, in
// order). The result carries no Parley metadata and always passes parley.CheckHistory:
//   - every assistant tool call is followed, before the next non-tool message, by exactly one tool
//     message with its id (a call left unanswered by an interrupted run gets MissingResult);
//   - tool messages that answer no pending call, or answer one twice, are dropped;
//   - assistant messages with neither content nor tool calls (a run cut off before its first
//     token) are dropped;
//   - calls other than the last ToolHistoryRounds are shortened.
func Build(history []parley.Message, opts Options) []parley.Message {
	keep := opts.ToolHistoryRounds
	if keep == 0 {
		keep = DefaultToolHistoryRounds
	}
	if keep < 0 {
		keep = 0
	}

	out := make([]parley.Message, 0, len(history)+1)
	if opts.SystemPrompt != "" {
		out = append(out, parley.Message{Role: parley.RoleSystem, Content: parley.Text(opts.SystemPrompt)})
	}

	// First pass: repair into a valid sequence. pending holds the calls of the last assistant
	// message that still wait for their tool message; answered collects those tool messages so
	// that they are emitted in the order of the calls.
	var (
		pending  []parley.ToolCall
		answered map[string]parley.Message
	)
	flush := func() {
		for _, c := range pending {
			m, ok := answered[c.ID]
			if !ok {
				m = parley.Message{Role: parley.RoleTool, ToolCallID: c.ID, Name: c.Function.Name, Content: parley.Text(MissingResult)}
			}
			out = append(out, m)
		}
		pending, answered = nil, nil
	}
	isPending := func(id string) bool {
		for _, c := range pending {
			if c.ID == id {
				return true
			}
		}
		return false
	}
	for _, m := range history {
		m = m.OpenAI()
		if m.Role == parley.RoleTool {
			if isPending(m.ToolCallID) {
				if _, dup := answered[m.ToolCallID]; !dup {
					answered[m.ToolCallID] = m
				}
			}
			continue
		}
		flush()
		if m.Role == parley.RoleAssistant && len(m.ToolCalls) > 0 {
			m.ToolCalls = dedupeCalls(m.ToolCalls)
		}
		if m.Role == parley.RoleAssistant && m.Content.IsNull() && len(m.ToolCalls) == 0 {
			continue
		}
		if len(m.ToolCalls) > 0 {
			pending = m.ToolCalls
			answered = make(map[string]parley.Message, len(pending))
		}
		out = append(out, m)
	}
	flush()

	// Second pass: shorten all but the last keep tool calls.
	total := 0
	for _, m := range out {
		total += len(m.ToolCalls)
	}
	threshold := total - keep
	if threshold <= 0 {
		return out
	}
	old := make(map[string]bool, threshold)
	n := 0
	for i := range out {
		if len(out[i].ToolCalls) == 0 {
			continue
		}
		var calls []parley.ToolCall
		for _, c := range out[i].ToolCalls {
			if n < threshold {
				old[c.ID] = true
				c.Function.Arguments = OmittedArguments
			}
			calls = append(calls, c)
			n++
		}
		out[i].ToolCalls = calls // a copy: the caller's history is not changed
	}
	for i := range out {
		if out[i].Role == parley.RoleTool && old[out[i].ToolCallID] {
			out[i].Content = parley.Text(OmittedResult)
		}
	}
	return out
}

// dedupeCalls drops calls with an empty or repeated id, which no provider accepts.
func dedupeCalls(calls []parley.ToolCall) []parley.ToolCall {
	seen := make(map[string]bool, len(calls))
	out := make([]parley.ToolCall, 0, len(calls))
	for _, c := range calls {
		if c.ID == "" || seen[c.ID] {
			continue
		}
		seen[c.ID] = true
		out = append(out, c)
	}
	return out
}
