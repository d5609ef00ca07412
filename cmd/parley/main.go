// Command parley is the Parley conversation server.
//
//	parley serve      run the server (SQLite by default; the offline mock model when no provider is set)
//	parley migrate    apply or inspect database migrations: up | down | status
//	parley mockllm    run the fake OpenAI-compatible upstream, for benchmarks and demos
//	parley version    print the version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/parleyhq/parley/internal/logctx"
	"github.com/parleyhq/parley/redact"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "parley:", err)
		os.Exit(2)
	}
}

const usage = `Usage: parley <command> [flags]

Commands:
  serve     run the server
  migrate   apply or inspect database migrations (up | down | status)
  keys      manage API keys (create | list | revoke)
  mockllm   run the fake OpenAI-compatible model server
  backup    copy the SQLite database to a new file, online (VACUUM INTO)
  healthcheck  GET the server's /readyz (container health checks)
  version   print the version

Run 'parley <command> -h' for the flags of a command.
`

// run is the whole program; main only supplies the process's context, arguments, environment and
// standard streams, so tests can start it in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	err := command(ctx, args, getenv, stdout, stderr)
	if errors.Is(err, errHelpShown) {
		return nil
	}
	return err
}

// command runs the command args name.
func command(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, getenv, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, getenv, stdout, stderr)
	case "keys":
		return runKeys(ctx, rest, getenv, stdout, stderr)
	case "mockllm":
		return runMockLLM(ctx, rest, getenv, stdout, stderr)
	case "backup":
		return runBackup(ctx, rest, getenv, stdout, stderr)
	case "healthcheck":
		return runHealthcheck(ctx, rest, getenv, stdout, stderr)
	case "version", "-v", "--version":
		fmt.Fprintf(stdout, "parley %s (%s, %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}

// newLogger returns the process logger.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	// Every record is redacted: no key, e-mail address, file path, URL path or stack trace in the
	// logs (seed 003 §10).
	// Records logged with a run's or a request's context carry its ids (package logctx).
	if format == "json" {
		return slog.New(logctx.Handler(redact.Handler(slog.NewJSONHandler(w, opts)))), nil
	}
	return slog.New(logctx.Handler(redact.Handler(slog.NewTextHandler(w, opts)))), nil
}

// flagSet returns a FlagSet for a subcommand. Its usage (intro, then the flags) is written where
// the FlagSet's output points: parsed reports -h on stdout, a usage error on stderr.
func flagSet(name string, stderr io.Writer, intro string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: parley %s [flags]\n%s\nFlags:\n", name, intro)
		fs.PrintDefaults()
	}
	return fs
}

// errHelpShown ends a subcommand that was asked for its help (-h, --help): run returns nil.
var errHelpShown = errors.New("help shown")

// parsed finishes a subcommand's parse: on -h it writes the usage to stdout and returns
// errHelpShown (the command does nothing else and exits 0); other errors are returned as they are.
func parsed(fs *flag.FlagSet, err error, stdout io.Writer) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelpShown
	}
	return err
}
