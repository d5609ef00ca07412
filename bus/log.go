// Package bus carries run events from the run that produces them to any number of subscribers.
//
// A Log is one run's ordered event log. The producer appends; each subscriber reads with its own
// cursor (the last sequence number it has seen), so a slow subscriber never holds up the producer or
// the other subscribers, and a subscriber that reconnects resumes exactly after the event it names.
package bus

import (
	"context"
	"errors"
	"sync"

	parley "github.com/parleyhq/parley"
)

// ErrTrimmed is returned by Read when the events after the requested sequence number are no longer
// held in memory; the reader must recover what it missed from the store.
var ErrTrimmed = errors.New("bus: events trimmed from the log")

// DefaultMaxEvents bounds the events a Log holds; older ones are trimmed.
const DefaultMaxEvents = 100_000

// Log is an append-only, bounded, ordered log of one run's events with blocking reads.
type Log struct {
	mu sync.Mutex
	// ring holds the events with Seq first … next-1: the one with Seq first+k is at
	// ring[(head+k) % len(ring)]. It grows to max, then each Append overwrites the oldest slot,
	// so trimming costs O(1) whatever the bound.
	ring   []parley.Event
	head   int
	first  int64 // Seq of the oldest event held
	next   int64 // Seq the next Append gets
	start  int64 // Seq of the first event ever appended
	max    int
	closed bool
	wake   chan struct{} // closed and replaced on every Append and on Close
}

// NewLog returns an empty log holding at most max events (DefaultMaxEvents when max <= 0) whose
// first event gets Seq 1.
func NewLog(max int) *Log { return NewLogFrom(max, 1) }

// NewLogFrom returns an empty log whose first event gets Seq next (at least 1).
func NewLogFrom(maxEvents int, next int64) *Log {
	if maxEvents <= 0 {
		maxEvents = DefaultMaxEvents
	}
	next = max(next, 1)
	return &Log{first: next, next: next, start: next, max: maxEvents, wake: make(chan struct{})}
}

// FirstSeq returns the Seq the log's first event got (or gets); reads after FirstSeq()-1 start
// at the log's beginning.
func (l *Log) FirstSeq() int64 { return l.start }

// Next returns the Seq the next Append gets.
func (l *Log) Next() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Append stamps ev with the next sequence number, stores it and wakes every reader. Appending to a
// closed log is a no-op that returns ev unchanged with Seq 0.
func (l *Log) Append(ev parley.Event) parley.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return ev
	}
	ev.Seq = l.next
	l.next++
	if len(l.ring) < l.max {
		l.ring = append(l.ring, ev) // not full yet: head is 0
	} else {
		l.ring[l.head] = ev // overwrite the oldest
		l.head = (l.head + 1) % len(l.ring)
		l.first++
	}
	close(l.wake)
	l.wake = make(chan struct{})
	return ev
}

// Close marks the log complete: readers get the remaining events, then done=true.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
}

// LastSeq returns the sequence number of the last appended event (0 if none).
func (l *Log) LastSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// State returns the Seq of the last appended event and whether the log is complete, read together:
// a reader that sees closed knows last is final.
func (l *Log) State() (last int64, closed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1, l.closed
}

// Closed reports whether the log is complete.
func (l *Log) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Read returns up to max events with Seq > after, waiting until at least one exists, the log is
// closed, or ctx ends. done is true when the log is closed and the returned events are its last.
// It returns ErrTrimmed when events after `after` were dropped from memory, or when `after` lies
// before the log's first event.
func (l *Log) Read(ctx context.Context, after int64, max int) (evs []parley.Event, done bool, err error) {
	if max <= 0 {
		max = 256
	}
	for {
		l.mu.Lock()
		if after+1 < l.first {
			l.mu.Unlock()
			return nil, false, ErrTrimmed
		}
		if after+1 < l.next {
			held := int(l.next - l.first)
			i := int(after + 1 - l.first)
			j := min(i+max, held)
			evs = l.copyOut(i, j)
			done = l.closed && j == held
			l.mu.Unlock()
			return evs, done, nil
		}
		if l.closed {
			l.mu.Unlock()
			return nil, true, nil
		}
		wake := l.wake
		l.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// copyOut returns a copy of the held events at positions i … j-1 (0 is the oldest). Call with
// l.mu held.
func (l *Log) copyOut(i, j int) []parley.Event {
	out := make([]parley.Event, 0, j-i)
	n := len(l.ring)
	a, b := (l.head+i)%n, (l.head+j)%n
	if a < b || j-i == 0 {
		return append(out, l.ring[a:a+(j-i)]...)
	}
	out = append(out, l.ring[a:]...)
	return append(out, l.ring[:b]...)
}
