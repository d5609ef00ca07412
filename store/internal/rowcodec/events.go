package rowcodec

import (
	"encoding/json"
	"fmt"
	"slices"

	parley "github.com/parleyhq/parley"
)

// Events are stored a batch per row (table event_batches): each row holds events with
// consecutive numbers first..last as a JSON array, and the rows of a session never overlap.

// EventBatch is one row to write: events with consecutive numbers, and their JSON array.
type EventBatch struct {
	First, Last int64
	Data        []byte
}

// CheckEvents returns evs sorted by Seq, refusing an event without one.
func CheckEvents(evs []parley.Event) ([]parley.Event, error) {
	for i := range evs {
		if evs[i].Seq <= 0 {
			return nil, parley.Errorf(parley.ECInvalid, "events: event %d has no sequence number", i)
		}
	}
	if !slices.IsSortedFunc(evs, func(a, b parley.Event) int { return int(a.Seq - b.Seq) }) {
		evs = slices.Clone(evs)
		slices.SortStableFunc(evs, func(a, b parley.Event) int { return int(a.Seq - b.Seq) })
	}
	return evs, nil
}

// CheckEncoded returns evs sorted by Seq, refusing an event without a number or, unless
// needJSON is false, without its JSON (then it must have its Event).
func CheckEncoded(evs []parley.EncodedEvent, needJSON bool) ([]parley.EncodedEvent, error) {
	for i := range evs {
		e := &evs[i]
		switch {
		case e.Seq <= 0:
			return nil, parley.Errorf(parley.ECInvalid, "events: event %d has no sequence number", i)
		case e.JSON == nil && (needJSON || e.Event == nil):
			return nil, parley.Errorf(parley.ECInvalid, "events: event %d has no JSON", i)
		case e.Event != nil && e.Event.Seq != e.Seq:
			return nil, parley.Errorf(parley.ECInvalid, "events: event %d is numbered %d, not %d", i, e.Event.Seq, e.Seq)
		}
	}
	cmp := func(a, b parley.EncodedEvent) int { return int(a.Seq - b.Seq) }
	if !slices.IsSortedFunc(evs, cmp) {
		evs = slices.Clone(evs)
		slices.SortStableFunc(evs, cmp)
	}
	return evs, nil
}

// EncodeEvents returns evs (sorted, CheckEvents) with their JSON.
func EncodeEvents(evs []parley.Event) ([]parley.EncodedEvent, error) {
	out := make([]parley.EncodedEvent, len(evs))
	for i := range evs {
		b, err := json.Marshal(&evs[i])
		if err != nil {
			return nil, fmt.Errorf("encoding event %d: %w", evs[i].Seq, err)
		}
		out[i] = parley.EncodedEvent{Seq: evs[i].Seq, JSON: b}
	}
	return out, nil
}

// EncodeAfter sets the JSON of the events of evs that have none, from their Event, as the
// messages they carry will read once msgs, appended to session with last as the last seq, are
// numbered (as the stores' setSeqs number them): an event carrying one of msgs is encoded with a
// numbered copy of it, msgs themselves are left as they are (a write that runs again numbers
// them anew).
func EncodeAfter(evs []parley.EncodedEvent, msgs []*parley.Message, sessionID string, last int64, links Links) error {
	var numbered map[*parley.Message]*parley.Message
	if len(msgs) > 0 {
		numbered = make(map[*parley.Message]*parley.Message, len(msgs))
		first := last - int64(len(msgs)) + 1
		for i, m := range msgs {
			c := *m
			c.Seq, c.SessionID, c.ParentID = first+int64(i), sessionID, links.Parents[i]
			numbered[m] = &c
		}
	}
	for i := range evs {
		e := &evs[i]
		if e.JSON != nil {
			continue
		}
		ev := *e.Event
		if c, ok := numbered[ev.Message]; ok {
			ev.Message = c
		}
		b, err := json.Marshal(&ev)
		if err != nil {
			return fmt.Errorf("encoding event %d: %w", e.Seq, err)
		}
		e.JSON = b
	}
	return nil
}

// Covered reports whether seq lies in one of the stored ranges.
type Covered func(seq int64) bool

// RangesCover returns the Covered of stored ranges [first, last].
func RangesCover(ranges [][2]int64) Covered {
	return func(seq int64) bool {
		for _, r := range ranges {
			if seq >= r[0] && seq <= r[1] {
				return true
			}
		}
		return false
	}
}

// EventBatches joins the JSON of the events of evs (sorted, each with its JSON) that stored does
// not cover into rows of consecutive numbers: usually one row; more when a retried write overlaps
// what is stored or numbers are missing in between. An event number given twice is stored once.
// A row is the JSON array of its events, their JSON as given.
func EventBatches(evs []parley.EncodedEvent, stored Covered) []EventBatch {
	var out []EventBatch
	var buf []byte
	first, last := int64(0), int64(0)
	flush := func() {
		if first == 0 {
			return
		}
		buf = append(buf, ']')
		out = append(out, EventBatch{First: first, Last: last, Data: buf})
		buf = nil
		first = 0
	}
	for i := range evs {
		ev := &evs[i]
		if stored != nil && stored(ev.Seq) || first != 0 && ev.Seq == last {
			continue
		}
		if first != 0 && ev.Seq != last+1 {
			flush()
		}
		if first == 0 {
			first = ev.Seq
			// Sized for the rest of evs: most writes are one row.
			n := 2
			for j := i; j < len(evs); j++ {
				n += len(evs[j].JSON) + 1
			}
			buf = append(make([]byte, 0, n), '[')
		} else {
			buf = append(buf, ',')
		}
		buf = append(buf, ev.JSON...)
		last = ev.Seq
	}
	flush()
	return out
}

// DecodeEventBatch appends to out the events of one row with Seq > after, at most limit in all.
func DecodeEventBatch(out []parley.Event, data []byte, after int64, limit int) ([]parley.Event, error) {
	var evs []parley.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		return out, fmt.Errorf("decoding events: %w", err)
	}
	for _, ev := range evs {
		if len(out) >= limit {
			break
		}
		if ev.Seq > after {
			out = append(out, ev)
		}
	}
	return out, nil
}
