package rowcodec

import (
	"bytes"
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

// EventBatches encodes the events of evs (sorted, CheckEvents) that stored does not cover, as
// rows of consecutive numbers: usually one row; more when a retried write overlaps what is
// stored or numbers are missing in between. An event number given twice is stored once.
func EventBatches(evs []parley.Event, stored Covered) ([]EventBatch, error) {
	var out []EventBatch
	var buf bytes.Buffer
	first, last := int64(0), int64(0)
	flush := func() {
		if first == 0 {
			return
		}
		buf.WriteByte(']')
		out = append(out, EventBatch{First: first, Last: last, Data: bytes.Clone(buf.Bytes())})
		buf.Reset()
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
		b, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("encoding event %d: %w", ev.Seq, err)
		}
		if first == 0 {
			first = ev.Seq
			buf.WriteByte('[')
		} else {
			buf.WriteByte(',')
		}
		buf.Write(b)
		last = ev.Seq
	}
	flush()
	return out, nil
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
