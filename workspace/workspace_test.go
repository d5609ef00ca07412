package workspace

import (
	"fmt"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

func TestCheckTodos(t *testing.T) {
	ok := []parley.Todo{{ID: "1", Content: "a", Status: parley.TodoCompleted}, {ID: "2", Content: "b", Status: parley.TodoInProgress}, {ID: "3", Content: "c", Status: parley.TodoPending}}
	if err := CheckTodos(ok); err != nil {
		t.Fatal(err)
	}
	if err := CheckTodos(nil); err != nil {
		t.Fatalf("an empty list: %v", err)
	}
	bad := []parley.Todo{
		{ID: "1", Content: "a", Status: parley.TodoInProgress},
		{ID: "1", Content: "b", Status: parley.TodoInProgress},
		{ID: "", Content: " ", Status: "done"},
		{ID: "4", Content: strings.Repeat("x", parley.MaxTodoChars+1), Status: parley.TodoPending},
	}
	err := CheckTodos(bad)
	if parley.CodeOf(err) != parley.ECInvalid {
		t.Fatalf("code of %v", err)
	}
	msg := parley.MessageOf(err)
	for _, want := range []string{
		`todos[1].id: "1" is already the id of todos[0]`,
		"todos[2].id: required",
		"todos[2].content: required",
		`todos[2].status: "done" is not one of pending, in_progress, completed`,
		"todos[3].content: 1001 characters, the limit is 1000",
		"at most one item may be in_progress; todos[0], todos[1] are",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message lacks %q:\n%s", want, msg)
		}
	}
	many := make([]parley.Todo, parley.MaxTodos+1)
	for i := range many {
		many[i] = parley.Todo{ID: fmt.Sprint(i), Content: "x", Status: parley.TodoPending}
	}
	if err := CheckTodos(many); err == nil || !strings.Contains(err.Error(), "101 items, the limit is 100") {
		t.Fatalf("too many: %v", err)
	}
}

func entries(n int) []parley.MemoryEntry {
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	out := make([]parley.MemoryEntry, n)
	for i := range out { // newest first
		out[i] = parley.MemoryEntry{ID: fmt.Sprintf("m%02d", i), Content: fmt.Sprintf("fact number %02d is here", i), CreatedAt: base.Add(-time.Duration(i) * time.Hour)}
	}
	return out
}

func TestPromptFitsTheBudgetNewestFirst(t *testing.T) {
	p := &parley.Project{Name: "Garden", Instructions: "Use metric units."}
	all := Prompt(p, entries(10), 10_000)
	for i := range 10 {
		if !strings.Contains(all, fmt.Sprintf("fact number %02d", i)) {
			t.Fatalf("a large budget leaves out fact %d:\n%s", i, all)
		}
	}
	if strings.Contains(all, "left out") || !strings.Contains(all, "Use metric units.") {
		t.Fatalf("a large budget:\n%s", all)
	}
	if strings.Index(all, "fact number 00") > strings.Index(all, "fact number 01") {
		t.Fatal("not newest first")
	}

	// Each fact line is about 12 tokens: a budget of 5 (instructions) + 40 keeps three.
	some := Prompt(p, entries(10), 45)
	for i := range 10 {
		if in := strings.Contains(some, fmt.Sprintf("fact number %02d", i)); in != (i < 3) {
			t.Fatalf("budget 45, fact %d shown=%v:\n%s", i, in, some)
		}
	}
	if !strings.Contains(some, "(7 older of 10 facts are left out to stay within the memory budget of 45 tokens;") {
		t.Fatalf("budget 45 does not say what it left out:\n%s", some)
	}

	// Instructions larger than the budget are cut, and say so; no fact fits.
	long := &parley.Project{Name: "Long", Instructions: strings.Repeat("é", 100)}
	cut := Prompt(long, entries(2), 10)
	if !strings.Contains(cut, "The instructions are cut here: 80 more characters") || strings.Contains(cut, "fact number") ||
		!strings.Contains(cut, "(2 older of 2 facts are left out") {
		t.Fatalf("budget 10:\n%s", cut)
	}
	if strings.Count(cut, "é") != 20 {
		t.Fatalf("cut on a rune boundary: %d runes kept", strings.Count(cut, "é"))
	}

	if empty := Prompt(p, nil, 100); !strings.Contains(empty, "memory is empty") {
		t.Fatalf("no memory:\n%s", empty)
	}
}

func TestSearch(t *testing.T) {
	es := []parley.MemoryEntry{{ID: "a", Content: "The soil is CLAY."}, {ID: "b", Content: "Tomatoes love sun."}, {ID: "c", Content: "Clay soil drains badly."}}
	got := Search(es, "clay  soil")
	if len(got) != 2 || got[0].ID != "a" || got[1].ID != "c" {
		t.Fatalf("search: %+v", got)
	}
	if got := Search(es, "sand"); len(got) != 0 {
		t.Fatalf("no match: %+v", got)
	}
}
