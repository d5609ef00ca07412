package builtin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/tools"
)

func TestEval(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want string
	}{
		{"12*(3+4)", "84"},
		{"2+3", "5"},
		{" 1 + 2 * 3 ", "7"},
		{"(1+2)*3", "9"},
		{"10/4", "2.5"},
		{"-3+5", "2"},
		{"2^3^2", "512"},
		{"-2^2", "-4"},
		{"7%3", "1"},
		{"0.1+0.2", "0.3"},
		{"1e3", ""}, // exponents are not part of the grammar
	} {
		v, err := Eval(tc.expr)
		if tc.want == "" {
			if err == nil {
				t.Errorf("Eval(%q) = %v, want an error", tc.expr, v)
			}
			continue
		}
		if err != nil {
			t.Errorf("Eval(%q): %v", tc.expr, err)
			continue
		}
		if got := FormatNumber(v); got != tc.want && !(tc.expr == "0.1+0.2" && strings.HasPrefix(got, "0.3")) {
			t.Errorf("Eval(%q) = %s, want %s", tc.expr, got, tc.want)
		}
	}
}

func TestEvalErrors(t *testing.T) {
	for expr, want := range map[string]string{
		"":                              "empty",
		"1/0":                           "division by zero",
		"(1+2":                          "missing ')'",
		"2+":                            "end of expression",
		"2 $ 3":                         "unexpected",
		"1..2":                          "bad number",
		strings.Repeat("(", 100) + "1":  "nested deeper",
		strings.Repeat("1+", 600) + "1": "longer than",
		"10^400":                        "not a finite number",
	} {
		_, err := Eval(expr)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Eval(%.20q) error = %v, want it to mention %q", expr, err, want)
		}
	}
}

func call(t *testing.T, tool parley.Tool, args string) *parley.ToolResult {
	t.Helper()
	res, err := tool.Call(context.Background(), json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestCalculatorTool(t *testing.T) {
	c := Calculator()
	if res := call(t, c, `{"expression":"12*(3+4)"}`); res.IsError || res.Content.String() != "84" {
		t.Fatalf("calculator: %+v %q", res, res.Content.String())
	}
	if res := call(t, c, `{"expression":"1/0"}`); !res.IsError || !strings.Contains(res.Content.String(), "division by zero") {
		t.Fatalf("calculator 1/0: %q", res.Content.String())
	}
	if res := call(t, c, `{}`); !res.IsError || !strings.Contains(res.Content.String(), "required") {
		t.Fatalf("calculator without expression: %q", res.Content.String())
	}
}

func TestCurrentTimeTool(t *testing.T) {
	fixed := time.Date(2026, 11, 22, 18, 30, 0, 0, time.UTC)
	ct := CurrentTime(func() time.Time { return fixed })
	if got := call(t, ct, `{}`).Content.String(); got != "Sunday, 2026-11-22T18:30:00Z (UTC)" {
		t.Fatalf("default zone: %q", got)
	}
	if got := call(t, ct, `{"timezone":"Asia/Tokyo"}`).Content.String(); got != "Monday, 2026-11-23T03:30:00+09:00 (Asia/Tokyo)" {
		t.Fatalf("Tokyo: %q", got)
	}
	if res := call(t, ct, `{"timezone":"Mars/Olympus"}`); !res.IsError || !strings.Contains(res.Content.String(), "Mars/Olympus") {
		t.Fatalf("unknown zone: %q", res.Content.String())
	}
}

func TestRegister(t *testing.T) {
	r := tools.NewRegistry()
	if err := Register(r, time.Now); err != nil {
		t.Fatal(err)
	}
	specs := r.List()
	if len(specs) != 2 || specs[0].Name != "calculator" || specs[1].Name != "get_current_time" {
		t.Fatalf("specs: %+v", specs)
	}
	for _, s := range specs {
		var schema map[string]any
		if err := json.Unmarshal(s.Parameters, &schema); err != nil || schema["type"] != "object" || s.Description == "" {
			t.Fatalf("%s: schema %s", s.Name, s.Parameters)
		}
	}
	if err := Register(r, time.Now); err == nil {
		t.Fatal("registering twice must fail")
	}
}
