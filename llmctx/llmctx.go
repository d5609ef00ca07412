// Package llmctx turns a session's stored history into the message list a model is sent (seed
// 000's get_messages_for_llm): it repairs what an interrupted run left behind, so the list is always
// valid for the OpenAI API, and shortens old tool calls so that long sessions stay affordable.
package llmctx

import (
	"slices"

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
	// ToolHistoryRounds is how many of the latest tool rounds (assistant messages with tool calls,
	// each with all its parallel calls) are kept whole; the calls of older rounds keep their name
	// while their arguments and results are replaced by placeholders. 0 means
	// DefaultToolHistoryRounds; a negative value keeps none whole but the results the model has
	// not seen yet (those of a round that ends the history).
	ToolHistoryRounds int
}

// Build returns the messages to send to a model for history (a session's stored messages, or
// their model views, in order). The result carries no Parley metadata and always passes
// parley.CheckHistory:
//   - a failed turn (see DropFailedTurns) is left out;
//   - every assistant tool call is followed, before the next non-tool message, by exactly one tool
//     message with its id (a call left unanswered by an interrupted run gets MissingResult);
//   - tool messages that answer no pending call, or answer one twice, are dropped;
//   - assistant messages with neither content nor tool calls (a run cut off before its first
//     token) are dropped;
//   - the calls of rounds other than the last ToolHistoryRounds are shortened.
func Build(history []parley.Message, opts Options) []parley.Message {
	history = DropFailedTurns(history)
	out := make([]parley.Message, 0, len(history)+1)
	if opts.SystemPrompt != "" {
		out = append(out, parley.Message{Role: parley.RoleSystem, Content: parley.Text(opts.SystemPrompt)})
	}

	// First pass: repair into a valid sequence. pending holds the calls of the last assistant
	// message that still wait for their tool message; answers[i] is the tool message of pending[i]
	// (emitted in the order of the calls). Both are reused from round to round.
	var (
		pending []parley.ToolCall
		answers []parley.Message
		got     []bool
	)
	flush := func() {
		for i, c := range pending {
			m := answers[i]
			if !got[i] {
				m = parley.Message{Role: parley.RoleTool, ToolCallID: c.ID, Name: c.Function.Name, Content: parley.Text(MissingResult)}
			}
			out = append(out, m)
		}
		pending = nil
	}
	for i := range history {
		m := history[i].OpenAI()
		if m.Role == parley.RoleTool {
			for j, c := range pending {
				if c.ID == m.ToolCallID {
					if !got[j] { // a repeated answer is dropped
						answers[j], got[j] = m, true
					}
					break
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
		if n := len(m.ToolCalls); n > 0 {
			pending = m.ToolCalls
			if cap(answers) < n {
				answers, got = make([]parley.Message, n), make([]bool, n)
			}
			answers, got = answers[:n], got[:n]
			clear(answers)
			clear(got)
		}
		out = append(out, m)
	}
	flush()

	// Second pass: shorten old tool calls.
	shorten(out, opts)
	return out
}

// BuildOwned is Build for a history slice the caller hands over (as Store.ModelHistory returns
// it): when the history is already valid, which is the common case, the slice is shortened in
// place instead of copied, saving a copy of the whole session on every model call. The slice must
// not be used after; the ToolCalls arrays its messages point to are not changed.
func BuildOwned(history []parley.Message, opts Options) []parley.Message {
	history = DropFailedTurns(history)
	if !plainValid(history) {
		return Build(history, opts)
	}
	for i := range history {
		history[i] = history[i].OpenAI()
	}
	shorten(history, opts)
	if opts.SystemPrompt != "" {
		history = slices.Insert(history, 0, parley.Message{Role: parley.RoleSystem, Content: parley.Text(opts.SystemPrompt)})
	}
	return history
}

// DropFailedTurns returns history without its failed turns, as the model is to see it. A turn is
// a user message and what follows it up to the next user message; it failed when its last
// message other than a tool result is an assistant message marked failed (parley.Message.Error:
// the model call failed, and the message holds only what was streamed before).
//
//   - A failed turn that a later user message follows is left out whole: its question was never
//     answered, and sent on it would run into the next one (Anthropic and Gemini merge adjacent
//     user messages into one turn), so that the model would answer it again. A client that wants
//     it answered retries it instead.
//   - The last turn keeps its user message and any tool rounds it completed, without the
//     failure's message: a retry answers that question now.
//   - Elsewhere, a failure's message is left out (a turn whose retry succeeded).
//
// It returns history itself when it holds no failure's message.
func DropFailedTurns(history []parley.Message) []parley.Message {
	if !slices.ContainsFunc(history, func(m parley.Message) bool { return m.Error != "" }) {
		return history
	}
	out := make([]parley.Message, 0, len(history))
	start := 0 // the first message of the current turn
	for start < len(history) {
		end := start + 1 // one past the turn's last message
		for end < len(history) && history[end].Role != parley.RoleUser {
			end++
		}
		turn := history[start:end]
		failed := false
		for i := len(turn) - 1; i >= 0; i-- {
			if turn[i].Role != parley.RoleTool {
				failed = turn[i].Error != ""
				break
			}
		}
		if !failed || end == len(history) || turn[0].Role != parley.RoleUser {
			for _, m := range turn {
				if m.Error == "" {
					out = append(out, m)
				}
			}
		}
		start = end
	}
	return out
}

// shorten replaces the arguments and results of the tool calls of all but the last
// opts.ToolHistoryRounds rounds of msgs, a valid history in which the tool messages of an
// assistant message follow it directly, in the order of its calls. A round is one assistant
// message with its tool calls, however many calls it made in parallel (seed 000's
// tool_history_rounds). The last round is never shortened when nothing follows its results: the
// model has not seen them yet. Shortened calls get new arrays: the old ones may be shared (with
// the caller's history, or with historycache).
func shorten(msgs []parley.Message, opts Options) {
	keep := opts.ToolHistoryRounds
	if keep == 0 {
		keep = DefaultToolHistoryRounds
	}
	rounds, last := 0, -1
	for i := range msgs {
		if len(msgs[i].ToolCalls) > 0 {
			rounds++
			last = i
		}
	}
	threshold := rounds - max(keep, 0)
	if threshold >= rounds && last >= 0 && last+len(msgs[last].ToolCalls) == len(msgs)-1 {
		threshold = rounds - 1 // the latest results wait for the model's first look
	}
	r := 0
	for i := 0; i < len(msgs) && r < threshold; i++ {
		calls := msgs[i].ToolCalls
		if len(calls) == 0 {
			continue
		}
		short := make([]parley.ToolCall, len(calls))
		copy(short, calls)
		for j := range short {
			short[j].Function.Arguments = OmittedArguments
			msgs[i+1+j].Content = parley.Text(OmittedResult)
		}
		msgs[i].ToolCalls = short
		r++
	}
}

// plainValid reports whether Build would only shorten history: every assistant message with tool
// calls (unique, non-empty ids) is followed directly by one tool message per call, in the order of
// the calls; no other tool message; no assistant message with neither content nor calls.
func plainValid(history []parley.Message) bool {
	for i := 0; i < len(history); i++ {
		m := &history[i]
		switch {
		case m.Role == parley.RoleTool:
			return false // not consumed by a preceding assistant message
		case m.Role == parley.RoleAssistant && m.Content.IsNull() && len(m.ToolCalls) == 0:
			return false
		case len(m.ToolCalls) > 0:
			if m.Role != parley.RoleAssistant || len(dedupeCalls(m.ToolCalls)) != len(m.ToolCalls) || i+len(m.ToolCalls) >= len(history) {
				return false
			}
			for j, c := range m.ToolCalls {
				t := &history[i+1+j]
				if t.Role != parley.RoleTool || t.ToolCallID != c.ID {
					return false
				}
			}
			i += len(m.ToolCalls)
		}
	}
	return true
}

// dedupeCalls drops calls with an empty or repeated id, which no provider accepts. It returns
// calls itself when there is nothing to drop.
func dedupeCalls(calls []parley.ToolCall) []parley.ToolCall {
	clean := true
	for i, c := range calls {
		if c.ID == "" {
			clean = false
			break
		}
		for _, d := range calls[:i] {
			if d.ID == c.ID {
				clean = false
				break
			}
		}
	}
	if clean {
		return calls
	}
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
