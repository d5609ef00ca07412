package postgres

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
)

// BenchmarkServerTurns is BenchmarkServerChats for the next turns of conversations: c sessions,
// one a worker, each turn a run begun in its session with the user's message (BeginRun) and ended
// with the answer and 7 events (FinishRun).
func BenchmarkServerTurns1(b *testing.B)   { benchServerTurns(b, 1) }
func BenchmarkServerTurns32(b *testing.B)  { benchServerTurns(b, 32) }
func BenchmarkServerTurns128(b *testing.B) { benchServerTurns(b, 128) }

func benchServerTurns(b *testing.B, c int) {
	var p probe
	s := openTest(b, p.options)
	defer s.Close()
	ctx := context.Background()
	const reserve = 1024
	turn := func(sessionID string, sess *parley.Session) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		run := &parley.RunRecord{ID: parley.NewID(), SessionID: sessionID, Owner: "bench", Model: "m", Instance: "bench",
			LeaseUntil: now.Add(time.Minute), CreatedAt: now}
		user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("a typical short chat line"),
			RunID: run.ID, CreatedAt: now}
		first, err := s.BeginRun(ctx, &parley.RunBegin{NewSession: sess, SessionID: sessionID, Reserve: reserve, Run: run,
			Messages: []*parley.Message{user}})
		if err != nil {
			return err
		}
		answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("An answer of a few words."),
			RunID: run.ID, Model: "m", CreatedAt: now, Usage: &parley.Usage{PromptTokens: 12, CompletionTokens: 8, TotalTokens: 20}}
		evs := []parley.Event{{Type: parley.EventStart}, {Type: parley.EventRecord, Message: user},
			{Type: parley.EventChunk, Content: "An answer "}, {Type: parley.EventChunk, Content: "of a few "},
			{Type: parley.EventChunk, Content: "words."}, {Type: parley.EventRecord, Message: answer},
			{Type: parley.EventDone, FinishReason: "stop"}}
		enc := make([]parley.EncodedEvent, len(evs))
		for j := range evs {
			e := &evs[j]
			e.Seq, e.RunID, e.SessionID = first+int64(j), run.ID, sessionID
			enc[j] = parley.EncodedEvent{Seq: e.Seq, Event: e}
			if e.Message != answer {
				if enc[j].JSON, err = json.Marshal(e); err != nil {
					return err
				}
			}
		}
		return s.FinishRun(ctx, parley.RunFinish{SessionID: sessionID, Messages: []*parley.Message{answer}, Events: enc,
			Limit: first + reserve - 1, Last: enc[len(enc)-1].Seq, RunID: run.ID, Instance: "bench", Finish: "stop", At: now})
	}
	// Each worker's session, with a first turn; then a second turn each, one after another, so
	// that every connection has prepared the statements.
	sessions := make([]string, c)
	for w := range sessions {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Owner: "bench", Title: "bench", CreatedAt: now, UpdatedAt: now}
		sessions[w] = sess.ID
		if err := turn(sess.ID, sess); err != nil {
			b.Fatal(err)
		}
		if err := turn(sess.ID, nil); err != nil {
			b.Fatal(err)
		}
	}
	p.start()
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if err := turn(sessions[w], nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "turns/s")
	p.report(b, b.N, "turn")
}
