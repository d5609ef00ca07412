package relay

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/internal/redistest"
	"github.com/parleyhq/parley/stream"
	"github.com/redis/go-redis/v9"
)

const wait = 5 * time.Second // the longest any test waits for something that should happen

// start runs r until the test ends, and waits until it is ready.
func start(t *testing.T, r *Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("Run did not return %v after its context ended", wait)
		}
	})
	select {
	case <-r.Ready():
	case <-time.After(wait):
		t.Fatalf("relay %s not ready after %v", r.Instance(), wait)
	}
}

func waitTick(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(wait):
		t.Fatalf("no tick after %v: %s", wait, what)
	}
}

func ticked(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// eventually polls cond until it holds, failing the test after wait.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", wait, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func numsub(t *testing.T, c redis.UniversalClient, channel string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	m, err := c.PubSubNumSub(ctx, channel).Result()
	if err != nil {
		t.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return m[channel]
}

func events(session string, from, to int64) []parley.Event {
	var evs []parley.Event
	for s := from; s <= to; s++ {
		ev := parley.Event{Seq: s, Type: parley.EventChunk, RunID: "run1", SessionID: session, Content: "piece " + strconv.FormatInt(s, 10)}
		switch s % 4 {
		case 1:
			ev = parley.Event{Seq: s, Type: parley.EventStart, RunID: "run1", SessionID: session, Model: "mock/mock"}
		case 2:
			ok := true
			ev = parley.Event{Seq: s, Type: parley.EventToolResult, RunID: "run1", SessionID: session, Message: &parley.Message{
				Role: parley.RoleTool, Content: parley.Text("84"), ToolCallID: "call_1", Name: "calculator",
				Success: &ok, Seq: 3, CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
			}}
		case 3:
			ev = parley.Event{Seq: s, Type: parley.EventDone, RunID: "run1", SessionID: session, FinishReason: parley.FinishStop,
				Usage: &parley.Usage{PromptTokens: 10, CompletionTokens: 2, TotalTokens: 12}, Iterations: 2}
		}
		evs = append(evs, ev)
	}
	return evs
}

func seqs(evs []parley.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Seq
	}
	return out
}

func TestPublishRange(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	want := events("s1", 1, 5)
	if err := r.Publish(ctx, "s1", want); err != nil {
		t.Fatal(err)
	}
	got, err := r.Range(ctx, "s1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Range(0) =\n%+v\nwant\n%+v", got, want)
	}
	got, err = r.Range(ctx, "s1", 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[2:]) {
		t.Fatalf("Range(after 2) = seqs %v, want 3..5", seqs(got))
	}
	got, err = r.Range(ctx, "s1", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want[1:3]) {
		t.Fatalf("Range(after 1, max 2) = seqs %v, want [2 3]", seqs(got))
	}
	got, err = r.Range(ctx, "s1", 5, 0)
	if err != nil || got != nil {
		t.Fatalf("Range(after the last) = %v, %v; want nil, nil", got, err)
	}
	got, err = r.Range(ctx, "nosuch", 0, 0)
	if err != nil || got != nil {
		t.Fatalf("Range(absent stream) = %v, %v; want nil, nil", got, err)
	}
	// The stream is where the API says, with the IDs it says.
	ids, err := client.XRange(ctx, prefix+"ev:s1", "-", "+").Result()
	if err != nil || len(ids) != 5 || ids[0].ID != "1-0" || ids[4].ID != "5-0" {
		t.Fatalf("stream %sev:s1 = %v, %v", prefix, ids, err)
	}
}

func TestRangeDefaultMax(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	if err := r.Publish(ctx, "s", events("s", 1, defaultRangeMax+10)); err != nil {
		t.Fatal(err)
	}
	got, err := r.Range(ctx, "s", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != defaultRangeMax || got[0].Seq != 1 || got[len(got)-1].Seq != defaultRangeMax {
		t.Fatalf("Range with max 0 gave %d events", len(got))
	}
}

func TestPublishRetriedBatch(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	if err := r.Publish(ctx, "s", events("s", 1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "s", events("s", 3, 7)); err != nil {
		t.Fatalf("overlapping batch: %v", err)
	}
	if err := r.Publish(ctx, "s", events("s", 1, 7)); err != nil {
		t.Fatalf("fully duplicate batch: %v", err)
	}
	got, err := r.Range(ctx, "s", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, events("s", 1, 7)) {
		t.Fatalf("after overlapping batches: seqs %v, want 1..7", seqs(got))
	}
}

func TestPublishRejectsBadSeqs(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	for name, evs := range map[string][]parley.Event{
		"zero":       {{Seq: 0, Type: parley.EventStart}},
		"decreasing": {{Seq: 2, Type: parley.EventStart}, {Seq: 1, Type: parley.EventDone}},
		"repeated":   {{Seq: 2, Type: parley.EventStart}, {Seq: 2, Type: parley.EventDone}},
	} {
		if err := r.Publish(ctx, "s", evs); err == nil {
			t.Errorf("%s: Publish gave no error", name)
		}
	}
	if n, err := client.Exists(ctx, prefix+"ev:s").Result(); err != nil || n != 0 {
		t.Fatalf("rejected batches wrote the stream: exists=%d, %v", n, err)
	}
	if err := r.Publish(ctx, "s", nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
}

func TestPublishReturnsOtherErrors(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	if err := client.Set(ctx, prefix+"ev:s", "not a stream", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := r.Publish(ctx, "s", events("s", 1, 2))
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("Publish onto a string key: %v, want a WRONGTYPE error", err)
	}
}

func TestPublishSetsTTL(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix, TTL: time.Minute})
	ctx := context.Background()
	if err := r.Publish(ctx, "s", events("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(ctx, prefix+"ev:s").Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl <= 50*time.Second || ttl > time.Minute {
		t.Fatalf("PTTL = %v, want about 1m", ttl)
	}
	// A later batch renews it.
	if err := client.PExpire(ctx, prefix+"ev:s", time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "s", events("s", 2, 2)); err != nil {
		t.Fatal(err)
	}
	if ttl, err := client.PTTL(ctx, prefix+"ev:s").Result(); err != nil || ttl <= 50*time.Second {
		t.Fatalf("PTTL after a second batch = %v, %v; want about 1m", ttl, err)
	}
}

func TestPublishMaxLen(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix, MaxLen: 10})
	ctx := context.Background()
	for from := int64(1); from <= 1000; from += 100 {
		if err := r.Publish(ctx, "s", events("s", from, from+99)); err != nil {
			t.Fatal(err)
		}
	}
	n, err := client.XLen(ctx, prefix+"ev:s").Result()
	if err != nil {
		t.Fatal(err)
	}
	// MAXLEN ~ trims whole nodes of the stream (100 entries each by default).
	if n < 10 || n > 300 {
		t.Fatalf("XLEN = %d after 1000 events with MaxLen 10", n)
	}
	got, err := r.Range(ctx, "s", 0, 1)
	if err != nil || len(got) != 1 || got[0].Seq <= 1 {
		t.Fatalf("first event after trimming: %v, %v", seqs(got), err)
	}
}

func TestPublishNotifies(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ps := client.Subscribe(ctx, prefix+"evn:s")
	defer ps.Close()
	if _, err := ps.ReceiveTimeout(ctx, wait); err != nil { // the confirmation
		t.Fatal(err)
	}
	if err := r.Publish(ctx, "s", events("s", 1, 7)); err != nil {
		t.Fatal(err)
	}
	msg, err := ps.ReceiveTimeout(ctx, wait)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := msg.(*redis.Message); !ok || m.Payload != "7" {
		t.Fatalf("notification = %#v, want payload 7", msg)
	}
}

func TestRangeBadEntry(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	for i, values := range [][]any{
		{"e", "{garbage"},
		{"x", "{}"},
		{"e", `{"seq":12,"type":"chunk"}`}, // disagrees with its entry ID
	} {
		session := "bad" + strconv.Itoa(i)
		if err := r.Publish(ctx, session, events(session, 1, 1)); err != nil {
			t.Fatal(err)
		}
		id := "9-0"
		if err := client.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "ev:" + session, ID: id, Values: values}).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Range(ctx, session, 0, 0); err == nil || !strings.Contains(err.Error(), id) {
			t.Errorf("Range over entry %s %v: %v, want an error naming %s", id, values, err, id)
		}
		if got, err := r.Range(ctx, session, 0, 1); err != nil || len(got) != 1 {
			t.Errorf("Range before the bad entry: %v, %v", got, err)
		}
	}
	// An event stored without its seq gets it from the entry ID.
	if err := r.Publish(ctx, "s", events("s", 1, 2)); err != nil {
		t.Fatal(err)
	}
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "ev:s", ID: "3-0", Values: []any{"e", `{"type":"done"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := r.Range(ctx, "s", 2, 0)
	if err != nil || len(got) != 1 || got[0].Seq != 3 || got[0].Type != parley.EventDone {
		t.Fatalf("Range over an entry without seq: %+v, %v", got, err)
	}
}

func TestWatchAcrossRelays(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	start(t, b)

	w1, stop1 := b.Watch("s1")
	defer stop1()
	w3, stop3 := b.Watch("s3")
	defer stop3()
	waitTick(t, w1, "subscription to s1 confirmed")
	waitTick(t, w3, "subscription to s3 confirmed")

	ctx := context.Background()
	if err := a.Publish(ctx, "s2", events("s2", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish(ctx, "s1", events("s1", 1, 3)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w1, "publish to s1")
	// Notifications arrive in order, so s2's was dispatched before s1's.
	if ticked(w3) {
		t.Fatal("the watcher of s3 got a tick for another session")
	}
	got, err := b.Range(ctx, "s1", 0, 0)
	if err != nil || !reflect.DeepEqual(got, events("s1", 1, 3)) {
		t.Fatalf("B reads A's events: %v, %v", seqs(got), err)
	}
	if err := a.Publish(ctx, "s1", events("s1", 4, 4)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w1, "second publish to s1")
}

func TestWatchersShareOneSubscription(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	start(t, b)
	channel := prefix + "evn:s"

	w1, stop1 := b.Watch("s")
	w2, stop2 := b.Watch("s")
	waitTick(t, w1, "first watcher: subscription confirmed")
	waitTick(t, w2, "second watcher: subscription confirmed")
	if n := numsub(t, client, channel); n != 1 {
		t.Fatalf("NUMSUB with two watchers = %d, want 1", n)
	}
	ctx := context.Background()
	if err := a.Publish(ctx, "s", events("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w1, "first watcher: publish")
	waitTick(t, w2, "second watcher: publish")

	stop1()
	stop1() // a second call does nothing
	if err := a.Publish(ctx, "s", events("s", 2, 2)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w2, "remaining watcher after the other stopped")
	if ticked(w1) {
		t.Fatal("a stopped watcher got a tick")
	}
	if n := numsub(t, client, channel); n != 1 {
		t.Fatalf("NUMSUB with one watcher left = %d, want 1", n)
	}

	stop2()
	eventually(t, "the subscription is dropped when the last watcher stops", func() bool {
		return numsub(t, client, channel) == 0
	})
	// The control channel stays subscribed.
	if n := numsub(t, client, prefix+"ctl:b"); n != 1 {
		t.Fatalf("NUMSUB of the control channel = %d, want 1", n)
	}

	// Watching again subscribes again.
	w3, stop3 := b.Watch("s")
	defer stop3()
	waitTick(t, w3, "new watcher: subscription confirmed")
	if err := a.Publish(ctx, "s", events("s", 3, 3)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w3, "new watcher: publish")
}

func TestWatchBeforeRun(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	w, stop := b.Watch("s")
	defer stop()
	if n := numsub(t, client, prefix+"evn:s"); n != 0 {
		t.Fatalf("NUMSUB before Run = %d", n)
	}
	start(t, b)
	waitTick(t, w, "subscription made when Run starts")
	if err := a.Publish(context.Background(), "s", events("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w, "publish")
}

// namedClient returns a client of the test server whose connections carry a unique name, and the
// name.
func namedClient(t *testing.T, addr string) (*redis.Client, string) {
	t.Helper()
	opts, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	if addr != "" {
		opts.Addr = addr
	}
	opts.ClientName = "relaytest-" + randomID()
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c, opts.ClientName
}

// killSubscriber kills the subscribed connections named name.
func killSubscriber(t *testing.T, c redis.UniversalClient, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	killed := 0
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] != name || f["sub"] == "0" || f["sub"] == "" {
			continue
		}
		if err := c.Do(ctx, "CLIENT", "KILL", "ID", f["id"]).Err(); err != nil {
			t.Fatal(err)
		}
		killed++
	}
	if killed != 1 {
		t.Fatalf("killed %d subscribed connections named %s, want 1", killed, name)
	}
}

func TestReconnectTicksWatchers(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	named, name := namedClient(t, "")
	a := New(client, "a", Options{Prefix: prefix})
	b := New(named, "b", Options{Prefix: prefix})
	a.Handle(func(context.Context, Control) Reply { return Reply{OK: true} })
	start(t, a)
	start(t, b)
	w, stop := b.Watch("s")
	defer stop()
	waitTick(t, w, "subscription confirmed")

	killSubscriber(t, client, name)
	waitTick(t, w, "reconnection")

	// The renewed subscription carries notifications and replies.
	if err := a.Publish(context.Background(), "s", events("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w, "publish after the reconnection")
	if rep, err := b.Send(context.Background(), "a", Control{Action: "abort"}); err != nil || !rep.OK {
		t.Fatalf("Send after the reconnection: %+v, %v", rep, err)
	}
}

// proxy forwards TCP connections to a Redis server; freeze makes the connections open at that
// moment swallow everything, without closing them (a network that silently dropped them).
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []*proxyConn
	wg     sync.WaitGroup
}

type proxyConn struct {
	client, server net.Conn
	frozen         atomic.Bool
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		cc, err := p.ln.Accept()
		if err != nil {
			return
		}
		sc, err := net.Dial("tcp", p.target)
		if err != nil {
			cc.Close()
			continue
		}
		c := &proxyConn{client: cc, server: sc}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		p.wg.Add(2)
		go c.pipe(&p.wg, cc, sc)
		go c.pipe(&p.wg, sc, cc)
	}
}

func (c *proxyConn) pipe(wg *sync.WaitGroup, from, to net.Conn) {
	defer wg.Done()
	defer from.Close()
	defer to.Close()
	rd := bufio.NewReader(from)
	buf := make([]byte, 32<<10)
	for {
		n, err := rd.Read(buf)
		if n > 0 && !c.frozen.Load() {
			if _, err := to.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.frozen.Store(true)
	}
}

func TestDeadConnectionIsReplaced(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	opts, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, opts.Addr)
	proxied, _ := namedClient(t, p.ln.Addr().String())
	a := New(client, "a", Options{Prefix: prefix})
	b := New(proxied, "b", Options{Prefix: prefix, Timeout: 200 * time.Millisecond})
	start(t, b)
	w, stop := b.Watch("s")
	defer stop()
	waitTick(t, w, "subscription confirmed")

	p.freeze()
	waitTick(t, w, "resubscription on a new connection after the old one stopped answering")
	if err := a.Publish(context.Background(), "s", events("s", 1, 1)); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w, "publish after the connection was replaced")
}

func TestSend(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	got := make(chan Control, 10)
	a.Handle(func(ctx context.Context, c Control) Reply {
		if _, ok := ctx.Deadline(); !ok {
			return Reply{Code: "test", Message: "handler context has no deadline"}
		}
		got <- c
		if c.Action == "pause" {
			return Reply{Code: string(parley.ECConflict), Message: "not running"}
		}
		return Reply{OK: true}
	})
	start(t, a)
	start(t, b)

	ctx := context.Background()
	c := Control{Session: "s1", Run: "r1", Action: "abort"}
	rep, err := b.Send(ctx, "a", c)
	if err != nil || rep != (Reply{OK: true}) {
		t.Fatalf("Send = %+v, %v", rep, err)
	}
	if g := <-got; g != c {
		t.Fatalf("handler got %+v, want %+v", g, c)
	}
	rep, err = b.Send(ctx, "a", Control{Session: "s1", Run: "r1", Action: "pause"})
	if err != nil || rep != (Reply{Code: "conflict", Message: "not running"}) {
		t.Fatalf("Send pause = %+v, %v", rep, err)
	}
	// An instance can send to itself.
	rep, err = a.Send(ctx, "a", c)
	if err != nil || !rep.OK {
		t.Fatalf("Send to self = %+v, %v", rep, err)
	}
}

func TestSendConcurrentHandledOneAtATime(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	var active, most atomic.Int32
	a.Handle(func(ctx context.Context, c Control) Reply {
		n := active.Add(1)
		defer active.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		time.Sleep(5 * time.Millisecond)
		return Reply{OK: true, Message: c.Run}
	})
	start(t, a)
	start(t, b)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			run := strconv.Itoa(i)
			rep, err := b.Send(context.Background(), "a", Control{Run: run, Action: "abort"})
			if err != nil || !rep.OK || rep.Message != run {
				errs <- fmt.Errorf("Send %s = %+v, %v", run, rep, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m := most.Load(); m != 1 {
		t.Fatalf("%d requests were handled at once, want 1", m)
	}
}

func TestSendNoInstance(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	b := New(client, "b", Options{Prefix: prefix, Timeout: 3 * time.Second})
	start(t, b)
	t0 := time.Now()
	_, err := b.Send(context.Background(), "nobody", Control{Action: "abort"})
	if !errors.Is(err, ErrNoInstance) {
		t.Fatalf("Send to nobody: %v, want ErrNoInstance", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("Send to nobody took %v", d)
	}
}

func TestSendTimeout(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix, Timeout: 2 * time.Second})
	b := New(client, "b", Options{Prefix: prefix, Timeout: 300 * time.Millisecond})
	a.Handle(func(ctx context.Context, c Control) Reply {
		<-ctx.Done()
		return Reply{OK: true}
	})
	start(t, a)
	start(t, b)
	t0 := time.Now()
	_, err := b.Send(context.Background(), "a", Control{Action: "pause"})
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Send to a slow handler: %v, want ErrTimeout", err)
	}
	if d := time.Since(t0); d < 250*time.Millisecond || d > 1500*time.Millisecond {
		t.Fatalf("Send timed out after %v, want about 300ms", d)
	}

	// The caller's own context ending is not a timeout of the relay.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = b.Send(ctx, "a", Control{Action: "pause"})
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrTimeout) {
		t.Fatalf("Send with a short caller deadline: %v, want context.DeadlineExceeded", err)
	}
}

func TestSendWithoutRun(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	b := New(client, "b", Options{Prefix: prefix, Timeout: 200 * time.Millisecond})
	if _, err := b.Send(context.Background(), "a", Control{}); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Send before Run: %v, want ErrTimeout", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	<-b.Ready()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := b.Send(context.Background(), "b", Control{}); err == nil || time.Since(t0) > 100*time.Millisecond {
		t.Fatalf("Send after Run returned: %v after %v, want an error at once", err, time.Since(t0))
	}
}

func TestControlWithoutHandlerOrPanicking(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	start(t, a)
	start(t, b)
	ctx := context.Background()
	rep, err := b.Send(ctx, "a", Control{Action: "abort"})
	if err != nil || rep.OK || rep.Code != string(parley.ECUnavailable) {
		t.Fatalf("Send to an instance without handler = %+v, %v", rep, err)
	}
	a.Handle(func(context.Context, Control) Reply { panic("boom") })
	rep, err = b.Send(ctx, "a", Control{Action: "abort"})
	if err != nil || rep.OK || rep.Code != string(parley.ECInternal) || strings.Contains(rep.Message, "boom") {
		t.Fatalf("Send to a panicking handler = %+v, %v", rep, err)
	}
}

func TestBadPayloadsIgnored(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	logs := &syncBuffer{}
	a := New(client, "a", Options{Prefix: prefix, Log: slog.New(slog.NewTextHandler(logs, nil))})
	b := New(client, "b", Options{Prefix: prefix})
	var calls atomic.Int32
	a.Handle(func(context.Context, Control) Reply { calls.Add(1); return Reply{OK: true} })
	start(t, a)
	start(t, b)
	w, stop := a.Watch("s")
	defer stop()
	waitTick(t, w, "subscription confirmed")
	ctx := context.Background()
	for _, payload := range []string{
		"{garbage",
		`{"id":""}`,
		`{"id":"x"}`,
		`{"id":"x","control":{"action":"abort"}}`,                // no sender
		`{"id":"x","from":"b","control":{},"reply":{"ok":true}}`, // both
		`{"id":"x","reply":{"ok":true}}`,                         // nobody waits
		`[1,2,3]`,
	} {
		if err := client.Publish(ctx, prefix+"ctl:a", payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := client.Publish(ctx, prefix+"evn:s", "not a number").Err(); err != nil {
		t.Fatal(err)
	}
	waitTick(t, w, "a notification with a bad payload still ticks")
	rep, err := b.Send(ctx, "a", Control{Action: "abort"})
	if err != nil || !rep.OK {
		t.Fatalf("Send after bad payloads = %+v, %v", rep, err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times, want 1 (bad payloads must not reach it)", n)
	}
	out := logs.String()
	for _, want := range []string{"bad control message", "control request without a sender", "notification with a bad payload"} {
		if !strings.Contains(out, want) {
			t.Errorf("log has no %q:\n%s", want, out)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	client, _ := redistest.Client(t)
	r := New(client, "", Options{})
	if r.Instance() == "" || r.Instance() == New(client, "", Options{}).Instance() {
		t.Fatalf("empty instance IDs are not replaced by random ones: %q", r.Instance())
	}
	if r.opts.MaxLen != 10000 || r.opts.TTL != time.Hour || r.opts.Timeout != 5*time.Second || r.opts.Log == nil {
		t.Fatalf("defaults: %+v", r.opts)
	}
	ctx := context.Background()
	session := "relaytest-" + randomID()
	key := "parley:ev:" + session
	t.Cleanup(func() { client.Del(context.Background(), key) })
	if err := r.Publish(ctx, session, events(session, 1, 1)); err != nil {
		t.Fatal(err)
	}
	ttl, err := client.PTTL(ctx, key).Result()
	if err != nil || ttl <= 59*time.Minute || ttl > time.Hour {
		t.Fatalf("PTTL of %s = %v, %v; want about 1h", key, ttl, err)
	}
}

// relayGoroutines returns the stacks of the goroutines running a method of Relay.
func relayGoroutines() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "relay.(*Relay)") {
			out = append(out, g)
		}
	}
	return out
}

// TestRunStops is not parallel: it checks that no goroutine of any Relay is left, and the
// parallel tests run only after the sequential ones.
func TestRunStops(t *testing.T) {
	client, prefix := redistest.Client(t)
	a := New(client, "a", Options{Prefix: prefix})
	b := New(client, "b", Options{Prefix: prefix})
	handling := make(chan struct{})
	var returned atomic.Bool
	a.Handle(func(ctx context.Context, c Control) Reply {
		close(handling)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond)
		returned.Store(true)
		return Reply{OK: true}
	})
	run := func(r *Relay) (context.CancelFunc, <-chan error) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		select {
		case <-r.Ready():
		case <-time.After(wait):
			t.Fatalf("%s not ready", r.Instance())
		}
		return cancel, done
	}
	stopped := func(done <-chan error) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
		case <-time.After(wait):
			t.Fatal("Run did not return after its context ended")
		}
	}
	cancelA, doneA := run(a)
	cancelB, doneB := run(b)
	defer cancelA()
	defer cancelB()
	_, stop := a.Watch("s")
	defer stop()
	eventually(t, "watch subscribed", func() bool { return numsub(t, client, prefix+"evn:s") == 1 })

	sent := make(chan error, 1)
	go func() {
		_, err := b.Send(context.Background(), "a", Control{Action: "abort"})
		sent <- err
	}()
	select {
	case <-handling:
	case <-time.After(wait):
		t.Fatal("handler not called")
	}
	if err := a.Run(context.Background()); err == nil {
		t.Fatal("a second Run gave no error")
	}
	cancelA()
	stopped(doneA)
	if !returned.Load() {
		t.Fatal("Run returned before the handler it called")
	}
	if err := <-sent; err != nil {
		t.Fatalf("the reply of the request in flight at shutdown was lost: %v", err)
	}
	if n := numsub(t, client, prefix+"ctl:a"); n != 0 {
		t.Fatalf("control channel still subscribed after Run returned (NUMSUB %d)", n)
	}
	if n := numsub(t, client, prefix+"evn:s"); n != 0 {
		t.Fatalf("watched channel still subscribed after Run returned (NUMSUB %d)", n)
	}
	cancelB()
	stopped(doneB)
	// A goroutine that has signalled its end may not have returned yet: give it a moment.
	deadline := time.Now().Add(wait)
	for gs := relayGoroutines(); len(gs) > 0; gs = relayGoroutines() {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of a Relay left %v after Run returned:\n%s", len(gs), wait, strings.Join(gs, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Issue 24: the relay lag of each event another instance reads, from the publication time its
// entry carries.
func TestRangeReportsLag(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	pub := New(client, "a", Options{Prefix: prefix})
	var (
		mu   sync.Mutex
		lags []time.Duration
	)
	sub := New(client, "b", Options{Prefix: prefix, Lag: func(d time.Duration) {
		mu.Lock()
		lags = append(lags, d)
		mu.Unlock()
	}})
	ctx := context.Background()
	before := time.Now()
	if err := pub.Publish(ctx, "s1", events("s1", 1, 3)); err != nil {
		t.Fatal(err)
	}
	got, err := sub.Range(ctx, "s1", 0, 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("Range: %d events, %v", len(got), err)
	}
	elapsed := time.Since(before)
	mu.Lock()
	defer mu.Unlock()
	if len(lags) != 3 {
		t.Fatalf("%d lags for 3 events", len(lags))
	}
	for _, l := range lags {
		// The publication time is in whole milliseconds: at most 1ms more than measured here.
		if l < 0 || l > elapsed+time.Millisecond {
			t.Errorf("lag %v, want between 0 and %v", l, elapsed)
		}
	}
	// An entry written before the field existed has no lag, and still decodes.
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "ev:s2", ID: "1-0", Values: []any{"e", `{"seq":1,"type":"chunk"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := sub.Range(ctx, "s2", 0, 0); err != nil || len(got) != 1 || len(lags) != 3 {
		t.Errorf("an entry without t: %v %v, lags %d", got, err, len(lags))
	}
}

// The relay is a stream.FramePublisher: a run's frames go out with their JSON as it is (an event
// is encoded once), and read back as the events they encode.
var _ stream.FramePublisher = (*Relay)(nil)

func TestPublishFramesKeepsTheirJSON(t *testing.T) {
	t.Parallel()
	client, prefix := redistest.Client(t)
	r := New(client, "a", Options{Prefix: prefix})
	ctx := context.Background()
	want := events("s1", 1, 3)
	frames := make([]*stream.Frame, len(want))
	for i, ev := range want {
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = stream.NewFrame(ev, b)
	}
	if err := r.PublishFrames(ctx, "s1", frames); err != nil {
		t.Fatal(err)
	}
	got, err := r.Range(ctx, "s1", 0, 0)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Range after PublishFrames = %+v, %v; want %+v", got, err, want)
	}
	raw, err := client.XRange(ctx, prefix+"ev:s1", "-", "+").Result()
	if err != nil || len(raw) != 3 {
		t.Fatalf("stream: %v, %v", raw, err)
	}
	for i, m := range raw {
		if m.Values["e"] != string(frames[i].JSON) {
			t.Fatalf("entry %s holds %v, want the frame's JSON %s", m.ID, m.Values["e"], frames[i].JSON)
		}
	}
	// Out of order, as Publish: an error and nothing written.
	if err := r.PublishFrames(ctx, "s2", []*stream.Frame{frames[1], frames[0]}); err == nil {
		t.Fatal("PublishFrames took frames out of order")
	}
	if n, _ := client.XLen(ctx, prefix+"ev:s2").Result(); n != 0 {
		t.Fatalf("a rejected batch wrote %d entries", n)
	}
}
