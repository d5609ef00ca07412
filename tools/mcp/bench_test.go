package mcp

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/parleyhq/parley/tools/mcp/mcptest"
)

// BenchmarkCall measures one tool call through the SDK and Parley's result mapping: to a server
// in this process (in-memory transport) and to a real stdio process.
func BenchmarkCall(b *testing.B) {
	b.Run("in-memory", func(b *testing.B) {
		srv := mcptest.NewServer()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := New("t", ServerConfig{Command: "unused"}, Options{Transport: func() sdk.Transport {
			ct, st := sdk.NewInMemoryTransports()
			go srv.Run(ctx, st)
			return ct
		}})
		benchCalls(b, s)
	})
	b.Run("stdio", func(b *testing.B) {
		cmd, args, env := mcptest.Command(mcptest.Options{PIDFile: filepath.Join(b.TempDir(), "pids")})
		benchCalls(b, New("t", ServerConfig{Command: cmd, Args: args, Env: env}, Options{}))
	})
}

func benchCalls(b *testing.B, s *Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Connect(ctx); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var echo *Tool
	for _, t := range s.Tools() {
		if t.Spec().Name == "t__echo" {
			echo = t
		}
	}
	args := json.RawMessage(`{"text":"a short line of text, as tools return"}`)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := echo.Call(ctx, args); err != nil {
			b.Fatal(err)
		}
	}
}
