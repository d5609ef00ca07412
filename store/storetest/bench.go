package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/llmctx"
)

// Benchmark bodies shared by the stores, so that both are measured the same way.

// BenchSession creates an empty session of owner.
func BenchSession(b *testing.B, s parley.Store, owner string) string {
	b.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: owner, CreatedAt: now, UpdatedAt: now}
	if err := s.CreateSession(context.Background(), sess); err != nil {
		b.Fatal(err)
	}
	return sess.ID
}

func benchMessage(i int) *parley.Message {
	return &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text(fmt.Sprintf("message %d: a typical short chat line", i)),
		RunID: "run", CreatedAt: time.Now().UTC()}
}

// BenchAppend appends batch messages per durable transaction and reports records/s.
func BenchAppend(b *testing.B, s parley.Store, batch int) {
	sid := BenchSession(b, s, "bench")
	ctx := context.Background()
	msgs := make([]*parley.Message, batch)
	for b.Loop() {
		for i := range msgs {
			msgs[i] = benchMessage(i)
		}
		if err := s.AppendMessages(ctx, sid, msgs...); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
}

// Seed10k stores one session of 10,000 messages: 2,500 rounds of a user question, an assistant
// tool call, its result and the answer. It returns the session's id.
func Seed10k(b *testing.B, s parley.Store) string {
	b.Helper()
	sid := BenchSession(b, s, "bench")
	ok := true
	var batch []*parley.Message
	for i := 0; len(batch) < 10_000; i++ {
		id := fmt.Sprintf("call_%d", i)
		now := time.Now().UTC()
		batch = append(batch, benchMessage(i),
			&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, CreatedAt: now, Usage: &parley.Usage{TotalTokens: 10},
				ToolCalls: []parley.ToolCall{{ID: id, Type: "function", Function: parley.FunctionCall{Name: "calculator", Arguments: `{"expression":"1+2"}`}}}},
			&parley.Message{ID: parley.NewID(), Role: parley.RoleTool, ToolCallID: id, Name: "calculator", Content: parley.Text("3"), Success: &ok, CreatedAt: now},
			&parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("The answer is 3."), CreatedAt: now})
	}
	if err := s.AppendMessages(context.Background(), sid, batch...); err != nil {
		b.Fatal(err)
	}
	return sid
}

// BenchModelContext is what the agent loop does before each model call: read the session's model
// view and turn it into the model's message list.
func BenchModelContext(b *testing.B, s parley.Store, sid string) {
	b.ReportAllocs()
	for b.Loop() {
		h, err := s.ModelHistory(context.Background(), sid)
		if err != nil || len(h) != 10_000 {
			b.Fatalf("%d %v", len(h), err)
		}
		if msgs := llmctx.BuildOwned(h, llmctx.Options{}); len(msgs) != 10_000 {
			b.Fatal(len(msgs))
		}
	}
}

// BenchHistory loads every message of the session with all its metadata.
func BenchHistory(b *testing.B, s parley.Store, sid string) {
	b.ReportAllocs()
	for b.Loop() {
		h, err := s.History(context.Background(), sid)
		if err != nil || len(h) != 10_000 {
			b.Fatalf("%d %v", len(h), err)
		}
	}
}

// BenchPageAll pages through all n sessions of owner, 100 at a time, and reports pages/s.
func BenchPageAll(b *testing.B, s parley.Store, owner string, n int) {
	ctx := context.Background()
	pages := 0
	for b.Loop() {
		cursor, seen := "", 0
		for {
			page, next, err := s.ListSessions(ctx, owner, parley.Page{Cursor: cursor, Limit: 100})
			if err != nil {
				b.Fatal(err)
			}
			seen += len(page)
			pages++
			if next == "" {
				break
			}
			cursor = next
		}
		if seen != n {
			b.Fatalf("paged through %d sessions, want %d", seen, n)
		}
	}
	b.ReportMetric(float64(pages)/b.Elapsed().Seconds(), "pages/s")
}

// BenchAppendConcurrent runs c writers at once, each appending one message per call to a
// session of its own, and reports records/s: what group commit shares among concurrent callers.
func BenchAppendConcurrent(b *testing.B, s parley.Store, c int) {
	sids := make([]string, c)
	for i := range sids {
		sids[i] = BenchSession(b, s, "bench")
	}
	benchConcurrent(b, c, func(w, i int) error {
		return s.AppendMessages(context.Background(), sids[w], benchMessage(i))
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// BenchChats runs c chats at once and reports chats/s, each chat making the writes a streamed
// chat of a new session makes: before the model call the session, a block of event numbers, the
// run record and the user's message; after it the assistant's message, the run's 6 events, and
// the numbers given back with the run's end. A store that is a parley.RunBeginner writes each
// side in one call (BeginRun, FinishRun), as runs.Manager does; others one call per record.
func BenchChats(b *testing.B, s parley.Store, c int) {
	benchConcurrent(b, c, func(_, i int) error { return benchChat(s, i) })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "chats/s")
}

func benchChat(s parley.Store, i int) error {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Owner: "bench", Title: "bench", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "bench", Model: "m", Instance: "bench", LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := benchMessage(i)
	user.RunID = run.ID
	rb, combined := s.(parley.RunBeginner)
	var first int64
	if combined {
		var err error
		if first, err = rb.BeginRun(ctx, &parley.RunBegin{NewSession: sess, Reserve: 1024, Run: run, Messages: []*parley.Message{user}}); err != nil {
			return err
		}
	} else {
		if err := s.CreateSession(ctx, sess); err != nil {
			return err
		}
		var err error
		if first, err = s.ReserveEventSeqs(ctx, sess.ID, 1024); err != nil {
			return err
		}
		run.FirstSeq = first
		if err := s.CreateRun(ctx, run); err != nil {
			return err
		}
		if err := s.AppendMessages(ctx, sess.ID, user); err != nil {
			return err
		}
	}
	answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text("An answer of a few words."),
		RunID: run.ID, CreatedAt: now, Usage: &parley.Usage{TotalTokens: 20}}
	if err := s.AppendMessages(ctx, sess.ID, answer); err != nil {
		return err
	}
	evs := []parley.Event{{Type: parley.EventStart}, {Type: parley.EventRecord, Message: user}, {Type: parley.EventChunk, Content: "An answer "},
		{Type: parley.EventChunk, Content: "of a few words."}, {Type: parley.EventRecord, Message: answer}, {Type: parley.EventDone, FinishReason: "stop"}}
	for j := range evs {
		evs[j].Seq, evs[j].RunID, evs[j].SessionID = first+int64(j), run.ID, sess.ID
	}
	last := first + int64(len(evs)) - 1
	if combined {
		if err := rb.FinishRun(ctx, parley.RunFinish{SessionID: sess.ID, Limit: first + 1023, Last: last, RunID: run.ID, Instance: "bench", Finish: "stop", At: now}); err != nil {
			return err
		}
	} else {
		if err := s.ReleaseEventSeqs(ctx, sess.ID, first+1023, last); err != nil {
			return err
		}
		if err := s.EndRun(ctx, run.ID, "bench", "stop", now); err != nil {
			return err
		}
	}
	return s.AppendEvents(ctx, sess.ID, now, evs)
}

// benchConcurrent calls fn b.N times from c goroutines (w: the goroutine, i: the call).
func benchConcurrent(b *testing.B, c int, fn func(w, i int) error) {
	b.ResetTimer()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, c)
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if err := fn(w, int(i)); err != nil {
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
}

// Branch10k makes a session of Seed10k branched: it edits the first question (a sibling of it)
// and switches back, so that its active branch is its 10,000 messages again, now read by walking
// up the tree from the leaf instead of by seq.
func Branch10k(b *testing.B, s parley.Store, sid string) {
	b.Helper()
	ctx := context.Background()
	leaf, nodes, err := s.Tree(ctx, sid)
	if err != nil || len(nodes) != 10_000 {
		b.Fatalf("tree: %d %v", len(nodes), err)
	}
	edit := benchMessage(-1)
	edit.ParentID = parley.ParentRoot
	if err := s.AppendMessages(ctx, sid, edit); err != nil {
		b.Fatal(err)
	}
	if got, err := s.SwitchBranch(ctx, sid, leaf); err != nil || got != leaf {
		b.Fatalf("switch back: %q %v", got, err)
	}
}

// BenchRunChats runs c chats of new sessions at once, each making the two writes runs.Manager
// makes for a streamed chat on a parley.RunBeginner: BeginRun (the session, a block of event
// numbers, the run record and the user's message) and FinishRun (the assistant's message, the
// run's 7 events, the numbers given back and the run's end). It reports chats/s and the CPU
// time (user and system, of the whole process) per chat, which depends less on the machine's
// load than chats/s, and what probe measures of the store.
func BenchRunChats(b *testing.B, s parley.Store, c int, probe ChatsProbe) {
	rb, ok := s.(parley.RunBeginner)
	if !ok {
		b.Skip("the store is no parley.RunBeginner")
	}
	chat := func(i int) error {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Owner: "bench", Title: "bench", CreatedAt: now, UpdatedAt: now}
		return benchTurn(rb, sess.ID, sess, benchMessage(i))
	}
	for i := range probe.Warm {
		if err := chat(-1 - i); err != nil {
			b.Fatal(err)
		}
	}
	benchChats(b, c, probe, "chat", func(_, i int) error { return chat(i) })
}

// BenchRunTurns is BenchRunChats for the next turns of conversations: c sessions, one a
// goroutine, each turn a run begun in its session with the user's message and ended as a chat's.
// Every session has two turns before the measured ones (its first, then one in the session as
// it is: every connection of a pool prepares its statements).
func BenchRunTurns(b *testing.B, s parley.Store, c int, probe ChatsProbe) {
	rb, ok := s.(parley.RunBeginner)
	if !ok {
		b.Skip("the store is no parley.RunBeginner")
	}
	sessions := make([]string, c)
	for w := range sessions {
		now := time.Now().UTC().Truncate(time.Microsecond)
		sess := &parley.Session{ID: parley.NewID(), Owner: "bench", Title: "bench", CreatedAt: now, UpdatedAt: now}
		sessions[w] = sess.ID
		if err := benchTurn(rb, sess.ID, sess, benchMessage(-1-2*w)); err != nil {
			b.Fatal(err)
		}
		if err := benchTurn(rb, sess.ID, nil, benchMessage(-2-2*w)); err != nil {
			b.Fatal(err)
		}
	}
	benchChats(b, c, probe, "turn", func(w, i int) error { return benchTurn(rb, sessions[w], nil, benchMessage(i)) })
}

// benchChats runs fn b.N times from c goroutines between probe's Start and Report, and reports
// the rate and the process's CPU time per unit.
func benchChats(b *testing.B, c int, probe ChatsProbe, unit string, fn func(w, i int) error) {
	var st0 int64
	if probe.Statements != nil {
		st0 = probe.Statements()
	}
	if probe.Start != nil {
		probe.Start()
	}
	cpu0 := cpuTime()
	benchConcurrent(b, c, fn)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), unit+"s/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/"+unit)
	if probe.Statements != nil {
		b.ReportMetric(float64(probe.Statements()-st0)/float64(b.N), "stmts/"+unit)
	}
	if probe.Report != nil {
		probe.Report(b.N)
	}
}

// benchTurn makes the two writes of one streamed chat in session sessionID (newSession: the
// session it creates, nil for a session that exists): the run's beginning with the user's
// message, then its end with the answer and the run's 7 events.
func benchTurn(rb parley.RunBeginner, sessionID string, newSession *parley.Session, user *parley.Message) error {
	const reserve = 1024
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sessionID, Owner: "bench", Model: "m", Instance: "bench",
		LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user.RunID = run.ID
	first, err := rb.BeginRun(ctx, &parley.RunBegin{NewSession: newSession, SessionID: sessionID, Reserve: reserve, Run: run,
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
		if e.Message != answer { // the answer's record is encoded once it is numbered
			if enc[j].JSON, err = json.Marshal(e); err != nil {
				return err
			}
		}
	}
	return rb.FinishRun(ctx, parley.RunFinish{SessionID: sessionID, Messages: []*parley.Message{answer}, Events: enc,
		Limit: first + reserve - 1, Last: enc[len(enc)-1].Seq, RunID: run.ID, Instance: "bench", Finish: "stop", At: now})
}

// SessionChat is chat i of a 1-stream client, each in a new session: the run's beginning (the
// session, the run's record, 64 event numbers and the user's message: the write a chat's first
// token waits for) and, once it has begun at first, the run's end with its answer and five chunk
// events (BenchmarkChatBeginLatency of each store).
func SessionChat(i int) (begin *parley.RunBegin, end func(first int64) parley.RunFinish) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	sess := &parley.Session{ID: parley.NewID(), Title: "a chat", Owner: "o", CreatedAt: now, UpdatedAt: now}
	run := &parley.RunRecord{ID: parley.NewID(), SessionID: sess.ID, Owner: "o", Model: "m", Instance: "i",
		LeaseUntil: now.Add(time.Minute), CreatedAt: now}
	user := &parley.Message{ID: parley.NewID(), Role: parley.RoleUser, Content: parley.Text("Tell me something, please."), RunID: run.ID, CreatedAt: now}
	begin = &parley.RunBegin{NewSession: sess, SessionID: sess.ID, Reserve: 64, Run: run, Messages: []*parley.Message{user}}
	return begin, func(first int64) parley.RunFinish {
		answer := &parley.Message{ID: parley.NewID(), Role: parley.RoleAssistant, Content: parley.Text(fmt.Sprintf("answer %d", i)), RunID: run.ID, CreatedAt: now}
		evs := make([]parley.EncodedEvent, 5)
		for j := range evs {
			ev := &parley.Event{Seq: first + int64(j), Type: parley.EventChunk, RunID: run.ID, SessionID: sess.ID, Content: "some text of the answer"}
			evs[j] = parley.EncodedEvent{Seq: ev.Seq, Event: ev}
		}
		return parley.RunFinish{SessionID: sess.ID, Messages: []*parley.Message{answer}, Events: evs,
			Limit: first + 63, Last: first + 4, RunID: run.ID, Instance: "i", Finish: parley.FinishStop, At: now}
	}
}

// ChatsProbe is what BenchRunChats measures of a store beyond chats/s and the process's CPU;
// every field may be left out.
type ChatsProbe struct {
	// Statements returns how many SQL statements the store ran so far (reported per chat).
	Statements func() int64
	// Warm is how many chats run one after another before the measured ones (so that every
	// connection of a pool has prepared its statements).
	Warm int
	// Start is called just before the measured chats, Report just after them with their number
	// (to report what the store did per chat with b.ReportMetric).
	Start  func()
	Report func(chats int)
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
