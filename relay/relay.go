// Package relay carries a session's live run events and the control requests of its runs between
// the Parley instances that share one Redis.
//
// A run executes on one instance. That instance publishes the run's events into a Redis stream per
// session (Publish) and announces them with a small notification; every other instance watches
// the sessions its clients follow (Watch) and reads the new events from the stream (Range) when a
// notification arrives. A client's abort, pause or resume that reaches another instance is sent
// to the owner of the run (Send), whose handler (Handle) answers it.
//
// The Redis names, for a prefix P:
//
//	P ev:<session>   the session's events: a stream, one entry per event, ID "<seq>-0", field "e"
//	                 (the event's JSON) and "t" (when it was published, Unix ms)
//	P evn:<session>  a channel: the last seq of each published batch, in decimal
//	P ctl:<instance> a channel: control requests to the instance, and replies to its requests
package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/stream"
	"github.com/redis/go-redis/v9"
)

// The defaults of Options, and of Range's max.
const (
	defaultPrefix   = "parley:"
	defaultMaxLen   = 10000
	defaultTTL      = time.Hour
	defaultTimeout  = 5 * time.Second
	defaultRangeMax = 256
)

const (
	requestQueue   = 64                    // control requests waiting for the handler
	subscribeBatch = 500                   // channels per SUBSCRIBE or UNSUBSCRIBE command
	minBackoff     = 50 * time.Millisecond // first wait after a failed Redis call
	maxBackoff     = 2 * time.Second       // longest wait between retries
	topItemError   = "equal or smaller than the target stream top item"
)

// ErrNoInstance is returned by Send when no instance listens on the addressed instance's control
// channel: the instance is not running, or has not started its Run yet.
var ErrNoInstance = errors.New("relay: no such instance")

// ErrTimeout is returned by Send when no reply came within Options.Timeout.
var ErrTimeout = errors.New("relay: timeout waiting for a reply")

// errStopped is returned by Send once Run has returned: replies can no longer be received.
var errStopped = errors.New("relay: stopped")

// Options configure a Relay. The zero value of each field selects its default.
type Options struct {
	// Prefix is put before every key and channel name. Default "parley:".
	Prefix string
	// MaxLen is the approximate bound of each session's stream (XADD MAXLEN ~): older entries are
	// trimmed. Default 10000.
	MaxLen int64
	// TTL is how long a session's stream is kept after its last Publish. Default 1h.
	TTL time.Duration
	// Timeout bounds each Redis call, each Send's wait for its reply and each call of the control
	// handler. It also sets the health check of the subscription: after Timeout without any
	// message the subscription is pinged, and a ping unanswered for Timeout makes the Relay drop
	// the connection and subscribe again on a new one. Default 5s.
	Timeout time.Duration
	// Log receives the Relay's warnings (dropped or undecodable messages, Redis errors while
	// subscribed). Default: discarded.
	Log *slog.Logger
	// Lag, when set, receives for each event Range returns the time since it was published (its
	// entry's field "t", the publisher's clock in Unix milliseconds; the instances' clocks must
	// agree for it to mean anything). nil: not measured.
	Lag func(time.Duration)
}

// Relay is one instance's link to the other instances. Its methods are safe for concurrent use.
// Publish and Range work on their own; Watch, Send and control requests need Run.
type Relay struct {
	client redis.UniversalClient
	id     string
	opts   Options
	log    *slog.Logger

	ctlChannel string // this instance's control channel
	evnPrefix  string // prefix of the notification channels

	mu       sync.Mutex
	watchers map[string]map[*watcher]struct{} // session ID → its watchers; no empty sets
	waiters  map[string]chan Reply            // request ID → the waiting Send
	handler  func(context.Context, Control) Reply
	started  bool

	changed   chan struct{} // buffer 1: the set of watched sessions changed
	ready     chan struct{} // closed when the control channel subscription is confirmed
	readyOnce sync.Once
	stopped   chan struct{} // closed when Run returns
}

type watcher struct {
	ch chan struct{} // buffer 1
}

// New returns a Relay for the instance instanceID, which must be unique among the instances that
// share the Redis of client; an empty instanceID is replaced by a random one. Nothing is sent to
// Redis until a method is called.
func New(client redis.UniversalClient, instanceID string, opts Options) *Relay {
	if opts.Prefix == "" {
		opts.Prefix = defaultPrefix
	}
	if opts.MaxLen <= 0 {
		opts.MaxLen = defaultMaxLen
	}
	if opts.TTL <= 0 {
		opts.TTL = defaultTTL
	}
	if opts.Timeout <= 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if instanceID == "" {
		instanceID = randomID()
	}
	return &Relay{
		client:     client,
		id:         instanceID,
		opts:       opts,
		log:        opts.Log.With("component", "relay", "instance", instanceID),
		ctlChannel: opts.Prefix + "ctl:" + instanceID,
		evnPrefix:  opts.Prefix + "evn:",
		watchers:   make(map[string]map[*watcher]struct{}),
		waiters:    make(map[string]chan Reply),
		changed:    make(chan struct{}, 1),
		ready:      make(chan struct{}),
		stopped:    make(chan struct{}),
	}
}

// Instance returns the ID of this instance: the address other instances Send to.
func (r *Relay) Instance() string { return r.id }

func (r *Relay) streamKey(sessionID string) string { return r.opts.Prefix + "ev:" + sessionID }

func (r *Relay) notifyChannel(sessionID string) string { return r.evnPrefix + sessionID }

func (r *Relay) controlChannel(instanceID string) string {
	return r.opts.Prefix + "ctl:" + instanceID
}

// ---------------------------------------------------------------------------------------------
// Events

// Publish appends the session's events to its stream <prefix>ev:<sessionID>, each as one entry
// with the ID "<seq>-0" and the field "e" holding the event's JSON, then sets the stream to expire
// TTL from now and publishes the last Seq, in decimal, on the channel <prefix>evn:<sessionID>;
// all in one pipeline. The events must have Seq > 0 and be in increasing Seq order; otherwise
// Publish returns an error and writes nothing. An event whose Seq is not above the stream's last
// entry (a retried batch) is skipped without error. Any other Redis error is returned.
func (r *Relay) Publish(ctx context.Context, sessionID string, evs []parley.Event) error {
	if len(evs) == 0 {
		return nil
	}
	seqs := make([]int64, len(evs))
	datas := make([]string, len(evs))
	for i, ev := range evs {
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("relay: publish %s: event %d: %w", sessionID, ev.Seq, err)
		}
		seqs[i], datas[i] = ev.Seq, string(b)
	}
	return r.publish(ctx, sessionID, seqs, datas)
}

// PublishFrames publishes as Publish does the events of frames, whose JSON is the entries' "e"
// as it is: an event is encoded once, for the relay as for the clients.
func (r *Relay) PublishFrames(ctx context.Context, sessionID string, frames []*stream.Frame) error {
	if len(frames) == 0 {
		return nil
	}
	seqs := make([]int64, len(frames))
	datas := make([]string, len(frames))
	for i, f := range frames {
		seqs[i], datas[i] = f.Seq, string(f.JSON)
	}
	return r.publish(ctx, sessionID, seqs, datas)
}

func (r *Relay) publish(ctx context.Context, sessionID string, seqs []int64, datas []string) error {
	var prev int64
	for i, seq := range seqs {
		if seq <= prev {
			return fmt.Errorf("relay: publish %s: event %d has seq %d, want above %d", sessionID, i, seq, prev)
		}
		prev = seq
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	key := r.streamKey(sessionID)
	pipe := r.client.Pipeline()
	adds := make([]*redis.StringCmd, len(seqs))
	published := strconv.FormatInt(time.Now().UnixMilli(), 10) // for the readers' Lag
	for i, seq := range seqs {
		adds[i] = pipe.XAdd(ctx, &redis.XAddArgs{
			Stream: key,
			MaxLen: r.opts.MaxLen,
			Approx: true,
			ID:     strconv.FormatInt(seq, 10) + "-0",
			Values: []any{"e", datas[i], "t", published},
		})
	}
	expire := pipe.PExpire(ctx, key, r.opts.TTL)
	notify := pipe.Publish(ctx, r.notifyChannel(sessionID), strconv.FormatInt(prev, 10))
	_, _ = pipe.Exec(ctx) // each command's error is looked at below
	for i, c := range adds {
		if err := c.Err(); err != nil && !strings.Contains(err.Error(), topItemError) {
			return fmt.Errorf("relay: publish %s: event %d: %w", sessionID, seqs[i], err)
		}
	}
	if err := expire.Err(); err != nil {
		return fmt.Errorf("relay: publish %s: expire: %w", sessionID, err)
	}
	if err := notify.Err(); err != nil {
		return fmt.Errorf("relay: publish %s: notify: %w", sessionID, err)
	}
	return nil
}

// Range returns up to max of the session's events with Seq > after, in Seq order; a max that is
// not positive means 256. A session without a stream (never published, or expired)
// gives no events and no error. An entry that does not decode to an event is an error that names
// the entry's ID.
func (r *Relay) Range(ctx context.Context, sessionID string, after int64, max int) ([]parley.Event, error) {
	if max <= 0 {
		max = defaultRangeMax
	}
	start := "-"
	if after > 0 {
		start = "(" + strconv.FormatInt(after, 10) + "-0"
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	msgs, err := r.client.XRangeN(ctx, r.streamKey(sessionID), start, "+", int64(max)).Result()
	if err != nil {
		return nil, fmt.Errorf("relay: range %s: %w", sessionID, err)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	evs := make([]parley.Event, 0, len(msgs))
	now := time.Now()
	for _, m := range msgs {
		ev, err := decodeEntry(m)
		if err != nil {
			return nil, fmt.Errorf("relay: range %s: entry %s: %w", sessionID, m.ID, err)
		}
		evs = append(evs, ev)
		if r.opts.Lag != nil {
			if t, ok := m.Values["t"].(string); ok {
				if ms, err := strconv.ParseInt(t, 10, 64); err == nil {
					lag := now.Sub(time.UnixMilli(ms))
					if lag < 0 { // the publisher's clock is ahead
						lag = 0
					}
					r.opts.Lag(lag)
				}
			}
		}
	}
	return evs, nil
}

// decodeEntry turns a stream entry into its event. The entry's ID gives the Seq; the event's own
// seq, if it has one, must agree.
func decodeEntry(m redis.XMessage) (parley.Event, error) {
	var ev parley.Event
	ms, ss, ok := strings.Cut(m.ID, "-")
	seq, err := strconv.ParseInt(ms, 10, 64)
	if !ok || ss != "0" || err != nil || seq <= 0 {
		return ev, errors.New("not an event ID")
	}
	v, ok := m.Values["e"]
	if !ok {
		return ev, errors.New(`no field "e"`)
	}
	s, ok := v.(string)
	if !ok {
		return ev, fmt.Errorf(`field "e" is a %T`, v)
	}
	if err := json.Unmarshal([]byte(s), &ev); err != nil {
		return ev, err
	}
	if ev.Seq == 0 {
		ev.Seq = seq
	} else if ev.Seq != seq {
		return ev, fmt.Errorf("event has seq %d", ev.Seq)
	}
	return ev, nil
}

// Watch returns a channel that receives a tick whenever a notification for the session arrives,
// and a function that stops the watching. A tick means only "read the stream again": ticks are
// sent without blocking into a buffer of one, so several notifications may give one tick. A
// watcher also gets a tick each time the session's subscription is (re)established, when Run
// starts or after a reconnection, since notifications may have been missed meanwhile; so a caller
// that calls Watch, then Range, then Range again at each tick misses no event.
//
// All the watchers of a session share one subscription, made over the Relay's single Redis
// connection for subscriptions, and dropped when the last of them stops. Watch may be called
// before Run: the subscription is made when Run starts. The channel is never closed; stop may be
// called more than once.
func (r *Relay) Watch(sessionID string) (<-chan struct{}, func()) {
	w := &watcher{ch: make(chan struct{}, 1)}
	r.mu.Lock()
	set := r.watchers[sessionID]
	if set == nil {
		set = make(map[*watcher]struct{})
		r.watchers[sessionID] = set
		r.signalChanged()
	}
	set[w] = struct{}{}
	r.mu.Unlock()

	var once sync.Once
	stop := func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			set := r.watchers[sessionID]
			delete(set, w)
			if len(set) == 0 {
				delete(r.watchers, sessionID)
				r.signalChanged()
			}
		})
	}
	return w.ch, stop
}

// signalChanged tells Run that the watched sessions changed.
func (r *Relay) signalChanged() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// tick wakes the watchers of a session.
func (r *Relay) tick(sessionID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for w := range r.watchers[sessionID] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// ---------------------------------------------------------------------------------------------
// Control

// Control is a request sent to the instance that owns a run.
type Control struct {
	Session string `json:"session"`
	Run     string `json:"run"`
	Action  string `json:"action"` // "abort", "pause", "resume" (the relay does not interpret it)
}

// Reply is the owner's answer to a Control. When OK is false, Code and Message carry a parley
// error code (parley.ErrorCode) and a message that is safe to show to a client.
type Reply struct {
	OK      bool   `json:"ok"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// envelope is what travels on a control channel: a request (ID, From, Control) or a reply
// (ID, Reply) to the request of that ID.
type envelope struct {
	ID      string   `json:"id"`
	From    string   `json:"from,omitempty"`
	Control *Control `json:"control,omitempty"`
	Reply   *Reply   `json:"reply,omitempty"`
}

// request is a control request waiting for the handler.
type request struct {
	id, from string
	c        Control
}

// Handle sets the function that answers the control requests addressed to this instance. Set it
// before Run; a request that arrives while no function is set is answered with OK false and the
// code "unavailable". Requests are handled one at a time, in order of arrival, each with a context
// that ends after Timeout or when Run's context ends; fn should return when its context ends, as
// the next request waits for it. A panic in fn is answered with the code "internal". At most 64
// requests wait for the handler; more are dropped (their senders time out).
func (r *Relay) Handle(fn func(context.Context, Control) Reply) {
	r.mu.Lock()
	r.handler = fn
	r.mu.Unlock()
}

// Send delivers c to the instance to on its channel <prefix>ctl:<to> and waits for its reply,
// which comes back on this instance's control channel. Run must be running: Send first waits for
// Ready. It returns ErrNoInstance at once when no instance listens on to's channel, ErrTimeout
// when no reply came within Timeout, the context's error when ctx ends first, and an error when
// Run has returned or Redis fails.
func (r *Relay) Send(ctx context.Context, to string, c Control) (Reply, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, r.opts.Timeout, ErrTimeout)
	defer cancel()
	select {
	case <-r.ready:
	case <-r.stopped:
		return Reply{}, errStopped
	case <-ctx.Done():
		return Reply{}, sendError(ctx)
	}
	select {
	case <-r.stopped:
		return Reply{}, errStopped
	default:
	}

	id := randomID()
	ch := make(chan Reply, 1)
	r.mu.Lock()
	r.waiters[id] = ch
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiters, id)
		r.mu.Unlock()
	}()

	b, err := json.Marshal(envelope{ID: id, From: r.id, Control: &c})
	if err != nil {
		return Reply{}, fmt.Errorf("relay: send: %w", err)
	}
	n, err := r.client.Publish(ctx, r.controlChannel(to), b).Result()
	if err != nil {
		if ctx.Err() != nil {
			return Reply{}, sendError(ctx)
		}
		return Reply{}, fmt.Errorf("relay: send to %s: %w", to, err)
	}
	if n == 0 {
		return Reply{}, ErrNoInstance
	}
	select {
	case rep := <-ch:
		return rep, nil
	case <-r.stopped:
		return Reply{}, errStopped
	case <-ctx.Done():
		return Reply{}, sendError(ctx)
	}
}

// sendError is the error of a Send whose context ended: ErrTimeout for Send's own deadline, the
// caller's context error otherwise.
func sendError(ctx context.Context) error {
	if errors.Is(context.Cause(ctx), ErrTimeout) {
		return ErrTimeout
	}
	return ctx.Err()
}

// ---------------------------------------------------------------------------------------------
// Run

// Ready returns a channel that is closed once Run's subscription to this instance's control
// channel is confirmed by Redis: from then on, Sends to this instance arrive.
func (r *Relay) Ready() <-chan struct{} { return r.ready }

// connection is one go-redis PubSub with the goroutine that receives from it. Run uses one at a
// time, and replaces it only when the health check finds it dead.
type connection struct {
	ps       *redis.PubSub
	closing  chan struct{} // closed before ps is closed
	done     chan struct{} // closed when the receiving goroutine has returned
	start    time.Time     // when the connection was made (with its monotonic reading)
	lastRecv atomic.Int64  // nanoseconds from start to the last message received
}

// sinceLast returns the time since conn last received a message (or was made).
func (c *connection) sinceLast() time.Duration {
	return time.Since(c.start) - time.Duration(c.lastRecv.Load())
}

// Run subscribes to this instance's control channel and to the channels of the watched sessions,
// and keeps the subscription in step with Watch and its stop functions. It dispatches
// notifications to watchers, control requests to the handler and replies to Send's waiters, and
// checks the subscription's connection (see Options.Timeout). All of this goes over one go-redis
// PubSub. Run returns nil when ctx ends, after closing the PubSub and waiting for every goroutine
// it started, including a control handler still running. Run may be called only once; a second
// call returns an error at once.
func (r *Relay) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("relay: Run called twice")
	}
	r.started = true
	r.mu.Unlock()
	defer close(r.stopped)

	reqs := make(chan request, requestQueue)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		r.serve(ctx, reqs)
	}()
	defer wg.Wait()

	for {
		conn := r.connect(ctx, reqs)
		dead := r.maintain(ctx, conn)
		close(conn.closing)
		if err := conn.ps.Close(); err != nil {
			r.log.Debug("closing the subscription", "err", err)
		}
		<-conn.done
		if !dead {
			return nil
		}
	}
}

// connect makes a new PubSub and starts its receiving goroutine.
func (r *Relay) connect(ctx context.Context, reqs chan<- request) *connection {
	c := &connection{
		ps:      r.client.Subscribe(ctx),
		closing: make(chan struct{}),
		done:    make(chan struct{}),
		start:   time.Now(),
	}
	go r.receive(c, reqs)
	return c
}

// maintain keeps conn's subscriptions equal to the wanted ones and checks its health. It returns
// false when ctx ends, and true when conn is dead and must be replaced.
func (r *Relay) maintain(ctx context.Context, conn *connection) (dead bool) {
	subscribed := make(map[string]bool)
	check := time.NewTicker(max(r.opts.Timeout/4, 10*time.Millisecond))
	defer check.Stop()
	retry := time.NewTimer(0)
	<-retry.C
	defer retry.Stop()
	backoff := minBackoff
	var pingSent time.Time // zero when no ping is waiting for its answer

	for dirty := true; ; {
		if dirty {
			dirty = false
			if r.reconcile(ctx, conn.ps, subscribed) {
				backoff = minBackoff
			} else if ctx.Err() == nil {
				retry.Reset(backoff)
				backoff = min(2*backoff, maxBackoff)
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-r.changed:
			dirty = true
		case <-retry.C:
			dirty = true
		case <-check.C:
			silent := conn.sinceLast()
			if !pingSent.IsZero() && silent <= time.Since(pingSent) {
				pingSent = time.Time{} // something arrived after the ping
			}
			switch {
			case !pingSent.IsZero() && time.Since(pingSent) > r.opts.Timeout:
				r.log.Warn("subscription connection does not answer; reconnecting", "silent", silent.Round(time.Millisecond))
				return true
			case pingSent.IsZero() && silent >= r.opts.Timeout:
				pctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
				err := conn.ps.Ping(pctx)
				cancel()
				if err != nil {
					// go-redis reconnects on its own when the write failed.
					r.log.Debug("pinging the subscription", "err", err)
				} else {
					pingSent = time.Now()
				}
			}
		}
	}
}

// reconcile subscribes ps to the wanted channels it is not subscribed to yet, and unsubscribes it
// from those no longer wanted, recording the result in subscribed. It reports whether all calls
// succeeded.
func (r *Relay) reconcile(ctx context.Context, ps *redis.PubSub, subscribed map[string]bool) bool {
	want := map[string]bool{r.ctlChannel: true}
	r.mu.Lock()
	for s := range r.watchers {
		want[r.notifyChannel(s)] = true
	}
	r.mu.Unlock()
	var add, del []string
	for ch := range want {
		if !subscribed[ch] {
			add = append(add, ch)
		}
	}
	for ch := range subscribed {
		if !want[ch] {
			del = append(del, ch)
		}
	}
	ok := true
	for len(add) > 0 {
		batch := add[:min(len(add), subscribeBatch)]
		add = add[len(batch):]
		cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
		err := ps.Subscribe(cctx, batch...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("subscribing", "channels", len(batch), "err", err)
			}
			ok = false
			continue
		}
		for _, ch := range batch {
			subscribed[ch] = true
		}
	}
	for len(del) > 0 {
		batch := del[:min(len(del), subscribeBatch)]
		del = del[len(batch):]
		cctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
		err := ps.Unsubscribe(cctx, batch...)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("unsubscribing", "channels", len(batch), "err", err)
			}
			ok = false
			continue
		}
		for _, ch := range batch {
			delete(subscribed, ch)
		}
	}
	return ok
}

// receive reads conn's messages and dispatches them until conn is closed.
func (r *Relay) receive(conn *connection, reqs chan<- request) {
	defer close(conn.done)
	backoff := minBackoff
	for {
		msg, err := conn.ps.Receive(context.Background())
		select {
		case <-conn.closing:
			return
		default:
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			// go-redis has reconnected (and resubscribed) if the connection was bad; the
			// confirmations of the new subscriptions will wake the watchers.
			r.log.Warn("receiving from the subscription", "err", err)
			t := time.NewTimer(backoff)
			select {
			case <-conn.closing:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, maxBackoff)
			continue
		}
		backoff = minBackoff
		conn.lastRecv.Store(int64(time.Since(conn.start)))
		switch m := msg.(type) {
		case *redis.Subscription:
			r.onSubscription(m)
		case *redis.Message:
			r.onMessage(m, reqs)
		case *redis.Pong:
		default:
			r.log.Warn("unexpected message on the subscription", "type", fmt.Sprintf("%T", msg))
		}
	}
}

func (r *Relay) onSubscription(m *redis.Subscription) {
	if m.Kind != "subscribe" {
		return
	}
	if m.Channel == r.ctlChannel {
		r.readyOnce.Do(func() { close(r.ready) })
		return
	}
	if s, ok := strings.CutPrefix(m.Channel, r.evnPrefix); ok {
		// The subscription is new or renewed: notifications may have been missed before it.
		r.tick(s)
	}
}

func (r *Relay) onMessage(m *redis.Message, reqs chan<- request) {
	if s, ok := strings.CutPrefix(m.Channel, r.evnPrefix); ok {
		if _, err := strconv.ParseInt(m.Payload, 10, 64); err != nil {
			r.log.Warn("notification with a bad payload", "session", s, "payload", truncate(m.Payload))
		}
		r.tick(s)
		return
	}
	if m.Channel != r.ctlChannel {
		r.log.Warn("message on an unexpected channel", "channel", m.Channel)
		return
	}
	var env envelope
	if err := json.Unmarshal([]byte(m.Payload), &env); err != nil || env.ID == "" || (env.Control == nil) == (env.Reply == nil) {
		r.log.Warn("bad control message", "payload", truncate(m.Payload), "err", err)
		return
	}
	if env.Reply != nil {
		r.mu.Lock()
		ch := r.waiters[env.ID]
		r.mu.Unlock()
		if ch == nil {
			r.log.Debug("reply to no waiting request (late, or not ours)", "id", env.ID)
			return
		}
		select {
		case ch <- *env.Reply:
		default:
		}
		return
	}
	if env.From == "" {
		r.log.Warn("control request without a sender", "id", env.ID)
		return
	}
	select {
	case reqs <- request{id: env.ID, from: env.From, c: *env.Control}:
	default:
		r.log.Warn("control request dropped: too many waiting", "id", env.ID, "from", env.From, "action", env.Control.Action)
	}
}

// serve answers the control requests one at a time until ctx ends.
func (r *Relay) serve(ctx context.Context, reqs <-chan request) {
	for {
		select {
		case <-ctx.Done():
			return
		case req := <-reqs:
			rep := r.call(ctx, req.c)
			b, err := json.Marshal(envelope{ID: req.id, Reply: &rep})
			if err != nil {
				r.log.Error("encoding a control reply", "err", err)
				continue
			}
			// The reply goes out even when Run is stopping: its sender is waiting for it.
			pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.opts.Timeout)
			err = r.client.Publish(pctx, r.controlChannel(req.from), b).Err()
			cancel()
			if err != nil {
				r.log.Warn("sending a control reply", "to", req.from, "err", err)
			}
		}
	}
}

// call runs the handler on c, with a context bounded by Timeout, turning a panic into an error.
func (r *Relay) call(ctx context.Context, c Control) (rep Reply) {
	r.mu.Lock()
	fn := r.handler
	r.mu.Unlock()
	if fn == nil {
		return Reply{Code: string(parley.ECUnavailable), Message: "this instance does not handle control requests"}
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("control handler panicked", "action", c.Action, "run", c.Run, "panic", p)
			rep = Reply{Code: string(parley.ECInternal), Message: "internal error"}
		}
	}()
	return fn(ctx, c)
}

func randomID() string {
	b := make([]byte, 12)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// truncate shortens a payload for a log line.
func truncate(s string) string {
	const n = 200
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
