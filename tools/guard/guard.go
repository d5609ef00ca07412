// Package guard checks a tool call's arguments before the tool runs, in the layers of seed 003 §9:
//
//  1. Prompt-injection defence: every string is normalized (NFKC, then confusable characters
//     folded to the ASCII they imitate, invisible format characters dropped, lower case) and
//     matched against known injection patterns ("SYSTEM:", "ignore all previous instructions").
//  2. Parameter validation: the keys __proto__, constructor and prototype are refused anywhere;
//     the arguments must satisfy the tool's JSON Schema, made strict (an object schema that does
//     not say otherwise allows no properties beyond the ones it names); strings and nesting have
//     limits.
//
// A Checker is built once per tool (Compile) and is safe for concurrent use.
package guard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"golang.org/x/text/unicode/norm"
)

// Limits bound the shape of arguments.
type Limits struct {
	MaxString int // characters in any one string, keys included (default 100,000)
	MaxDepth  int // nesting of objects and arrays (default 20)
}

func (l Limits) withDefaults() Limits {
	if l.MaxString <= 0 {
		l.MaxString = 100_000
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 20
	}
	return l
}

// Checker validates the arguments of one tool.
type Checker struct {
	limits Limits
	schema *jsonschema.Resolved // nil when the tool's schema could not be compiled
}

// Compile builds the checker of a tool whose parameters are schema (a JSON Schema object). An
// error means the schema could not be compiled; the checker returned with it still applies the
// limits and the key checks, so that a server's unusual schema does not make its tool unusable.
func Compile(schema json.RawMessage, l Limits) (*Checker, error) {
	c := &Checker{limits: l.withDefaults()}
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		return c, fmt.Errorf("parameters schema: %w", err)
	}
	strict(&s)
	rs, err := s.Resolve(nil)
	if err != nil {
		return c, fmt.Errorf("parameters schema: %w", err)
	}
	c.schema = rs
	return c, nil
}

// strict makes every object schema that names its properties, and says nothing of others, refuse
// properties it does not name. Schemas combined with allOf/anyOf/oneOf are left as they are, since
// a property named in one branch would be "unknown" to another.
func strict(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	composed := len(s.AllOf) > 0 || len(s.AnyOf) > 0 || len(s.OneOf) > 0
	// An object schema that names no properties ({"type": "object"}) says "any object".
	if len(s.Properties) > 0 && !composed && s.AdditionalProperties == nil && len(s.PatternProperties) == 0 && s.UnevaluatedProperties == nil {
		s.AdditionalProperties = &jsonschema.Schema{Not: &jsonschema.Schema{}}
	}
	for _, p := range s.Properties {
		strict(p)
	}
	strict(s.Items)
	for _, p := range s.PrefixItems {
		strict(p)
	}
	for _, d := range s.Defs {
		strict(d)
	}
	for _, d := range s.Definitions {
		strict(d)
	}
}

// Error is a refusal: Kind says which layer refused, Reason what is wrong, in words the model
// can act on.
type Error struct {
	Kind   string // "invalid" or "injection"
	Reason string
}

func (e *Error) Error() string { return e.Reason }

// ErrInjection is matched by errors.Is for the injection layer's refusals.
var ErrInjection = errors.New("prompt injection")

func (e *Error) Is(target error) bool { return target == ErrInjection && e.Kind == "injection" }

// Decode reads a tool call's arguments: one JSON object and nothing after it.
func Decode(args []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(args))
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, &Error{"invalid", "the arguments are not valid JSON"}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &Error{"invalid", "the arguments have data after the JSON object"}
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, &Error{"invalid", "the arguments must be a JSON object"}
	}
	return obj, nil
}

// Validate applies layer 2 to decoded arguments: keys, limits, then the schema.
func (c *Checker) Validate(obj map[string]any) error {
	if err := c.walk(obj, "", 1); err != nil {
		return err
	}
	if c.schema != nil {
		if err := c.schema.Validate(obj); err != nil {
			return &Error{"invalid", "the arguments do not match the tool's schema: " + schemaReason(err)}
		}
	}
	return nil
}

// Check is Decode then Validate.
func (c *Checker) Check(args []byte) (map[string]any, error) {
	obj, err := Decode(args)
	if err != nil {
		return nil, err
	}
	return obj, c.Validate(obj)
}

// forbiddenKeys would reach an object's prototype in a JavaScript tool (prototype pollution).
var forbiddenKeys = map[string]bool{"__proto__": true, "constructor": true, "prototype": true}

func (c *Checker) walk(v any, path string, depth int) error {
	if depth > c.limits.MaxDepth {
		return &Error{"invalid", fmt.Sprintf("%s: nested deeper than %d levels", where(path), c.limits.MaxDepth)}
	}
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if forbiddenKeys[k] {
				return &Error{"invalid", fmt.Sprintf("%s: the key %q is not allowed", where(path), k)}
			}
			if n := utf8.RuneCountInString(k); n > 256 {
				return &Error{"invalid", fmt.Sprintf("%s: a key of %d characters (the limit is 256)", where(path), n)}
			}
			if err := c.walk(e, path+"."+k, depth+1); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range t {
			if err := c.walk(e, fmt.Sprintf("%s[%d]", path, i), depth+1); err != nil {
				return err
			}
		}
	case string:
		if n := utf8.RuneCountInString(t); n > c.limits.MaxString {
			return &Error{"invalid", fmt.Sprintf("%s: %d characters, the limit is %d", where(path), n, c.limits.MaxString)}
		}
	}
	return nil
}

func where(path string) string {
	if path == "" {
		return "arguments"
	}
	return strings.TrimPrefix(path, ".")
}

// schemaReason shortens the validator's message to what the model needs.
func schemaReason(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "validating root: ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// Normalize returns s as the injection patterns see it: NFKC, confusables folded to ASCII,
// format characters (zero-width spaces and joiners, bidi controls) dropped, and lower case.
func Normalize(s string) string {
	// Folding can leave text that NFKC composes anew (a folded "u" and a combining mark), which
	// may fold again: repeat until nothing changes (in practice once or twice).
	for range 4 {
		n := normalizeOnce(s)
		if n == s {
			break
		}
		s = n
	}
	return s
}

func normalizeOnce(s string) string {
	s = norm.NFKC.String(s)
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if r < utf8.RuneSelf {
			b.WriteByte(byte(unicode.ToLower(r)))
			continue
		}
		if unicode.Is(unicode.Cf, r) {
			continue
		}
		// The character as it is first (Greek "Υ" imitates "Y", its lower case "υ" a "u"), then
		// its lower case, as the table lists some in one case only ("ҽ" but not "Ҽ").
		lower := unicode.ToLower(r)
		a, ok := confusables[r]
		if !ok {
			a, ok = confusables[lower]
		}
		if ok {
			b.WriteString(strings.ToLower(a))
			continue
		}
		b.WriteRune(lower)
	}
	return b.String()
}

// injectionPatterns match, in normalized text, the instructions an injected text uses to take
// over a model: role markers and orders to drop the instructions it has.
var injectionPatterns = []struct {
	name string
	re   *regexp.Regexp
}{
	// A role label that opens a line ("SYSTEM: …", "### System:", "[system]"), not one in the
	// middle of a sentence ("operating system: linux").
	{"role marker", regexp.MustCompile(`(?m)^[\s>*#"'\x60(\[-]*(system|assistant|developer)\s*(:|\])`)},
	{"ignore instructions", regexp.MustCompile(`\b(ignore|disregard|forget|override|bypass)\s+(all\s+|any\s+|the\s+|your\s+|every\s+)*(previous|prior|above|earlier|preceding|system|original)?\s*(instructions?|prompts?|rules|messages|directives|context|guidelines)\b`)},
	{"new instructions", regexp.MustCompile(`\bnew\s+(system\s+)?instructions?\s*:`)},
	{"role switch", regexp.MustCompile(`\byou\s+are\s+now\s+(a|an|the|in|dan|no\s+longer)\b`)},
	{"chat template token", regexp.MustCompile(`<\|?(im_start|im_end|system|endoftext)\|?>|\[/?inst\]|<<\s*/?sys\s*>>|</?(system|assistant)>`)},
	{"prompt exfiltration", regexp.MustCompile(`\b(reveal|print|repeat|show|output)\s+(your|the)\s+(system\s+prompt|hidden\s+instructions|instructions\s+above)\b`)},
}

// Injection looks for prompt-injection patterns in every string of v (keys included), after
// normalization. It returns the name of the first pattern found and where, or "".
func Injection(v any) (pattern, at string) {
	var visit func(v any, path string) bool
	check := func(s, path string) bool {
		if !maybeInjection(s) {
			return false
		}
		n := Normalize(s)
		for _, p := range injectionPatterns {
			if p.re.MatchString(n) {
				pattern, at = p.name, where(path)
				return true
			}
		}
		return false
	}
	visit = func(v any, path string) bool {
		switch t := v.(type) {
		case map[string]any:
			for k, e := range t {
				if check(k, path) || visit(e, path+"."+k) {
					return true
				}
			}
		case []any:
			for i, e := range t {
				if visit(e, fmt.Sprintf("%s[%d]", path, i)) {
					return true
				}
			}
		case string:
			return check(t, path)
		}
		return false
	}
	visit(v, "")
	return pattern, at
}

// maybeInjection is a cheap pre-check: every pattern needs a ':' , '<', '[' or one of a few
// words' letters, and most argument strings (paths, numbers, short names) have none of them.
// Non-ASCII text always goes through, as it may be disguised.
func maybeInjection(s string) bool {
	if len(s) < 6 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf, c == ':', c == '<', c == '[', c == ' ':
			return true
		}
	}
	return false
}
