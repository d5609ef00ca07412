package tools

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/tools/guard"
)

// Guard configures the checks every call passes before its tool runs (seed 003 §9).
type Guard struct {
	Limits guard.Limits // string length and nesting of arguments
	// Injection is what a call whose arguments match a prompt-injection pattern gets: "block"
	// (refused, the model is told why), "flag" (runs, and is logged and counted) or "off".
	Injection string
	// Quotas, when set, limits calls: UserRate per user (all tools), ToolRate per tool (all users).
	Quotas   limit.Limiter
	UserRate limit.Rate
	ToolRate limit.Rate
}

// The injection modes.
const (
	InjectionBlock = "block"
	InjectionFlag  = "flag"
	InjectionOff   = "off"
)

// WithGuard sets the argument checks and quotas.
func WithGuard(g Guard) Option {
	return func(r *Registry) {
		if g.Injection == "" {
			g.Injection = InjectionBlock
		}
		r.guard = g
	}
}

type userKey struct{}

// WithUser returns ctx carrying the user a run acts for, whose tool quota its calls count against.
func WithUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, userKey{}, user)
}

func userOf(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}

// Stats are a tool's execution metrics since the server started.
type Stats struct {
	Calls     int64 `json:"calls"`     // calls that reached the tool
	Succeeded int64 `json:"succeeded"` // of those, the ones with a successful result
	Failed    int64 `json:"failed"`    // of those, error results, errors, crashes and timeouts
	Timeouts  int64 `json:"timeouts"`
	Invalid   int64 `json:"invalid"`   // refused: arguments that break the schema or the limits
	Injection int64 `json:"injection"` // arguments that matched an injection pattern (refused or flagged)
	Limited   int64 `json:"limited"`   // refused: breaker open or quota spent
	TotalMS   int64 `json:"total_ms"`  // time in the tool, summed over calls
	MaxMS     int64 `json:"max_ms"`
}

type stats struct {
	calls, succeeded, failed, timeouts, invalid, injection, limited, totalMS, maxMS atomic.Int64
}

func (s *stats) ran(out Outcome) {
	s.calls.Add(1)
	if out.Success {
		s.succeeded.Add(1)
	} else {
		s.failed.Add(1)
	}
	if out.TimedOut {
		s.timeouts.Add(1)
	}
	ms := out.Latency.Milliseconds()
	s.totalMS.Add(ms)
	for {
		m := s.maxMS.Load()
		if ms <= m || s.maxMS.CompareAndSwap(m, ms) {
			break
		}
	}
}

func (s *stats) snapshot() Stats {
	return Stats{
		Calls: s.calls.Load(), Succeeded: s.succeeded.Load(), Failed: s.failed.Load(), Timeouts: s.timeouts.Load(),
		Invalid: s.invalid.Load(), Injection: s.injection.Load(), Limited: s.limited.Load(),
		TotalMS: s.totalMS.Load(), MaxMS: s.maxMS.Load(),
	}
}

// statsMap holds each tool's stats, kept when a tool is replaced.
type statsMap struct {
	mu sync.Mutex
	m  map[string]*stats
}

func (sm *statsMap) of(name string) *stats {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	if sm.m == nil {
		sm.m = map[string]*stats{}
	}
	s, ok := sm.m[name]
	if !ok {
		s = &stats{}
		sm.m[name] = s
	}
	return s
}

// Stats returns tool name's execution metrics.
func (r *Registry) Stats(name string) Stats { return r.stats.of(name).snapshot() }

// compile builds the argument checker of t, logging a schema it cannot compile (the checker then
// applies the key and limit checks only).
func (r *Registry) compile(t parley.Tool) *guard.Checker {
	spec := t.Spec()
	c, err := guard.Compile(spec.Parameters, r.guard.Limits)
	if err != nil {
		r.log.Warn("tool schema not enforced", "tool", spec.Name, "err", err)
	}
	return c
}

// admit runs the layers before a tool: injection, arguments, then the quotas. It returns a
// refusal for the model, or ok.
func (r *Registry) admit(ctx context.Context, e entry, name string, args []byte, st *stats) (Outcome, bool) {
	obj, err := guard.Decode(args)
	if err != nil {
		st.invalid.Add(1)
		return failure("the arguments of %s are not a JSON object: %s", name, truncate(string(args), 200)), false
	}
	if r.guard.Injection != InjectionOff {
		if pattern, at := guard.Injection(obj); pattern != "" {
			st.injection.Add(1)
			r.log.WarnContext(ctx, "tool arguments look like a prompt injection", "tool", name, "pattern", pattern, "at", at,
				"mode", r.guard.Injection, "user", userOf(ctx))
			if r.guard.Injection == InjectionBlock {
				return failure("refused: the arguments of %s look like a prompt injection (%s in %s); the call was not made",
					name, pattern, at), false
			}
		}
	}
	if e.checker != nil {
		if err := e.checker.Validate(obj); err != nil {
			st.invalid.Add(1)
			return failure("invalid arguments for %s: %v; correct them and call again", name, err), false
		}
	}
	return Outcome{}, true
}

// quota charges the call to its user's and its tool's quotas.
func (r *Registry) quota(ctx context.Context, name string) (Outcome, bool) {
	q := r.guard.Quotas
	if q == nil {
		return Outcome{}, true
	}
	check := func(key string, rate limit.Rate, whose string) (Outcome, bool) {
		d, err := q.Allow(ctx, key, rate)
		if err != nil {
			r.log.WarnContext(ctx, "tool quota unavailable; call let through", "tool", name, "err", err)
			return Outcome{}, true
		}
		if !d.Allowed {
			return failure("%s is rate limited (%s quota of %s); try again in %s or answer without it",
				name, whose, rate, d.RetryAfter.Round(time.Second)+time.Second), false
		}
		return Outcome{}, true
	}
	if u := userOf(ctx); u != "" && !r.guard.UserRate.Off() {
		if out, ok := check("tu:"+u, r.guard.UserRate, "this user's tool call"); !ok {
			return out, false
		}
	}
	if !r.guard.ToolRate.Off() {
		if out, ok := check("tt:"+name, r.guard.ToolRate, "the tool's"); !ok {
			return out, false
		}
	}
	return Outcome{}, true
}
