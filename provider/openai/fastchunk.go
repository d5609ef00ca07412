package openai

import (
	"strconv"
	"unicode/utf8"
)

// The chunks of a streamed answer are small objects of a few known shapes, one per token or
// few: encoding/json, which first checks the whole chunk and then decodes it by reflection, was
// most of the cost of reading a model's stream. fastChunk reads the common shapes itself
// (content, reasoning and refusal text, finish_reason, usage, any other member skipped) into the
// same wireChunk encoding/json would make of them. Whatever it does not read exactly as
// encoding/json would (tool calls, an error, text as an array of parts, a \u escape, a key that
// differs from a field's name only by case, a member repeated, a number that is not a plain
// integer, invalid JSON) makes it give up, and the chunk is decoded by encoding/json: what it
// accepts it decodes identically (FuzzFastChunk), and for anything else nothing changes.

// maxFastDepth bounds the nesting of a skipped value; deeper goes to encoding/json.
const maxFastDepth = 64

// fastChunk decodes data into ch (already reset) and reports whether it could.
func fastChunk(data []byte, ch *wireChunk) bool {
	p := fastParser{b: data}
	var seen uint8
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "choices":
			return p.once(&seen, 1) && p.choices(ch)
		case "usage":
			return p.once(&seen, 2) && p.usage(ch)
		case "error":
			return false // rare: encoding/json
		}
		return p.other(key, "choices", "usage", "error")
	})
	if !ok {
		return false
	}
	p.space()
	return p.i == len(p.b)
}

type fastParser struct {
	b []byte
	i int
}

// once marks bit as seen; false if it was already (a member repeated).
func (p *fastParser) once(seen *uint8, bit uint8) bool {
	if *seen&bit != 0 {
		return false
	}
	*seen |= bit
	return true
}

// other skips the value of a member no field takes. A key that encoding/json would match to one
// of the fields anyway (it compares names without case, Unicode's folding included) gives up.
func (p *fastParser) other(key []byte, fields ...string) bool {
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	for _, f := range fields {
		if asciiEqualFold(key, f) {
			return false
		}
	}
	return p.skip(0)
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		x, y := b[i], s[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

func (p *fastParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (p *fastParser) peek() byte {
	p.space()
	if p.i < len(p.b) {
		return p.b[p.i]
	}
	return 0
}

// null consumes a null literal if one is next.
func (p *fastParser) null() bool {
	if p.peek() == 'n' && len(p.b)-p.i >= 4 && string(p.b[p.i:p.i+4]) == "null" {
		p.i += 4
		return true
	}
	return false
}

// object reads an object, calling member for each key with the parser at its value (member
// reads the value). Keys with escapes give up.
func (p *fastParser) object(member func(key []byte) bool) bool {
	if p.peek() != '{' {
		return false
	}
	p.i++
	if p.peek() == '}' {
		p.i++
		return true
	}
	for {
		if p.peek() != '"' {
			return false
		}
		start := p.i + 1
		end, esc, ok := p.str()
		if !ok || esc {
			return false
		}
		key := p.b[start:end]
		if p.peek() != ':' {
			return false
		}
		p.i++
		if !member(key) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case '}':
			p.i++
			return true
		default:
			return false
		}
	}
}

// str reads a string at p.i (its opening quote), checking its escapes; it returns the end of
// its contents (the closing quote) and whether it holds an escape.
func (p *fastParser) str() (end int, esc, ok bool) {
	b := p.b
	i := p.i + 1
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			p.i = i + 1
			return i, esc, true
		case c == '\\':
			esc = true
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return 0, false, false
				}
				for _, h := range b[i+2 : i+6] {
					if !('0' <= h && h <= '9' || 'a' <= h && h <= 'f' || 'A' <= h && h <= 'F') {
						return 0, false, false
					}
				}
				i += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default:
			i++
		}
	}
	return 0, false, false
}

// text reads a string into s as encoding/json would, or a null as "" (textField); anything else
// gives up.
func (p *fastParser) text(s *textField) bool {
	if p.null() {
		*s = ""
		return true
	}
	v, ok := p.stringValue()
	*s = textField(v)
	return ok
}

// stringValue reads a string. Escapes other than \u are undone here; a \u escape or invalid
// UTF-8 gives up (encoding/json's own rules for those: surrogates, replacement characters).
func (p *fastParser) stringValue() (string, bool) {
	if p.peek() != '"' {
		return "", false
	}
	start := p.i + 1
	end, esc, ok := p.str()
	if !ok {
		return "", false
	}
	in := p.b[start:end]
	if !esc {
		if !utf8.Valid(in) {
			return "", false
		}
		return string(in), true
	}
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); i++ {
		c := in[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch in[i] {
		case 'n':
			c = '\n'
		case 't':
			c = '\t'
		case 'r':
			c = '\r'
		case 'b':
			c = '\b'
		case 'f':
			c = '\f'
		case '"', '\\', '/':
			c = in[i]
		default: // 'u'
			return "", false
		}
		out = append(out, c)
	}
	if !utf8.Valid(out) {
		return "", false
	}
	return string(out), true
}

// integer reads a JSON number that is a plain integer (no fraction, no exponent) fitting in 64
// bits; a null leaves *n as it is, as encoding/json does. Anything else gives up.
func (p *fastParser) integer(n *int64) bool {
	if p.null() {
		return true
	}
	b, i := p.b, p.i
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		return false
	}
	v, err := strconv.ParseInt(string(b[start:i]), 10, 64)
	if err != nil {
		return false
	}
	*n = v
	p.i = i
	return true
}

// skip checks and passes over any value.
func (p *fastParser) skip(depth int) bool {
	if depth > maxFastDepth {
		return false
	}
	b := p.b
	switch c := p.peek(); {
	case c == '{':
		return p.object(func([]byte) bool { return p.skip(depth + 1) })
	case c == '[':
		p.i++
		if p.peek() == ']' {
			p.i++
			return true
		}
		for {
			if !p.skip(depth + 1) {
				return false
			}
			switch p.peek() {
			case ',':
				p.i++
			case ']':
				p.i++
				return true
			default:
				return false
			}
		}
	case c == '"':
		_, _, ok := p.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return p.number()
	default:
		for _, lit := range [...]string{"null", "true", "false"} {
			if len(b)-p.i >= len(lit) && string(b[p.i:p.i+len(lit)]) == lit {
				p.i += len(lit)
				return true
			}
		}
		return false
	}
}

// number passes over a number of JSON's grammar.
func (p *fastParser) number() bool {
	b, i := p.b, p.i
	digits := func() bool {
		s := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		return i > s
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case !digits():
		return false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if !digits() {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if !digits() {
			return false
		}
	}
	p.i = i
	return true
}

// choices reads the choices array into ch.Choices (reusing its backing array).
func (p *fastParser) choices(ch *wireChunk) bool {
	if p.null() {
		ch.Choices = nil
		return true
	}
	if p.peek() != '[' {
		return false
	}
	p.i++
	if p.peek() == ']' {
		p.i++
		return true
	}
	for {
		ch.Choices = append(ch.Choices, wireChoice{})
		if !p.choice(&ch.Choices[len(ch.Choices)-1]) {
			return false
		}
		switch p.peek() {
		case ',':
			p.i++
		case ']':
			p.i++
			return true
		default:
			return false
		}
	}
}

func (p *fastParser) choice(c *wireChoice) bool {
	var seen uint8
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "index":
			var n int64
			if !p.once(&seen, 1) || !p.integer(&n) || int64(int(n)) != n {
				return false
			}
			c.Index = int(n)
			return true
		case "delta":
			return p.once(&seen, 2) && p.delta(&c.Delta)
		case "finish_reason":
			if !p.once(&seen, 4) {
				return false
			}
			if p.null() {
				c.FinishReason = nil
				return true
			}
			s, ok := p.stringValue()
			c.FinishReason = &s
			return ok
		}
		return p.other(key, "index", "delta", "finish_reason")
	})
}

func (p *fastParser) delta(d *wireDelta) bool {
	if p.null() {
		return true
	}
	var seen uint8
	return p.object(func(key []byte) bool {
		switch string(key) {
		case "content":
			return p.once(&seen, 1) && p.text(&d.Content)
		case "reasoning_content":
			return p.once(&seen, 2) && p.text(&d.Reasoning)
		case "refusal":
			return p.once(&seen, 4) && p.text(&d.Refusal)
		case "reasoning":
			if !p.once(&seen, 8) {
				return false
			}
			p.space()
			start := p.i
			if !p.skip(0) {
				return false
			}
			d.ReasoningAlt = p.b[start:p.i:p.i]
			return true
		case "tool_calls":
			return p.once(&seen, 16) && p.null() // tool calls: encoding/json
		}
		return p.other(key, "content", "reasoning_content", "reasoning", "refusal", "tool_calls")
	})
}

func (p *fastParser) usage(ch *wireChunk) bool {
	if p.null() {
		ch.Usage = nil
		return true
	}
	u := &wireUsage{}
	var seen uint8
	ok := p.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return p.once(&seen, 1) && p.integer(&u.PromptTokens)
		case "completion_tokens":
			return p.once(&seen, 2) && p.integer(&u.CompletionTokens)
		case "total_tokens":
			return p.once(&seen, 4) && p.integer(&u.TotalTokens)
		case "prompt_tokens_details":
			if !p.once(&seen, 8) {
				return false
			}
			if p.null() {
				u.PromptTokensDetails = nil
				return true
			}
			u.PromptTokensDetails = &struct {
				CachedTokens int64 `json:"cached_tokens"`
			}{}
			return p.detail("cached_tokens", &u.PromptTokensDetails.CachedTokens)
		case "completion_tokens_details":
			if !p.once(&seen, 16) {
				return false
			}
			if p.null() {
				u.CompletionTokensDetails = nil
				return true
			}
			u.CompletionTokensDetails = &struct {
				ReasoningTokens int64 `json:"reasoning_tokens"`
			}{}
			return p.detail("reasoning_tokens", &u.CompletionTokensDetails.ReasoningTokens)
		}
		return p.other(key, "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details")
	})
	ch.Usage = u
	return ok
}

// detail reads an object of counts of which one field is kept.
func (p *fastParser) detail(field string, n *int64) bool {
	seen := false
	return p.object(func(key []byte) bool {
		if string(key) == field {
			if seen {
				return false
			}
			seen = true
			return p.integer(n)
		}
		return p.other(key, field)
	})
}
