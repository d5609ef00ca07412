// Package approval decides whether a tool call runs at once, waits for the session owner's
// approval, or is refused (issue 23). A Policy maps tool name patterns to parley.PolicyAuto,
// PolicyAsk or PolicyDeny; a Resolver combines the server's policy, the session's project's, the
// MCP servers' hints (destructiveHint asks, readOnlyHint runs) and the tools the owner allowed for
// the rest of the session.
package approval

import (
	"context"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	parley "github.com/parleyhq/parley"
)

// Rule is one pattern of a policy: a tool name, or a pattern with * (any run of characters), ?
// (one character) and [classes], as path.Match reads them.
type Rule struct {
	Pattern string
	Mode    string // parley.PolicyAuto, PolicyAsk or PolicyDeny
}

// Policy is a set of rules. The rule that decides a tool is its exact name when the policy holds
// it, otherwise the matching pattern with the most literal characters (the most specific; a tie
// goes to the one given first), so that the order of a map's keys does not matter.
type Policy struct {
	rules []Rule
}

// ValidMode reports whether m is one of the three modes.
func ValidMode(m string) bool {
	return m == parley.PolicyAuto || m == parley.PolicyAsk || m == parley.PolicyDeny
}

// Parse reads a policy written as "pattern=mode,pattern=mode" (spaces around items ignored; ""
// is the empty policy).
func Parse(s string) (Policy, error) {
	var p Policy
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		pat, mode, ok := strings.Cut(item, "=")
		if !ok {
			return Policy{}, fmt.Errorf("tool policy: %q: want pattern=auto|ask|deny", item)
		}
		if err := p.add(strings.TrimSpace(pat), strings.TrimSpace(mode)); err != nil {
			return Policy{}, err
		}
	}
	return p, nil
}

// FromMap builds a policy from a map of pattern to mode (a project's tool_policy).
func FromMap(m map[string]string) (Policy, error) {
	var p Policy
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := p.add(k, m[k]); err != nil {
			return Policy{}, err
		}
	}
	return p, nil
}

// CheckMap validates a map policy as FromMap reads it, with a reason a client can act on.
func CheckMap(m map[string]string) error {
	if len(m) > 200 {
		return fmt.Errorf("tool_policy: %d patterns, the limit is 200", len(m))
	}
	_, err := FromMap(m)
	return err
}

func (p *Policy) add(pat, mode string) error {
	if pat == "" || len(pat) > 200 {
		return fmt.Errorf("tool policy: a pattern must have 1 to 200 characters")
	}
	if _, err := path.Match(pat, ""); err != nil {
		return fmt.Errorf("tool policy: %q is not a valid pattern", pat)
	}
	if !ValidMode(mode) {
		return fmt.Errorf("tool policy: %q: the mode must be auto, ask or deny, not %q", pat, mode)
	}
	p.rules = append(p.rules, Rule{Pattern: pat, Mode: mode})
	return nil
}

// Rules returns the policy's rules in the order given.
func (p Policy) Rules() []Rule { return slices.Clone(p.rules) }

// Match returns the mode the policy gives tool, and the rule's pattern; ok is false when no rule
// matches.
func (p Policy) Match(tool string) (mode, pattern string, ok bool) {
	best, bestScore := -1, -1
	for i, r := range p.rules {
		if r.Pattern == tool {
			return r.Mode, r.Pattern, true
		}
		if m, _ := path.Match(r.Pattern, tool); !m {
			continue
		}
		if s := literal(r.Pattern); s > bestScore {
			best, bestScore = i, s
		}
	}
	if best < 0 {
		return "", "", false
	}
	return p.rules[best].Mode, p.rules[best].Pattern, true
}

// literal counts a pattern's characters that are not wildcards.
func literal(pat string) int {
	n := 0
	for _, c := range pat {
		if c != '*' && c != '?' {
			n++
		}
	}
	return n
}

// Hints are what an MCP server says of a tool (its annotations).
type Hints struct {
	ReadOnly    bool // readOnlyHint
	Destructive bool // destructiveHint, and not read-only
}

// Resolver decides the mode of one call of a session.
type Resolver struct {
	// Server is the server's policy (--tool-policy).
	Server Policy
	// Default is the mode of a tool no policy names and no hint marks (default auto).
	Default string
	// Hints returns what the tool's MCP server says of it; nil: no hints.
	Hints func(tool string) Hints
	// Store reads the session's project and the tools allowed for the rest of the session.
	Store Store
}

// Store is what a Resolver reads.
type Store interface {
	GetSession(ctx context.Context, id string) (*parley.Session, error)
	GetProject(ctx context.Context, id string) (*parley.Project, error)
	AlwaysAllowed(ctx context.Context, sessionID string) ([]string, error)
}

// Session holds what a Resolver read of one session, for the calls of one model answer.
type Session struct {
	r       *Resolver
	project *parley.Project
	policy  Policy
	always  map[string]bool
}

// Session reads what deciding the calls of sessionID needs: its project's policy and the tools
// its owner allowed for the rest of the session.
func (r *Resolver) Session(ctx context.Context, sessionID string) (*Session, error) {
	s := &Session{r: r, always: map[string]bool{}}
	if r.Store == nil {
		return s, nil
	}
	sess, err := r.Store.GetSession(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if sess.ProjectID != "" {
		p, err := r.Store.GetProject(ctx, sess.ProjectID)
		switch {
		case err == nil:
			s.project = p
			// A stored policy was checked when it was set; one that no longer reads adds nothing.
			s.policy, _ = FromMap(p.ToolPolicy)
		case parley.CodeOf(err) != parley.ECNotFound:
			return nil, err
		}
	}
	allowed, err := r.Store.AlwaysAllowed(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	for _, t := range allowed {
		s.always[t] = true
	}
	return s, nil
}

// NoSession decides the calls of a conversation held outside the store (the stateless OpenAI
// API): the server's policy, the hints and the default only.
func (r *Resolver) NoSession() *Session {
	return &Session{r: r, always: map[string]bool{}}
}

// Mode returns the mode of a call of tool, and why (for the person asked, or the model refused).
// The project's policy comes first, then the server's, then the tool's MCP hints, then the
// default; a tool that would ask runs when its owner allowed it for the rest of the session.
func (s *Session) Mode(tool string) (mode, why string) {
	mode, why = s.mode(tool)
	if mode == parley.PolicyAsk && s.always[tool] {
		return parley.PolicyAuto, "allowed for the rest of this session"
	}
	return mode, why
}

func (s *Session) mode(tool string) (string, string) {
	if m, pat, ok := s.policy.Match(tool); ok {
		return m, fmt.Sprintf("the tool policy of project %q says %s for %s", s.project.Name, m, pat)
	}
	if m, pat, ok := s.r.Server.Match(tool); ok {
		return m, fmt.Sprintf("the server's tool policy says %s for %s", m, pat)
	}
	if s.r.Hints != nil {
		switch h := s.r.Hints(tool); {
		case h.ReadOnly:
			return parley.PolicyAuto, "its MCP server marks it read-only"
		case h.Destructive:
			return parley.PolicyAsk, "its MCP server marks it destructive (it may change or delete data)"
		}
	}
	if s.r.Default != "" && s.r.Default != parley.PolicyAuto {
		return s.r.Default, fmt.Sprintf("the server's default tool policy is %s", s.r.Default)
	}
	return parley.PolicyAuto, ""
}
