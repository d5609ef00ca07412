package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/approval"
	"github.com/parleyhq/parley/limit"
	"github.com/parleyhq/parley/provider/router"
	"github.com/parleyhq/parley/stream"
	"github.com/parleyhq/parley/tools/mcp"
	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"
)

// config is everything `parley serve` can be told. Each field is a flag; the same setting can be
// given as the environment variable PARLEY_<FLAG> (upper case, '-' as '_') or as a key of the
// config file. Precedence: flag, then environment, then config file, then the default.
type config struct {
	Addr               string
	MetricsAddr        string
	PprofAddr          string
	DB                 string
	DatabaseURL        string
	Migrate            bool
	Model              string
	OpenAIBaseURL      string
	OpenAIAPIKey       string
	AnthropicAPIKey    string
	GeminiAPIKey       string
	ProviderAttempts   int
	ProviderRetryBase  time.Duration
	ProviderRetryMax   time.Duration
	ProviderMaxWait    time.Duration
	ProviderTimeout    time.Duration
	BreakerFailures    int
	BreakerCooldown    time.Duration
	SystemPrompt       string
	MemoryPromptTokens int
	MaxIterations      int
	ToolHistoryRounds  int
	HistoryCacheMB     int
	ToolTimeout        time.Duration
	MaxParallelTools   int
	ToolBreakerFails   int
	MaxToolCalls       int
	ToolMaxString      int
	ToolMaxDepth       int
	InjectionGuard     string
	ToolQuotaUser      string
	ToolQuotaTool      string
	ToolBreakerCool    time.Duration
	MCPConfig          string
	MCPStartTimeout    time.Duration
	MCPInstallTimeout  time.Duration
	MCPRetryBase       time.Duration
	MCPRetryMax        time.Duration
	MaxBodyBytes       int64
	BodyBudget         int64
	BodyTimeout        time.Duration
	MaxConnsPerAddr    int
	AuthRecheck        time.Duration
	Auth               string
	Guests             bool
	GuestTTL           time.Duration
	RateLimit          string
	GuestRateLimit     string
	RedisURL           string
	RealIPHeader       string
	CORSOrigins        string
	MaxRuns            int
	MaxMessageChars    int
	ShutdownGrace      time.Duration
	RunRetain          time.Duration
	StreamRingBytes    int
	StreamBacklogBytes int
	EventRetention     time.Duration
	PauseTimeout       time.Duration
	ToolPolicy         string
	ToolPolicyDefault  string
	ApprovalTimeout    time.Duration
	ApprovalPoll       time.Duration
	ApprovalRetention  time.Duration
	InstanceID         string
	RunLease           time.Duration
	Heartbeat          time.Duration
	WriteTimeout       time.Duration
	MaxStreams         int
	StreamIdle         time.Duration
	StreamLifetime     time.Duration
	MockTokenDelay     time.Duration
	LogLevel           string
	LogFormat          string
	AccessLog          bool
	TraceContent       bool
	DataDir            string
	BlobStore          string
	S3Endpoint         string
	S3Bucket           string
	S3Region           string
	S3Prefix           string
	S3Insecure         bool
	MaxFileBytes       int64
	FileQuota          int64
	AttachTextBytes    int
	AttachInlineBytes  int64

	executorConfig // artifacts, web search, fetch_url (executors.go)

	// From the config file only: they are structured.
	Providers []providerConfig
	Fallbacks map[string][]string
	Prices    map[string]router.Price
	// MCPServers is the config file's "mcpServers" mapping, the same shape as --mcp-config's JSON.
	MCPServers map[string]mcp.ServerConfig
}

// fileSections are the config file's structured keys, which no flag takes: the decoder of each.
func (c *config) fileSections() map[string]any {
	return map[string]any{"providers": &c.Providers, "fallbacks": &c.Fallbacks, "prices": &c.Prices, "mcpServers": &c.MCPServers}
}

// serveFlags declares the flags of `serve` on fs, bound to c.
func serveFlags(fs *flag.FlagSet, c *config) {
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "address to listen on (host:port; port 0 picks a free one)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", "address of a separate listener serving GET /metrics to anyone who reaches it (host:port; keep it private); empty: /metrics is on --addr, for admin keys only")
	fs.StringVar(&c.PprofAddr, "pprof-addr", "", "address of a separate listener serving Go's profiles (/debug/pprof/) to anyone who reaches it, with mutex and block profiling on (host:port; keep it private; for profiling only); empty: none")
	fs.StringVar(&c.DB, "db", "parley.db", "SQLite database file (created if missing)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "PostgreSQL URL (postgres://user:password@host:5432/db); when set, used instead of --db")
	fs.BoolVar(&c.Migrate, "migrate", true, "apply database migrations at start")
	fs.StringVar(&c.Model, "model", "", "default model when a request names none (default: gpt-4o-mini with OpenAI, mock offline)")
	fs.StringVar(&c.OpenAIBaseURL, "openai-base-url", "", "OpenAI-compatible endpoint, e.g. http://localhost:11434/v1 for Ollama (also OPENAI_BASE_URL)")
	fs.StringVar(&c.OpenAIAPIKey, "openai-api-key", "", "API key for the OpenAI-compatible endpoint (also OPENAI_API_KEY)")
	fs.StringVar(&c.AnthropicAPIKey, "anthropic-api-key", "", "API key of Anthropic's Messages API; configures the provider \"anthropic\" (also ANTHROPIC_API_KEY)")
	fs.StringVar(&c.GeminiAPIKey, "gemini-api-key", "", "API key of the Gemini API; configures the provider \"gemini\" (also GEMINI_API_KEY)")
	fs.IntVar(&c.ProviderAttempts, "provider-attempts", 3, "tries of one model call on 429, 5xx and connection errors, the first included, before the first token")
	fs.DurationVar(&c.ProviderRetryBase, "provider-retry-base", 500*time.Millisecond, "first backoff between tries; it doubles per try, with jitter")
	fs.DurationVar(&c.ProviderRetryMax, "provider-retry-max", 10*time.Second, "longest backoff between tries")
	fs.DurationVar(&c.ProviderMaxWait, "provider-max-wait", time.Minute, "longest Retry-After honoured; a provider asking for more is not retried")
	fs.DurationVar(&c.ProviderTimeout, "provider-timeout", 10*time.Minute, "time limit of one model call, streaming included")
	fs.IntVar(&c.BreakerFailures, "breaker-failures", 3, "consecutive failed model calls of a provider endpoint (5xx, connection errors, timeouts; retries count once, 429s never), or failed starts of an MCP server, that open its circuit breaker")
	fs.DurationVar(&c.BreakerCooldown, "breaker-cooldown", 30*time.Second, "how long an open breaker refuses calls (or starts) before one trial")
	fs.StringVar(&c.SystemPrompt, "system-prompt", "", "system prompt put before every conversation")
	fs.IntVar(&c.MemoryPromptTokens, "memory-prompt-tokens", 2000, "token budget of what a project adds to its sessions' system prompt (instructions, then memory newest first; what does not fit is left out and counted); 0 adds only the project's name")
	fs.IntVar(&c.MaxIterations, "max-iterations", 10, "model calls per run before it stops with a 'reached max iterations' message")
	fs.IntVar(&c.ToolHistoryRounds, "tool-history-rounds", 10, "most recent tool rounds (one answer with all its parallel calls) sent to the model whole; older rounds are shortened")
	fs.IntVar(&c.HistoryCacheMB, "history-cache-mb", 64, "memory for the model view of active sessions, so each model call reads only new messages (0: off)")
	fs.DurationVar(&c.ToolTimeout, "tool-timeout", 60*time.Second, "time limit of one tool call")
	fs.IntVar(&c.MaxParallelTools, "max-parallel-tools", 4, "tool calls of one model answer run at once")
	fs.IntVar(&c.ToolBreakerFails, "tool-breaker-failures", 3, "consecutive failures (errors, crashes, timeouts) of a tool that open its circuit breaker")
	fs.DurationVar(&c.ToolBreakerCool, "tool-breaker-cooldown", 30*time.Second, "how long an open tool breaker refuses calls (the model is told) before one trial call")
	fs.IntVar(&c.MaxToolCalls, "max-tool-calls", 3, "tool calls one request (run) may make, all model answers together; the calls past it are answered with an error, not run (0: no bound)")
	fs.IntVar(&c.ToolMaxString, "tool-max-string", 100_000, "longest string, in characters, in a tool call's arguments")
	fs.IntVar(&c.ToolMaxDepth, "tool-max-depth", 20, "deepest nesting of objects and arrays in a tool call's arguments")
	fs.StringVar(&c.InjectionGuard, "injection-guard", "block", "tool arguments matching a prompt-injection pattern: block (refused, the model is told), flag (run, logged and counted) or off")
	fs.StringVar(&c.ToolQuotaUser, "tool-quota-user", "600/h,burst=60", "tool calls per user, all tools together (N/s|m|h|d[,burst=B], or off)")
	fs.StringVar(&c.ToolQuotaTool, "tool-quota-tool", "off", "calls per tool, all users together (N/s|m|h|d[,burst=B], or off)")
	fs.StringVar(&c.MCPConfig, "mcp-config", "", "JSON file of MCP servers in the common {\"mcpServers\": {...}} shape (the config file's mcpServers key takes the same)")
	fs.DurationVar(&c.MCPStartTimeout, "mcp-start-timeout", 30*time.Second, "time limit of one start of an MCP server: connecting and listing its tools; Parley waits this long for first starts, then goes on while they finish")
	fs.DurationVar(&c.MCPInstallTimeout, "mcp-install-timeout", 5*time.Minute, "time limit of the first start of an MCP server run through a package runner (npx, uvx, docker, …), which may download it first")
	fs.DurationVar(&c.MCPRetryBase, "mcp-retry-base", 500*time.Millisecond, "first wait before an MCP server that died or failed to start is started again; it doubles per failure, with jitter")
	fs.DurationVar(&c.MCPRetryMax, "mcp-retry-max", 30*time.Second, "longest wait between starts of an MCP server")
	fs.StringVar(&c.Auth, "auth", "", "off (one user, \"local\", no keys) or keys (API keys: parley keys create); default: off on a loopback address, keys otherwise")
	fs.BoolVar(&c.Guests, "guests", false, "guest mode (with --auth keys): POST /api/v1/auth/guest gives anyone a guest token with its own sessions and the guest rate limit")
	fs.DurationVar(&c.GuestTTL, "guest-ttl", 7*24*time.Hour, "how long a guest token is valid")
	fs.StringVar(&c.RateLimit, "rate-limit", "600/m,burst=100", "API requests per user with a key (N/s|m|h|d, optionally ,burst=B; off for none)")
	fs.StringVar(&c.GuestRateLimit, "guest-rate-limit", "60/m,burst=20", "API requests per guest, and per client address for requests without valid credentials")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL (redis://host:6379/0); when set, rate limits are kept in Redis and hold across instances, and runs' events and control actions reach every instance")
	fs.StringVar(&c.RealIPHeader, "real-ip-header", "", "header a reverse proxy sets to the client's address, such as X-Forwarded-For (only behind a proxy that overwrites it)")
	fs.StringVar(&c.CORSOrigins, "cors-origins", "", "comma-separated origins browsers may call the API from (https://app.example.com), or *")
	fs.IntVar(&c.MaxRuns, "max-runs", 64, "budget of concurrent runs; past it, new chats get 503 with Retry-After (0: no budget)")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", 8<<20, "largest request body accepted")
	fs.Int64Var(&c.BodyBudget, "max-body-inflight", 32<<20, "request body bytes read and decoded at once, all requests together; a request that cannot get its share within 5s gets 503 with Retry-After (at least max-body-bytes)")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", time.Minute, "time to receive a request's body; a slower one gets 400 and its connection is closed")
	fs.IntVar(&c.MaxConnsPerAddr, "max-conns-per-addr", 256, "open connections per client address (IPv6: per /64); past it a connection gets 503 with Retry-After (0: no bound; set 0 behind a reverse proxy, which should bound them)")
	fs.DurationVar(&c.AuthRecheck, "auth-recheck", 5*time.Second, "how long a key lookup is cached, and how often open streams check their key again: a revoked or expired key ends them within about twice this, on every instance")
	fs.IntVar(&c.MaxMessageChars, "max-message-chars", 100_000, "longest user message accepted, in characters")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 30*time.Second, "on SIGTERM, time given to active runs to finish before they are aborted")
	fs.DurationVar(&c.RunRetain, "run-retain", 5*time.Minute, "how long a finished run stays known in memory (its events are read from the database)")
	fs.IntVar(&c.StreamRingBytes, "stream-ring-bytes", stream.DefaultRingBytes, "bound, in bytes, of a session's recent events kept in memory: those the database has not yet taken (a run waits for it past this) and those a reader has not yet read (a reader further behind reads the database); the rest are let go at each database write")
	fs.IntVar(&c.StreamBacklogBytes, "stream-backlog-bytes", stream.DefaultBacklogBytes, "budget, in bytes, of the events all runs together hold in memory waiting for the database, shared among the runs writing at once: a run waits for the database once it holds its share (at least 4 KiB, at most --stream-ring-bytes), so memory per stream shrinks as streams multiply")
	fs.DurationVar(&c.EventRetention, "event-retention", 72*time.Hour, "how long run events stay in the database for clients that resume a stream (0: forever)")
	fs.DurationVar(&c.PauseTimeout, "pause-timeout", 10*time.Minute, "a run paused for longer is aborted")
	fs.StringVar(&c.ToolPolicy, "tool-policy", "", "tool approval policy: comma-separated pattern=auto|ask|deny (tool names, * and ? wildcards; the exact name, else the most specific pattern wins), e.g. 'mcp_fs_*=ask,mcp_fs_read*=auto,calculator=auto'; a project's tool_policy overrides it")
	fs.StringVar(&c.ToolPolicyDefault, "tool-policy-default", "auto", "policy of a tool no pattern names: auto, ask or deny; MCP tools marked destructive (destructiveHint) ask and read-only ones (readOnlyHint) run, whatever this says")
	fs.DurationVar(&c.ApprovalTimeout, "approval-timeout", 10*time.Minute, "a tool call waiting for approval this long is denied (the model is told nobody answered)")
	fs.DurationVar(&c.ApprovalRetention, "approval-retention", 7*24*time.Hour, "how long a decided (or expired) tool approval stays in the database; those that allowed a tool \"always\" stay with their session (0: forever)")
	fs.DurationVar(&c.ApprovalPoll, "approval-poll", 2*time.Second, "how often a run waiting for approval reads the database, for decisions given on an instance that could not tell it directly (without --redis-url)")
	fs.StringVar(&c.InstanceID, "instance-id", "", "this process's name among instances sharing the database, stable across restarts (default: host name and --addr; random when the port is 0)")
	fs.DurationVar(&c.RunLease, "run-lease", 30*time.Second, "a run whose process stops renewing it for this long is taken over by another instance")
	fs.DurationVar(&c.Heartbeat, "heartbeat", 15*time.Second, "interval of keep-alives on streams: SSE comments, WebSocket pings")
	fs.DurationVar(&c.WriteTimeout, "write-timeout", 10*time.Second, "a streaming client that cannot take an event (or answer a ping) in this time is dropped")
	fs.IntVar(&c.MaxStreams, "max-streams-per-user", 32, "open session streams (SSE) and WebSockets each user may hold on this instance (0: no bound)")
	fs.DurationVar(&c.StreamIdle, "stream-idle", 15*time.Minute, "a stream with nothing but keep-alives for this long is closed; the client resumes")
	fs.DurationVar(&c.StreamLifetime, "stream-lifetime", 24*time.Hour, "any stream is closed after this long; the client resumes")
	fs.DurationVar(&c.MockTokenDelay, "mock-token-delay", 15*time.Millisecond, "delay between chunks of the offline mock model")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	fs.BoolVar(&c.AccessLog, "access-log", true, "log a line per request answered (method, route pattern, status, duration, bytes, user, request id) at info level")
	fs.BoolVar(&c.TraceContent, "trace-content", false, "put message content (the messages sent to the model, its answer, tool arguments and results) in trace spans; off: spans hold names, ids, models and token counts only")
	fs.StringVar(&c.DataDir, "data-dir", "", "directory of uploaded files' bytes (blobs/ inside it) with --blob-store disk (default: the --db file's path plus .data, e.g. parley.db.data; parley-data with --database-url)")
	fs.StringVar(&c.BlobStore, "blob-store", "disk", "where uploaded files' bytes live: disk (under --data-dir) or s3 (--s3-*; credentials from PARLEY_S3_ACCESS_KEY and PARLEY_S3_SECRET_KEY, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
	fs.StringVar(&c.S3Endpoint, "s3-endpoint", "", "S3-compatible endpoint, host[:port] (s3.amazonaws.com, 127.0.0.1:9000)")
	fs.StringVar(&c.S3Bucket, "s3-bucket", "", "bucket of the blobs (it must exist)")
	fs.StringVar(&c.S3Region, "s3-region", "", "the bucket's region (optional)")
	fs.StringVar(&c.S3Prefix, "s3-prefix", "", "key prefix of Parley's objects in the bucket (optional, e.g. parley/)")
	fs.BoolVar(&c.S3Insecure, "s3-insecure", false, "plain HTTP to the S3 endpoint (a local MinIO); TLS otherwise")
	fs.Int64Var(&c.MaxFileBytes, "max-file-bytes", 100<<20, "largest uploaded file; a larger one gets 413")
	fs.Int64Var(&c.FileQuota, "file-quota-bytes", 1<<30, "bytes of uploaded files each user may keep, all files together; an upload past it gets 413 (0: no quota)")
	fs.IntVar(&c.AttachTextBytes, "attachment-text-bytes", 100_000, "bytes of an attached text file, or of a PDF's extracted text, a model is given; the rest is cut, with a note saying so")
	fs.Int64Var(&c.AttachInlineBytes, "attachment-inline-bytes", 20<<20, "largest attached image or PDF sent to a model inline; a larger PDF is sent as its text, a larger image as a note")
	executorFlags(fs, &c.executorConfig)
}

// envName is the environment variable for a flag.
func envName(flagName string) string {
	return "PARLEY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// parseConfig fills the flags of `serve` from the config file, the environment and args, in
// rising precedence. The config file is named by --config or PARLEY_CONFIG.
func parseConfig(fs *flag.FlagSet, args []string, getenv func(string) string, sections map[string]any) error {
	return parseFlags(fs, args, getenv, sections, everyFlag)
}

// everyFlag lets the environment and the config file set every flag (serve).
func everyFlag(string) bool { return true }

// databaseFlag lets them set only the database settings that migrate and keys share with serve,
// so that `parley keys create` run beside a configured server finds its database, and nothing
// else in the environment (PARLEY_ADMIN, PARLEY_USER, …) reaches a subcommand.
func databaseFlag(name string) bool { return name == "db" || name == "database-url" }

// parseFlags fills fs's flags from the config file, the environment and args, in rising
// precedence; fromEnv says which flags the first two may set (nil: none, and no --config). The
// config file is serve's: a subcommand skips the keys fromEnv excludes and takes the rest.
func parseFlags(fs *flag.FlagSet, args []string, getenv func(string) string, sections map[string]any, fromEnv func(string) bool) error {
	fs.SetOutput(io.Discard)
	if fromEnv == nil {
		return fs.Parse(args)
	}
	configPath := fs.String("config", "", "YAML config file whose keys are these flag names (also PARLEY_CONFIG)")
	// A first pass finds --config; the real parse comes last so flags win.
	probe := flag.NewFlagSet("probe", flag.ContinueOnError)
	probe.SetOutput(io.Discard)
	fs.VisitAll(func(f *flag.Flag) { probe.Var(f.Value, f.Name, f.Usage) })
	if err := probe.Parse(args); err != nil {
		return err
	}
	path := *configPath
	if path == "" {
		path = getenv("PARLEY_CONFIG")
	}
	if path != "" {
		if err := applyFile(fs, path, sections, fromEnv); err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || !fromEnv(f.Name) {
			return
		}
		if v := getenv(envName(f.Name)); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: %v", envName(f.Name), err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return fs.Parse(args)
}

// applyFile sets flags from a YAML mapping of flag names to values. The keys of sections are
// decoded, strictly, into their values instead.
func applyFile(fs *flag.FlagSet, path string, sections map[string]any, fromEnv func(string) bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if dst, ok := sections[k]; ok {
			if err := decodeSection(m[k], dst); err != nil {
				return fmt.Errorf("config file %s: %s: %v", path, k, err)
			}
			continue
		}
		name := strings.ReplaceAll(k, "_", "-")
		if !fromEnv(name) {
			continue // serve's setting, read by a subcommand: not its own
		}
		if fs.Lookup(name) == nil || name == "config" {
			return fmt.Errorf("config file %s: unknown key %q", path, k)
		}
		if err := fs.Set(name, fmt.Sprint(m[k])); err != nil {
			return fmt.Errorf("config file %s: %s: %v", path, k, err)
		}
	}
	return nil
}

// decodeSection decodes one structured section of the config file into dst, refusing unknown keys.
func decodeSection(v any, dst any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	return dec.Decode(dst)
}

// corsOrigins is --cors-origins as a list.
func (c *config) corsOrigins() []string {
	var out []string
	for _, o := range strings.Split(c.CORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// loopback reports whether addr (host:port) listens on a loopback address only.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// validate checks settings that flag parsing cannot.
func (c *config) validate() error {
	var errs []error
	if c.MaxFileBytes < 1 || c.FileQuota < 0 || c.AttachTextBytes < 1 || c.AttachInlineBytes < 1 {
		errs = append(errs, errors.New("max-file-bytes, attachment-text-bytes and attachment-inline-bytes must be at least 1; file-quota-bytes must not be negative"))
	}
	switch c.BlobStore {
	case "", "disk":
	case "s3":
		if c.S3Endpoint == "" || c.S3Bucket == "" {
			errs = append(errs, errors.New("blob-store s3 needs s3-endpoint and s3-bucket"))
		}
	default:
		errs = append(errs, fmt.Errorf("blob-store must be disk or s3, not %q", c.BlobStore))
	}
	if c.MaxIterations < 1 {
		errs = append(errs, errors.New("max-iterations must be at least 1"))
	}
	if c.MemoryPromptTokens < 0 {
		errs = append(errs, errors.New("memory-prompt-tokens must not be negative"))
	}
	if c.ToolHistoryRounds < 0 {
		errs = append(errs, errors.New("tool-history-rounds must not be negative"))
	}
	if c.HistoryCacheMB < 0 {
		errs = append(errs, errors.New("history-cache-mb must not be negative"))
	}
	if c.MaxParallelTools < 1 {
		errs = append(errs, errors.New("max-parallel-tools must be at least 1"))
	}
	if c.StreamRingBytes < 4096 {
		// Smaller, a run would wait for the database at nearly every event.
		errs = append(errs, errors.New("stream-ring-bytes must be at least 4096"))
	}
	if c.StreamBacklogBytes < 4096 {
		errs = append(errs, errors.New("stream-backlog-bytes must be at least 4096"))
	}
	if c.ToolTimeout <= 0 || c.ShutdownGrace < 0 || c.Heartbeat <= 0 || c.WriteTimeout <= 0 {
		errs = append(errs, errors.New("tool-timeout, heartbeat and write-timeout must be positive; shutdown-grace must not be negative"))
	}
	if c.ProviderAttempts < 1 || c.BreakerFailures < 1 {
		errs = append(errs, errors.New("provider-attempts and breaker-failures must be at least 1"))
	}
	if c.ProviderRetryBase <= 0 || c.ProviderRetryMax <= 0 || c.ProviderMaxWait <= 0 || c.ProviderTimeout <= 0 || c.BreakerCooldown <= 0 {
		errs = append(errs, errors.New("provider-retry-base, provider-retry-max, provider-max-wait, provider-timeout and breaker-cooldown must be positive"))
	}
	if c.ToolBreakerFails < 1 || c.ToolBreakerCool <= 0 {
		errs = append(errs, errors.New("tool-breaker-failures must be at least 1 and tool-breaker-cooldown positive"))
	}
	if c.MCPStartTimeout <= 0 || c.MCPInstallTimeout <= 0 || c.MCPRetryBase <= 0 || c.MCPRetryMax < c.MCPRetryBase {
		errs = append(errs, errors.New("mcp-start-timeout, mcp-install-timeout and mcp-retry-base must be positive, and mcp-retry-max at least mcp-retry-base"))
	}
	switch c.Auth {
	case "":
		c.Auth = "keys"
		if loopback(c.Addr) {
			c.Auth = "off"
		}
	case "off", "keys":
	default:
		errs = append(errs, fmt.Errorf("auth must be off or keys, not %q", c.Auth))
	}
	if c.Guests && c.Auth != "keys" {
		errs = append(errs, errors.New("guests needs --auth keys"))
	}
	if c.EventRetention < 0 || c.PauseTimeout <= 0 || c.MaxStreams < 0 || c.StreamIdle <= 0 || c.StreamLifetime <= 0 {
		errs = append(errs, errors.New("pause-timeout, stream-idle and stream-lifetime must be positive; event-retention and max-streams-per-user not negative"))
	}
	if _, err := approval.Parse(c.ToolPolicy); err != nil {
		errs = append(errs, err)
	}
	if !approval.ValidMode(c.ToolPolicyDefault) {
		errs = append(errs, fmt.Errorf("tool-policy-default must be auto, ask or deny, not %q", c.ToolPolicyDefault))
	}
	if c.ApprovalTimeout <= 0 || c.ApprovalPoll <= 0 {
		errs = append(errs, errors.New("approval-timeout and approval-poll must be positive"))
	}
	if c.ApprovalRetention < 0 {
		errs = append(errs, errors.New("approval-retention must not be negative"))
	}
	if c.RunLease < 3*time.Second {
		errs = append(errs, errors.New("run-lease must be at least 3s"))
	}
	if c.GuestTTL <= 0 || c.MaxRuns < 0 {
		errs = append(errs, errors.New("guest-ttl must be positive and max-runs not negative"))
	}
	if c.MaxToolCalls < 0 || c.ToolMaxString < 1 || c.ToolMaxDepth < 1 {
		errs = append(errs, errors.New("max-tool-calls must not be negative; tool-max-string and tool-max-depth must be at least 1"))
	}
	switch c.InjectionGuard {
	case "block", "flag", "off":
	default:
		errs = append(errs, fmt.Errorf("injection-guard must be block, flag or off, not %q", c.InjectionGuard))
	}
	for name, v := range map[string]string{"rate-limit": c.RateLimit, "guest-rate-limit": c.GuestRateLimit, "tool-quota-user": c.ToolQuotaUser, "tool-quota-tool": c.ToolQuotaTool} {
		if _, err := limit.ParseRate(v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", name, err))
		}
	}
	if c.RedisURL != "" {
		if _, err := redis.ParseURL(c.RedisURL); err != nil {
			errs = append(errs, fmt.Errorf("redis-url: %v", err))
		}
	}
	for _, o := range c.corsOrigins() {
		if o == "*" {
			continue
		}
		if u, err := url.Parse(o); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != "" {
			errs = append(errs, fmt.Errorf("cors-origins: %q is not an origin such as https://app.example.com", o))
		}
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, errors.New("max-body-bytes must be at least 1024"))
	}
	if c.BodyBudget < c.MaxBodyBytes || c.BodyTimeout <= 0 || c.MaxConnsPerAddr < 0 || c.AuthRecheck <= 0 {
		errs = append(errs, errors.New("max-body-inflight must be at least max-body-bytes; body-timeout and auth-recheck must be positive; max-conns-per-addr not negative"))
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		errs = append(errs, errors.New("database-url must be a postgres:// or postgresql:// URL"))
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		errs = append(errs, fmt.Errorf("log-format must be text or json, not %q", c.LogFormat))
	}
	if err := c.executorConfig.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// instanceID names this process among the instances sharing the database: --instance-id, or the
// host name and the listening address, which a restart keeps (so the restarted process takes
// back its runs at once). With port 0 the address says nothing: a random name, whose runs other
// instances (or the next process) take over when their lease ends.
func (c *config) instanceID() string {
	if c.InstanceID != "" {
		return c.InstanceID
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	if _, port, err := net.SplitHostPort(c.Addr); err != nil || port == "0" || port == "" {
		return host + "/" + parley.NewID()
	}
	return host + "/" + c.Addr
}
