// Package workspace holds the rules of a session's todo list and of projects and their memory
// (issue 20), shared by the built-in tools and the HTTP API: what a valid list, fact or project is,
// how memory is searched, and the part of the system prompt a project adds to its sessions.
package workspace

import (
	"context"
	"fmt"
	"strings"
	"unicode/utf8"

	parley "github.com/parleyhq/parley"
)

// CheckTodos returns every way in which todos is not a valid todo list, one problem a line,
// written for the model (or a client) to fix: an ECInvalid error, or nil.
func CheckTodos(todos []parley.Todo) error {
	var probs []string
	if len(todos) > parley.MaxTodos {
		probs = append(probs, fmt.Sprintf("todos: %d items, the limit is %d", len(todos), parley.MaxTodos))
	}
	seen := map[string]int{}
	inProgress := []string{}
	for i, t := range todos {
		at := fmt.Sprintf("todos[%d]", i)
		switch {
		case strings.TrimSpace(t.ID) == "":
			probs = append(probs, at+".id: required and must not be empty")
		case utf8.RuneCountInString(t.ID) > 64:
			probs = append(probs, at+".id: at most 64 characters")
		default:
			if err := parley.CheckText(at+".id", t.ID, parley.TextName); err != nil {
				probs = append(probs, parley.MessageOf(err))
			} else if j, dup := seen[t.ID]; dup {
				probs = append(probs, fmt.Sprintf("%s.id: %q is already the id of todos[%d]; ids must be unique", at, t.ID, j))
			} else {
				seen[t.ID] = i
			}
		}
		switch n := utf8.RuneCountInString(t.Content); {
		case strings.TrimSpace(t.Content) == "":
			probs = append(probs, at+".content: required and must not be empty")
		case n > parley.MaxTodoChars:
			probs = append(probs, fmt.Sprintf("%s.content: %d characters, the limit is %d", at, n, parley.MaxTodoChars))
		default:
			if err := parley.CheckText(at+".content", t.Content, parley.TextMessage); err != nil {
				probs = append(probs, parley.MessageOf(err))
			}
		}
		switch t.Status {
		case parley.TodoPending, parley.TodoCompleted:
		case parley.TodoInProgress:
			inProgress = append(inProgress, at)
		default:
			probs = append(probs, fmt.Sprintf("%s.status: %q is not one of pending, in_progress, completed", at, t.Status))
		}
	}
	if len(inProgress) > 1 {
		probs = append(probs, fmt.Sprintf("at most one item may be in_progress; %s are: mark all but one pending or completed",
			strings.Join(inProgress, ", ")))
	}
	if len(probs) == 0 {
		return nil
	}
	return parley.Errorf(parley.ECInvalid, "%s", strings.Join(probs, "\n"))
}

// CheckFact checks the text of a memory entry.
func CheckFact(field, s string) error {
	if strings.TrimSpace(s) == "" {
		return parley.Errorf(parley.ECInvalid, "%s: required and must not be empty", field)
	}
	if n := utf8.RuneCountInString(s); n > parley.MaxMemoryChars {
		return parley.Errorf(parley.ECInvalid, "%s: %d characters, the limit is %d", field, n, parley.MaxMemoryChars)
	}
	return parley.CheckText(field, s, parley.TextMessage)
}

// CheckProjectName checks a project's name.
func CheckProjectName(s string) error {
	if strings.TrimSpace(s) == "" {
		return parley.Errorf(parley.ECInvalid, "name: required and must not be empty")
	}
	if n := utf8.RuneCountInString(s); n > parley.MaxProjectName {
		return parley.Errorf(parley.ECInvalid, "name: %d characters, the limit is %d", n, parley.MaxProjectName)
	}
	return parley.CheckText("name", s, parley.TextName)
}

// CheckInstructions checks a project's instructions.
func CheckInstructions(s string) error {
	if n := utf8.RuneCountInString(s); n > parley.MaxInstructionChars {
		return parley.Errorf(parley.ECInvalid, "instructions: %d characters, the limit is %d", n, parley.MaxInstructionChars)
	}
	return parley.CheckText("instructions", s, parley.TextMessage)
}

// Search returns the entries that hold every word of query, ignoring case, in their order.
func Search(entries []parley.MemoryEntry, query string) []parley.MemoryEntry {
	words := strings.Fields(strings.ToLower(query))
	out := []parley.MemoryEntry{}
	for _, e := range entries {
		text := strings.ToLower(e.Content)
		ok := true
		for _, w := range words {
			if !strings.Contains(text, w) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, e)
		}
	}
	return out
}

// Tokens estimates the tokens of s for the prompt budget: one per four bytes, rounded up, the
// usual rule of thumb for English text with the common tokenizers.
func Tokens(s string) int { return (len(s) + 3) / 4 }

// Prompt is the part of a session's system prompt that its project adds: the project's
// instructions, then its memory, newest fact first, within budget tokens (Tokens), saying what
// was left out. entries must be newest first. budget <= 0 leaves the memory out (the
// instructions, cut to nothing, are then left out too).
func Prompt(p *parley.Project, entries []parley.MemoryEntry, budget int) string {
	return prompt(p, entries, len(entries), budget)
}

// minFactLine is the fewest bytes a fact's line in the prompt takes ("- [<36-byte id>] x (saved
// 2006-01-02)\n" is 61): no more than budget*4/minFactLine+1 facts can fit.
const minFactLine = 60

// prompt is Prompt for the newest entries of a memory of total entries.
func prompt(p *parley.Project, entries []parley.MemoryEntry, total, budget int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Project %q\nThis conversation belongs to the project %q. Its instructions and memory follow.\n", p.Name, p.Name)
	left := budget
	if instr := strings.TrimSpace(p.Instructions); instr != "" && left > 0 {
		b.WriteString("\n### Instructions\n")
		if Tokens(instr) <= left {
			b.WriteString(instr)
			b.WriteString("\n")
			left -= Tokens(instr)
		} else {
			cut := cutBytes(instr, left*4)
			b.WriteString(cut)
			fmt.Fprintf(&b, "\n(The instructions are cut here: %d more characters did not fit the budget of %d tokens.)\n",
				utf8.RuneCountInString(instr)-utf8.RuneCountInString(cut), budget)
			left = 0
		}
	}
	b.WriteString("\n### Memory\n")
	if total == 0 {
		b.WriteString("The project's memory is empty. Save lasting facts about the user or the project with memory_save.\n")
		return b.String()
	}
	b.WriteString("Facts saved in this project, newest first (memory_save adds one, memory_delete removes one by its id):\n")
	shown := 0
	for _, e := range entries {
		line := fmt.Sprintf("- [%s] %s (saved %s)\n", e.ID, oneLine(e.Content), e.CreatedAt.UTC().Format("2006-01-02"))
		if Tokens(line) > left {
			break
		}
		b.WriteString(line)
		left -= Tokens(line)
		shown++
	}
	if rest := total - shown; rest > 0 {
		fmt.Fprintf(&b, "(%d older of %d facts are left out to stay within the memory budget of %d tokens; memory_search and memory_list read them.)\n",
			rest, total, budget)
	}
	return b.String()
}

// Store is what PromptFor reads.
type Store interface {
	GetSession(ctx context.Context, id string) (*parley.Session, error)
	GetProject(ctx context.Context, id string) (*parley.Project, error)
	ListMemory(ctx context.Context, projectID string, limit int) ([]parley.MemoryEntry, error)
	CountMemory(ctx context.Context, projectID string) (int, error)
}

// PromptFor is Prompt for the session's project, or "" when the session has none.
func PromptFor(ctx context.Context, st Store, sessionID string, budget int) (string, error) {
	sess, err := st.GetSession(ctx, sessionID)
	if err != nil {
		return "", err
	}
	return PromptForSession(ctx, st, sess, budget)
}

// PromptForSession is PromptFor for a session the caller has already read (or just created):
// the session is not read again.
func PromptForSession(ctx context.Context, st Store, sess *parley.Session, budget int) (string, error) {
	p, err := projectOfSession(ctx, st, sess)
	if err != nil || p == nil {
		return "", err
	}
	// Only the newest facts that can fit are read; the rest are counted.
	limit := min(parley.MaxMemoryEntries, max(0, budget)*4/minFactLine+1)
	entries, err := st.ListMemory(ctx, p.ID, limit)
	if err != nil {
		return "", err
	}
	total := len(entries)
	if total == limit {
		if total, err = st.CountMemory(ctx, p.ID); err != nil {
			return "", err
		}
	}
	return prompt(p, entries, total, budget), nil
}

// ProjectOf returns the session's project, or nil when it has none (or the project is not its
// owner's, which the API never lets happen).
func ProjectOf(ctx context.Context, st Store, sessionID string) (*parley.Project, error) {
	sess, err := st.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	return projectOfSession(ctx, st, sess)
}

// projectOfSession is ProjectOf for a session already read.
func projectOfSession(ctx context.Context, st Store, sess *parley.Session) (*parley.Project, error) {
	if sess.ProjectID == "" {
		return nil, nil
	}
	p, err := st.GetProject(ctx, sess.ProjectID)
	if parley.CodeOf(err) == parley.ECNotFound || err == nil && p.Owner != sess.Owner {
		return nil, nil
	}
	return p, err
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// cutBytes returns the longest prefix of s of at most n bytes that ends on a rune boundary.
func cutBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
