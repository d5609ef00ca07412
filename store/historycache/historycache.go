// Package historycache keeps the model view of recently active sessions in memory, so that the
// agent loop, which needs a session's whole history before every model call, reads from the
// database only the messages stored since its last read.
//
// The model view is of the session's active branch (parley.BranchStore). Messages never change
// once stored and seqs grow along a branch, so a view cached for a leaf is brought up to date by
// reading the rows of the active branch with seq > the leaf's: when the first of them follows the
// cached leaf, the branch grew and the rows are appended; when the active leaf is the cached one,
// nothing changed; otherwise (an edit, a regenerated answer, a switch of branch, on this instance
// or another) the view is read again whole. The cache holds at most a configured number of bytes
// (estimated from the messages' sizes), evicting the least recently used sessions.
package historycache

import (
	"container/list"
	"context"
	"slices"
	"sync"
	"unsafe"

	parley "github.com/parleyhq/parley"
)

// page is how many new rows one read brings in.
const page = 1000

// Cache is a parley.Store's ModelHistory with memory. It is safe for concurrent use.
type Cache struct {
	st  parley.Store
	max int64

	mu      sync.Mutex
	total   int64                    // bytes held, over all sessions
	lru     *list.List               // of *entry, most recently used first
	entries map[string]*list.Element // by session id
}

type entry struct {
	session string
	tip     parley.BranchTip // the last message of the view
	msgs    []parley.Message // model views (Message.ModelView); never changed in place below its length once published
	size    int64
}

var messageSize = int64(unsafe.Sizeof(parley.Message{}))

// sizeOf estimates the memory msgs hold.
func sizeOf(msgs []parley.Message) int64 {
	return int64(cap(msgs))*messageSize + contentSize(msgs)
}

// contentSize estimates the memory msgs point to.
func contentSize(msgs []parley.Message) int64 {
	var n int64
	for i := range msgs {
		m := &msgs[i]
		if m.Content.IsParts() {
			for _, p := range m.Content.Parts() {
				n += 64 + int64(len(p.Text))
				if p.ImageURL != nil {
					n += int64(len(p.ImageURL.URL))
				}
			}
		} else {
			n += int64(len(m.Content.String()))
		}
		n += int64(len(m.Name) + len(m.ToolCallID) + len(m.Reasoning))
		for _, c := range m.ToolCalls {
			n += int64(unsafe.Sizeof(c)) + int64(len(c.ID)+len(c.Function.Name)+len(c.Function.Arguments)+len(c.ThoughtSignature()))
		}
		for _, b := range m.ThinkingBlocks {
			n += int64(unsafe.Sizeof(b)) + int64(len(b.Thinking)+len(b.Signature)+len(b.Data))
		}
	}
	return n
}

// New returns a cache over st that holds at most maxBytes (estimated); a session larger than that
// is read from st every time. maxBytes <= 0 turns the cache off.
func New(st parley.Store, maxBytes int64) *Cache {
	return &Cache{st: st, max: maxBytes, lru: list.New(), entries: map[string]*list.Element{}}
}

// ModelHistory returns the session's messages with the fields a model is sent, as
// parley.Store.ModelHistory does. The returned slice is the caller's (llmctx.BuildOwned may
// reuse it); the ToolCalls arrays it points to are shared and must not be changed.
func (c *Cache) ModelHistory(ctx context.Context, sessionID string) ([]parley.Message, error) {
	if c.max <= 0 {
		return c.st.ModelHistory(ctx, sessionID)
	}
	c.mu.Lock()
	var (
		msgs []parley.Message
		tip  parley.BranchTip
		size int64
	)
	if el, ok := c.entries[sessionID]; ok {
		e := el.Value.(*entry)
		msgs, tip, size = e.msgs, e.tip, e.size
		c.lru.MoveToFront(el)
	}
	c.mu.Unlock()

	if msgs == nil {
		return c.load(ctx, sessionID, "")
	}
	rows, now, err := c.st.ListBranch(ctx, sessionID, "", tip.Seq, page)
	if err != nil {
		return nil, err
	}
	if now.ID != tip.ID {
		if len(rows) == 0 || rows[0].ParentID != tip.ID {
			// Another branch is active now: it shares no tail with the view.
			return c.load(ctx, sessionID, now.ID)
		}
		var added []parley.Message
		for {
			for _, m := range rows {
				added = append(added, m.ModelView())
			}
			if len(rows) < page {
				break
			}
			// The next page of the same branch (named: the active one may move meanwhile).
			if rows, _, err = c.st.ListBranch(ctx, sessionID, now.ID, rows[len(rows)-1].Seq, page); err != nil {
				return nil, err
			}
		}
		// A new array: readers of the old one may still hold it. Its size follows from the old
		// one's without walking the whole session again.
		grown := make([]parley.Message, 0, len(msgs)+len(added)+1)
		size += int64(cap(grown)-cap(msgs))*messageSize + contentSize(added)
		msgs = append(append(grown, msgs...), added...)
		c.put(sessionID, msgs, now, size)
	}
	out := make([]parley.Message, len(msgs), len(msgs)+1)
	copy(out, msgs)
	return out, nil
}

// load reads the view of the branch that ends at leaf ("": the active one) whole and keeps it.
func (c *Cache) load(ctx context.Context, sessionID, leaf string) ([]parley.Message, error) {
	fresh, tip, err := c.st.ModelBranch(ctx, sessionID, leaf)
	if err != nil {
		return nil, err
	}
	kept := slices.Clone(fresh)
	c.put(sessionID, kept, tip, sizeOf(kept))
	return fresh, nil
}

// Seed makes msgs, stored (with their ids and seqs) as the whole active branch of a session just
// created, its cached view: the first read of the session's history then finds it here instead of
// reading back what was just written.
func (c *Cache) Seed(sessionID string, msgs ...*parley.Message) {
	if c.max <= 0 || len(msgs) == 0 {
		return
	}
	view := make([]parley.Message, len(msgs), len(msgs)+1)
	for i, m := range msgs {
		view[i] = m.ModelView()
	}
	last := msgs[len(msgs)-1]
	c.put(sessionID, view, parley.BranchTip{ID: last.ID, Seq: last.Seq}, sizeOf(view))
}

// Appended tells the cache that msgs were stored in the session (with their ids, seqs and
// parents, in order): a view cached for the message the first of them follows is extended with
// them, so that the next read need not bring them in. Any other view is left as it is (the next
// read brings it up to date from the store).
func (c *Cache) Appended(sessionID string, msgs ...*parley.Message) {
	if c.max <= 0 || len(msgs) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[sessionID]
	if !ok {
		return
	}
	e := el.Value.(*entry)
	prev := e.tip.ID
	for _, m := range msgs {
		if m.ParentID != prev || m.Seq <= e.tip.Seq || m.ID == "" {
			return
		}
		prev = m.ID
	}
	added := make([]parley.Message, len(msgs))
	for i, m := range msgs {
		added[i] = m.ModelView()
	}
	// Appended in place when the array has room: a reader still holding the view (ModelHistory
	// copies it outside the lock) reads only up to its length, and no view of this array
	// shorter than this one is ever put back, so nothing it reads is written.
	grown := append(e.msgs, added...)
	size := e.size + int64(cap(grown)-cap(e.msgs))*messageSize + contentSize(added)
	last := msgs[len(msgs)-1]
	c.remove(el)
	if size > c.max {
		return
	}
	c.entries[sessionID] = c.lru.PushFront(&entry{session: sessionID, tip: parley.BranchTip{ID: last.ID, Seq: last.Seq}, msgs: grown, size: size})
	c.total += size
	for c.total > c.max {
		c.remove(c.lru.Back())
	}
}

// ViewAt returns a copy of the session's cached view (the caller's, as ModelHistory's) if it
// ends at the message tip, without asking the store: messages never change once stored, so a
// view that ends at a message is that message's branch for good. Nil when the cache holds no
// such view.
func (c *Cache) ViewAt(sessionID, tip string) []parley.Message {
	if c.max <= 0 {
		return nil
	}
	c.mu.Lock()
	el, ok := c.entries[sessionID]
	if !ok || el.Value.(*entry).tip.ID != tip {
		c.mu.Unlock()
		return nil
	}
	c.lru.MoveToFront(el)
	msgs := el.Value.(*entry).msgs
	c.mu.Unlock()
	out := make([]parley.Message, len(msgs), len(msgs)+1)
	copy(out, msgs)
	return out
}

// Forget drops a session's cached view (after it was deleted, say).
func (c *Cache) Forget(sessionID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[sessionID]; ok {
		c.remove(el)
	}
}

// Size returns the estimated bytes held.
func (c *Cache) Size() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

func (c *Cache) put(sessionID string, msgs []parley.Message, tip parley.BranchTip, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[sessionID]; ok {
		// A view stored by a concurrent reader may be of another branch, or older: each is whole
		// for its leaf, and the next read checks the leaf, so the last one stored stays.
		c.remove(el)
	}
	if size > c.max {
		return
	}
	c.entries[sessionID] = c.lru.PushFront(&entry{session: sessionID, tip: tip, msgs: msgs, size: size})
	c.total += size
	for c.total > c.max {
		c.remove(c.lru.Back())
	}
}

func (c *Cache) remove(el *list.Element) {
	e := c.lru.Remove(el).(*entry)
	delete(c.entries, e.session)
	c.total -= e.size
}
