package postgres

import "sync"

// Where a run's answer will go, known before its end is written. A batch's merged ends need the
// answers' seqs before their events can be encoded (a record event carries its message's seq),
// and so took a round trip of their own before the ends and the commit. A run begun by this store
// with one message (the user's) leaves that message as its session's leaf, with a seq known once
// the beginning committed: the run's answer, written by the same run's end, goes after it, with
// the next seq, unless something else wrote to the session between the two. The store remembers
// that place (answerHints), the end's events are encoded with it before the transaction, and the
// answers' statement goes with the ends' and the commit, checking that each answer took the
// place foreseen: if one did not (a write of another instance, or one this store does not
// forget the hint for), the statement fails, the transaction is not committed and the batch runs
// again, each write by its own statements (groupcommit.ErrApart). A hint is thus only ever a
// saving, never a source of what is stored.

// maxHints bounds the hints kept: one per run begun and not yet ended on this instance. A run
// that never ends here (its instance stopped, its run taken over) leaves its hint; when the map is
// full it is emptied, and the runs then under way end without one (a round trip more).
const maxHints = 1 << 14

// answerHint is where run's answer is foreseen to go: seq, after parent (the run's message).
type answerHint struct {
	run    string
	seq    int64
	parent string
}

// answerHints are the hints of the runs under way, by session.
type answerHints struct {
	mu sync.Mutex
	m  map[string]answerHint
}

// put remembers h for session, in place of any hint it had.
func (h *answerHints) put(session string, hint answerHint) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHints {
		h.m = make(map[string]answerHint)
	}
	h.m[session] = hint
}

// take returns and forgets session's hint, if it is run's.
func (h *answerHints) take(session, run string) (answerHint, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	hint, ok := h.m[session]
	if ok {
		delete(h.m, session)
	}
	return hint, ok && hint.run == run
}

// forget drops session's hint: a write moved its messages' seqs or its leaf.
func (h *answerHints) forget(session string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, session)
}
