// Package builtin holds the tools that ship with Parley.
package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	_ "time/tzdata" // IANA zones for get_current_time on machines without /usr/share/zoneinfo

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
)

// Register adds the built-in tools to r. now is the clock of get_current_time.
func Register(r *tools.Registry, now func() time.Time) error {
	for _, t := range []parley.Tool{Calculator(), CurrentTime(now)} {
		if err := r.Register(t); err != nil {
			return err
		}
	}
	return nil
}

// Calculator returns the calculator tool: it evaluates an arithmetic expression.
func Calculator() parley.Tool {
	return &tools.Func{
		Def: parley.ToolSpec{
			Name:        "calculator",
			Description: "Evaluates an arithmetic expression with + - * / % ^ and parentheses, e.g. 12*(3+4)/2.",
			Parameters: json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string",` +
				`"description":"The expression to evaluate, e.g. 12*(3+4)"}},"required":["expression"],"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				Expression *string `json:"expression"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			if args.Expression == nil {
				return errResult("arguments: \"expression\" is required"), nil
			}
			v, err := Eval(*args.Expression)
			if err != nil {
				return errResult("%v", err), nil
			}
			return &parley.ToolResult{Content: parley.Text(FormatNumber(v))}, nil
		},
		Idempotent: true,
	}
}

// CurrentTime returns the get_current_time tool: the current date and time in a time zone.
func CurrentTime(now func() time.Time) parley.Tool {
	return &tools.Func{
		Def: parley.ToolSpec{
			Name:        "get_current_time",
			Description: "Returns the current date and time in an IANA time zone (default UTC).",
			Parameters: json.RawMessage(`{"type":"object","properties":{"timezone":{"type":"string",` +
				`"description":"An IANA time zone such as UTC, Europe/Paris or America/New_York"}},"additionalProperties":false}`),
		},
		Fn: func(ctx context.Context, raw json.RawMessage) (*parley.ToolResult, error) {
			var args struct {
				Timezone string `json:"timezone"`
			}
			if err := json.Unmarshal(raw, &args); err != nil {
				return errResult("arguments: %v", err), nil
			}
			tz := strings.TrimSpace(args.Timezone)
			if tz == "" {
				tz = "UTC"
			}
			loc, err := time.LoadLocation(tz)
			if err != nil || strings.EqualFold(tz, "local") {
				return errResult("unknown time zone %q (use an IANA name such as Europe/Paris)", args.Timezone), nil
			}
			t := now().In(loc)
			return &parley.ToolResult{Content: parley.Text(t.Format("Monday, 2006-01-02T15:04:05Z07:00") + " (" + loc.String() + ")")}, nil
		},
		Idempotent: true, // it only reads the clock
	}
}

func errResult(format string, args ...any) *parley.ToolResult {
	return &parley.ToolResult{Content: parley.Text("error: " + fmt.Sprintf(format, args...)), IsError: true}
}
