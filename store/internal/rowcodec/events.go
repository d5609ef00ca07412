package rowcodec

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	parley "github.com/parleyhq/parley"
)

// Events are stored a batch per row (table event_batches): each row holds events with
// consecutive numbers first..last, and the rows of a session never overlap. A row is one of two
// forms, told apart by its first byte (store/sqlite writes the second, store/postgres the first;
// DecodeEventBatch reads both):
//
//   - `[` the JSON array of its events, each event's JSON as given (every row written before
//     the compact form, and a row whose events the compact form cannot hold);
//   - `{` the compact form, a JSON object {"f":first,"s":session,"r":run,"e":[…]} whose e
//     holds each event's JSON without the members every event of the row repeats: its "seq"
//     (first, first+1, … in order), "run_id" and "session_id" (s and r, each the JSON string
//     the events held, byte for byte). Reading puts them back.
//
// The compact form keeps about 110 bytes an event out of the row (two 36-character ids and a
// number), nearly half of a short chat's row.

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
	return eventBatches(evs, stored, false)
}

// CompactEventBatches is EventBatches with each row in the compact form when its events allow
// it: each event's JSON begins as json.Marshal encodes an Event, {"seq":<its Seq>,"type":…,
// "run_id":…,"session_id":…, with the same run and session throughout. Other rows are JSON
// arrays. A store that writes them must read its rows with DecodeEventBatch, and its schema's
// way back to before the compact form must turn such rows into arrays.
func CompactEventBatches(evs []parley.EncodedEvent, stored Covered) []EventBatch {
	return eventBatches(evs, stored, true)
}

func eventBatches(evs []parley.EncodedEvent, stored Covered, compact bool) []EventBatch {
	var out []EventBatch
	var small [16]int
	kept := small[:0] // the indexes in evs of the current row's events
	for i := range evs {
		seq := evs[i].Seq
		if stored != nil && stored(seq) {
			continue
		}
		if len(kept) > 0 {
			last := evs[kept[len(kept)-1]].Seq
			if seq == last {
				continue
			}
			if seq != last+1 {
				out = append(out, joinRow(evs, kept, compact))
				kept = kept[:0]
			}
		}
		kept = append(kept, i)
	}
	if len(kept) > 0 {
		out = append(out, joinRow(evs, kept, compact))
	}
	return out
}

// joinRow makes the row of the events of evs at the indexes kept (consecutive numbers): in the
// compact form if compact and they allow it, else as a JSON array.
func joinRow(evs []parley.EncodedEvent, kept []int, compact bool) EventBatch {
	first, last := evs[kept[0]].Seq, evs[kept[len(kept)-1]].Seq
	if compact {
		if row, ok := compactRow(evs, kept); ok {
			return EventBatch{First: first, Last: last, Data: row}
		}
	}
	n := 2
	for _, i := range kept {
		n += len(evs[i].JSON) + 1
	}
	buf := append(make([]byte, 0, n), '[')
	for k, i := range kept {
		if k > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, evs[i].JSON...)
	}
	return EventBatch{First: first, Last: last, Data: append(buf, ']')}
}

// compactRow returns the compact form of the events of evs at the indexes kept, or false when
// one of them does not begin as the compact form needs or names another run or session.
func compactRow(evs []parley.EncodedEvent, kept []int) ([]byte, bool) {
	var small [16]eventHead
	heads := small[:0]
	if len(kept) > len(small) {
		heads = make([]eventHead, 0, len(kept))
	}
	n := len(`{"f":,"s":,"r":,"e":[]}`) + 20
	for k, i := range kept {
		h, ok := splitHead(evs[i].JSON, evs[i].Seq)
		if !ok || k > 0 && (!bytes.Equal(h.run, heads[0].run) || !bytes.Equal(h.session, heads[0].session)) {
			return nil, false
		}
		heads = append(heads, h)
		n += len(`{"type":,`) + len(h.typ) + len(evs[i].JSON) - h.cut
	}
	h0 := &heads[0]
	buf := make([]byte, 0, n+len(h0.run)+len(h0.session))
	buf = append(buf, `{"f":`...)
	buf = strconv.AppendInt(buf, evs[kept[0]].Seq, 10)
	buf = append(buf, `,"s":`...)
	buf = append(buf, h0.session...)
	buf = append(buf, `,"r":`...)
	buf = append(buf, h0.run...)
	buf = append(buf, `,"e":[`...)
	for k, i := range kept {
		if k > 0 {
			buf = append(buf, ',')
		}
		buf = append(buf, `{"type":`...)
		buf = append(buf, heads[k].typ...)
		buf = append(buf, evs[i].JSON[heads[k].cut:]...)
	}
	return append(buf, "]}"...), true
}

// eventHead is the beginning of an event's JSON as json.Marshal encodes an Event:
// {"seq":N,"type":T,"run_id":R,"session_id":S, then the rest from cut (a ',' or the '}').
type eventHead struct {
	typ, run, session []byte // each a JSON string, quotes and escapes as they are
	cut               int
}

// splitHead reads the head of js, an event's JSON whose number must be seq.
func splitHead(js []byte, seq int64) (eventHead, bool) {
	var h eventHead
	rest, ok := bytes.CutPrefix(js, []byte(`{"seq":`))
	if !ok || len(rest) == 0 || rest[0] == '0' {
		return h, false
	}
	var n int64
	digits := 0
	for ; digits < len(rest) && digits < 18 && rest[digits] >= '0' && rest[digits] <= '9'; digits++ {
		n = n*10 + int64(rest[digits]-'0')
	}
	if digits == 0 || n != seq {
		return h, false
	}
	rest = rest[digits:]
	if h.typ, rest, ok = cutMember(rest, `,"type":`); !ok {
		return h, false
	}
	if h.run, rest, ok = cutMember(rest, `,"run_id":`); !ok {
		return h, false
	}
	if h.session, rest, ok = cutMember(rest, `,"session_id":`); !ok {
		return h, false
	}
	if len(rest) == 0 || rest[0] != ',' && rest[0] != '}' {
		return h, false
	}
	h.cut = len(js) - len(rest)
	return h, true
}

// cutMember cuts from b the member key (`,"name":`) and its value, a JSON string, and returns
// the value and what follows it.
func cutMember(b []byte, key string) (val, rest []byte, ok bool) {
	if rest, ok = bytes.CutPrefix(b, []byte(key)); !ok {
		return nil, b, false
	}
	n := jsonStringLen(rest)
	if n == 0 {
		return nil, b, false
	}
	return rest[:n], rest[n:], true
}

// jsonStringLen returns the length of the JSON string b begins with, its quotes included, or 0
// if b does not begin with one.
func jsonStringLen(b []byte) int {
	if len(b) == 0 || b[0] != '"' {
		return 0
	}
	for i := 1; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return 0
}

// compactRowJSON is the compact form of a row, decoded.
type compactRowJSON struct {
	First   int64          `json:"f"`
	Session string         `json:"s"`
	Run     string         `json:"r"`
	Events  []parley.Event `json:"e"`
}

// DecodeEventBatch appends to out the events of one row (either form) with Seq > after, at most
// limit in all.
func DecodeEventBatch(out []parley.Event, data []byte, after int64, limit int) ([]parley.Event, error) {
	var evs []parley.Event
	if len(data) > 0 && data[0] == '{' {
		var row compactRowJSON
		if err := json.Unmarshal(data, &row); err != nil {
			return out, fmt.Errorf("decoding events: %w", err)
		}
		evs = row.Events
		for i := range evs {
			evs[i].Seq, evs[i].RunID, evs[i].SessionID = row.First+int64(i), row.Run, row.Session
		}
	} else if err := json.Unmarshal(data, &evs); err != nil {
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
