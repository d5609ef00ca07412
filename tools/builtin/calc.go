package builtin

import (
	"fmt"
	"math"
	"strconv"
)

// Limits of the calculator, so that no expression can cost much.
const (
	maxExprLen   = 1000
	maxExprDepth = 64
)

// Eval evaluates an arithmetic expression: numbers, + - * / % ^ (power, right-associative),
// unary minus and parentheses.
func Eval(expr string) (float64, error) {
	if len(expr) > maxExprLen {
		return 0, fmt.Errorf("expression longer than %d characters", maxExprLen)
	}
	p := &parser{s: expr}
	p.skip()
	if p.pos == len(p.s) {
		return 0, fmt.Errorf("empty expression")
	}
	v, err := p.sum()
	if err != nil {
		return 0, err
	}
	p.skip()
	if p.pos < len(p.s) {
		return 0, fmt.Errorf("unexpected %q at position %d", p.s[p.pos], p.pos+1)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("the result is not a finite number")
	}
	return v, nil
}

// FormatNumber prints v without exponent for ordinary magnitudes and without trailing zeros.
func FormatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', 12, 64)
}

type parser struct {
	s     string
	pos   int
	depth int
}

func (p *parser) skip() {
	for p.pos < len(p.s) && (p.s[p.pos] == ' ' || p.s[p.pos] == '\t' || p.s[p.pos] == '\n') {
		p.pos++
	}
}

func (p *parser) peek() byte {
	p.skip()
	if p.pos < len(p.s) {
		return p.s[p.pos]
	}
	return 0
}

// sum := product (('+'|'-') product)*
func (p *parser) sum() (float64, error) {
	v, err := p.product()
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '+', '-':
			op := p.s[p.pos]
			p.pos++
			w, err := p.product()
			if err != nil {
				return 0, err
			}
			if op == '+' {
				v += w
			} else {
				v -= w
			}
		default:
			return v, nil
		}
	}
}

// product := unary (('*'|'/'|'%') unary)*
func (p *parser) product() (float64, error) {
	v, err := p.unary()
	if err != nil {
		return 0, err
	}
	for {
		switch p.peek() {
		case '*', '/', '%':
			op := p.s[p.pos]
			p.pos++
			w, err := p.unary()
			if err != nil {
				return 0, err
			}
			switch op {
			case '*':
				v *= w
			case '/':
				if w == 0 {
					return 0, fmt.Errorf("division by zero")
				}
				v /= w
			case '%':
				if w == 0 {
					return 0, fmt.Errorf("modulo by zero")
				}
				v = math.Mod(v, w)
			}
		default:
			return v, nil
		}
	}
}

// unary := ('-'|'+') unary | power
func (p *parser) unary() (float64, error) {
	switch p.peek() {
	case '-', '+':
		op := p.s[p.pos]
		p.pos++
		if err := p.enter(); err != nil {
			return 0, err
		}
		v, err := p.unary()
		p.depth--
		if op == '-' {
			v = -v
		}
		return v, err
	}
	return p.power()
}

// power := atom ('^' unary)?
func (p *parser) power() (float64, error) {
	v, err := p.atom()
	if err != nil {
		return 0, err
	}
	if p.peek() == '^' {
		p.pos++
		if err := p.enter(); err != nil {
			return 0, err
		}
		e, err := p.unary()
		p.depth--
		if err != nil {
			return 0, err
		}
		v = math.Pow(v, e)
	}
	return v, nil
}

// atom := number | '(' sum ')'
func (p *parser) atom() (float64, error) {
	c := p.peek()
	switch {
	case c == '(':
		p.pos++
		if err := p.enter(); err != nil {
			return 0, err
		}
		v, err := p.sum()
		p.depth--
		if err != nil {
			return 0, err
		}
		if p.peek() != ')' {
			return 0, fmt.Errorf("missing ')' at position %d", p.pos+1)
		}
		p.pos++
		return v, nil
	case c >= '0' && c <= '9' || c == '.':
		start := p.pos
		for p.pos < len(p.s) && (p.s[p.pos] >= '0' && p.s[p.pos] <= '9' || p.s[p.pos] == '.') {
			p.pos++
		}
		v, err := strconv.ParseFloat(p.s[start:p.pos], 64)
		if err != nil {
			return 0, fmt.Errorf("bad number %q", p.s[start:p.pos])
		}
		return v, nil
	case c == 0:
		return 0, fmt.Errorf("unexpected end of expression")
	default:
		return 0, fmt.Errorf("unexpected %q at position %d", c, p.pos+1)
	}
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxExprDepth {
		return fmt.Errorf("expression nested deeper than %d", maxExprDepth)
	}
	return nil
}
