package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/parleyhq/parley/provider/llmtest"
)

// databaseNote tells, in the usage of migrate and keys, where else the database settings come from.
const databaseNote = "--db and --database-url may also come from PARLEY_DB and PARLEY_DATABASE_URL, or from the db and\ndatabase_url keys of serve's config file (--config or PARLEY_CONFIG); no other setting is read from\nthe environment or the file."

// databaseFlags declares --db and --database-url, as serve has them.
func databaseFlags(fs *flag.FlagSet) (db, databaseURL *string) {
	db = fs.String("db", "parley.db", "SQLite database file")
	databaseURL = fs.String("database-url", "", "PostgreSQL URL (postgres://…); when set, used instead of --db")
	return db, databaseURL
}

func runMigrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flagSet("migrate", stderr, "Applies or inspects migrations: parley migrate [flags] up|down|status\n"+databaseNote)
	db, databaseURL := databaseFlags(fs)
	if err := parsed(fs, parseFlags(fs, args, getenv, nil, databaseFlag), stdout); err != nil {
		return err
	}
	cmd := "status"
	if fs.NArg() > 0 {
		cmd = fs.Arg(0)
	}
	switch cmd {
	case "up", "down", "status":
	default:
		return fmt.Errorf("migrate: unknown direction %q (want up, down or status)", cmd)
	}
	d, err := openDatabase(ctx, *db, *databaseURL, false)
	if err != nil {
		return err
	}
	defer d.Close()
	fmt.Fprintf(stdout, "%s\n", d.Name)
	return d.Migrate(ctx, cmd, stdout)
}

func runMockLLM(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flagSet("mockllm", stderr, "Runs the fake OpenAI-compatible model server (POST /v1/chat/completions).")
	addr := fs.String("addr", "127.0.0.1:8081", "address to listen on")
	delay := fs.Duration("token-delay", 0, "delay between streamed chunks")
	chunk := fs.Int("chunk-size", 0, "characters per streamed content chunk (0: the server's default)")
	chunks := fs.Int("chunks", 0, "answer every request with this many content chunks of filler text, no tool call (0: the demo model's answers)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := parsed(fs, parseFlags(fs, args, getenv, nil, nil), stdout); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level, "text")
	if err != nil {
		return err
	}
	opts := []llmtest.Option{llmtest.WithTokenDelay(*delay), llmtest.WithChunks(*chunks)}
	if *chunk > 0 {
		opts = append(opts, llmtest.WithChunkSize(*chunk))
	}
	return llmtest.ListenAndServe(ctx, *addr, llmtest.NewServer(opts...), log)
}
