package postgres

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/storetest"
)

// The benchmark bodies are in storetest, shared with store/sqlite; the Raw benchmarks measure
// PostgreSQL itself through pgx the same way (the limit).

func BenchmarkAppendOne(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	storetest.BenchAppend(b, s, 1)
}

func BenchmarkAppendBatch100(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	storetest.BenchAppend(b, s, 100)
}

func BenchmarkHistory10k(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	storetest.BenchHistory(b, s, storetest.Seed10k(b, s))
}

func BenchmarkModelContext10k(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	storetest.BenchModelContext(b, s, storetest.Seed10k(b, s))
}

// The same reads on a session that has branches: the active branch is found by walking up the
// tree from its leaf.
func BenchmarkHistory10kBranched(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	sid := storetest.Seed10k(b, s)
	storetest.Branch10k(b, s, sid)
	storetest.BenchHistory(b, s, sid)
}

func BenchmarkModelContext10kBranched(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	sid := storetest.Seed10k(b, s)
	storetest.Branch10k(b, s, sid)
	storetest.BenchModelContext(b, s, sid)
}

// seedSessions copies n sessions of owner in, one second apart.
func seedSessions(b *testing.B, s *Store, owner string, n int) {
	b.Helper()
	start := time.Now().UTC()
	_, err := s.pool.CopyFrom(context.Background(), pgx.Identifier{"sessions"}, []string{"id", "title", "owner", "created_at", "updated_at"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) {
			t := start.Add(time.Duration(i) * time.Second)
			return []any{parley.NewID(), "t", owner, t, t}, nil
		}))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.pool.Exec(context.Background(), `ANALYZE sessions`); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPageAll100k pages through 100,000 sessions of one owner, 100 per page.
func BenchmarkPageAll100k(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	seedSessions(b, s, "bench", 100_000)
	storetest.BenchPageAll(b, s, "bench", 100_000)
}

// BenchmarkRawInsert1 and BenchmarkRawInsert100 are the limits for the append benchmarks: the
// same rows inserted through pgx, 1 or 100 per transaction (a batch), none of the store's work.
func BenchmarkRawInsert1(b *testing.B)   { benchRawInsert(b, 1) }
func BenchmarkRawInsert100(b *testing.B) { benchRawInsert(b, 100) }

func benchRawInsert(b *testing.B, n int) {
	s := openTest(b)
	defer s.Close()
	sid := storetest.BenchSession(b, s, "bench")
	ctx := context.Background()
	seq := 0
	for b.Loop() {
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			batch := &pgx.Batch{}
			for i := 0; i < n; i++ {
				seq++
				batch.Queue(`INSERT INTO messages (id, session_id, seq, role, content, run_id, created_at) VALUES ($1, $2, $3, 'user', $4, 'run', $5)`,
					parley.NewID(), sid, seq, "message: a typical short chat line", time.Now())
			}
			return tx.SendBatch(ctx, batch).Close()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "records/s")
}

// BenchmarkRawScanModelCols10k is the limit for BenchmarkModelContext10k: the same query, rows
// read as raw bytes, nothing decoded.
func BenchmarkRawScanModelCols10k(b *testing.B) {
	s := openTest(b)
	defer s.Close()
	sid := storetest.Seed10k(b, s)
	ctx := context.Background()
	for b.Loop() {
		rows, err := s.pool.Query(ctx, `SELECT role, content, parts, name, tool_calls, tool_call_id, reasoning
			FROM messages WHERE session_id = $1 ORDER BY seq`, sid)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			_ = rows.RawValues()
			n++
		}
		rows.Close()
		if rows.Err() != nil || n != 10_000 {
			b.Fatal(n, rows.Err())
		}
	}
}

// The concurrent benchmarks: 1, 32 and 128 callers at once (group commit shares a transaction
// among those waiting together).

func BenchmarkAppendConcurrent1(b *testing.B)   { benchAppendConcurrent(b, 1) }
func BenchmarkAppendConcurrent32(b *testing.B)  { benchAppendConcurrent(b, 32) }
func BenchmarkAppendConcurrent128(b *testing.B) { benchAppendConcurrent(b, 128) }

func benchAppendConcurrent(b *testing.B, c int) {
	s := openTest(b)
	defer s.Close()
	storetest.BenchAppendConcurrent(b, s, c)
}

func BenchmarkChats1(b *testing.B)   { benchChats(b, 1) }
func BenchmarkChats32(b *testing.B)  { benchChats(b, 32) }
func BenchmarkChats128(b *testing.B) { benchChats(b, 128) }

func benchChats(b *testing.B, c int) {
	var p probe
	s := openTest(b, p.options)
	defer s.Close()
	p.start()
	storetest.BenchChats(b, s, c)
	p.report(b, b.N, "chat")
}

// The store calls of a streamed chat of a new session as the server makes them: the run's
// beginning (BeginRun: the session, the run, the user's message) and its end (FinishRun: the
// answer, the run's events, 3 chunks among them, the numbers given back, the run's end), with 1,
// 32 and 128 chats at once.
func BenchmarkServerChats1(b *testing.B)   { benchServerChats(b, 1) }
func BenchmarkServerChats32(b *testing.B)  { benchServerChats(b, 32) }
func BenchmarkServerChats128(b *testing.B) { benchServerChats(b, 128) }

func benchServerChats(b *testing.B, c int) {
	var p probe
	opts := []Option{p.options}
	// PARLEY_BENCH_PG_CROWD and PARLEY_BENCH_PG_WRITERS set the writer's groupcommit Crowd and
	// Writers (the ninth pass's comparison: fewer, larger batches at 32 in flight).
	if n, _ := strconv.Atoi(os.Getenv("PARLEY_BENCH_PG_CROWD")); n > 0 {
		opts = append(opts, func(o *options) { o.crowd = n })
	}
	if n, _ := strconv.Atoi(os.Getenv("PARLEY_BENCH_PG_WRITERS")); n > 0 {
		opts = append(opts, func(o *options) { o.writers = n })
	}
	s := openTest(b, opts...)
	defer s.Close()
	p.wal = s.pool
	storetest.BenchRunChats(b, s, c, storetest.ChatsProbe{
		Warm:   2 * c, // every connection has prepared the statements
		Start:  p.start,
		Report: func(n int) { p.report(b, n, "chat") },
	})
}

// probe counts what a benchmark's store did that does not depend on the machine's load: round
// trips to the server (a write answered by a read, on each connection), transactions committed by
// the group-commit writer, and the CPU time of the PostgreSQL backends serving the pool.
type probe struct {
	mu       sync.Mutex
	pids     []uint32
	trips    atomic.Int64
	commits  atomic.Int64
	stmts    atomic.Int64 // statements sent (a simple query of several counts each)
	stmts0   int64
	self0    time.Duration // this process's CPU at start
	cpu0     time.Duration
	trips0   int64
	commits0 int64
	// wal, when set, is asked where the server's WAL ends, for the bytes written (by the whole
	// server: other databases' writes count too).
	wal  *pgxpool.Pool
	wal0 int64
}

// walEnd returns the server's WAL insert position in bytes (0 without p.wal or on error).
func (p *probe) walEnd() int64 {
	var at int64
	if p.wal == nil || p.wal.QueryRow(context.Background(), `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&at) != nil {
		return 0
	}
	return at
}

func (p *probe) options(o *options) {
	o.configure = func(cfg *pgxpool.Config) {
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{KeepAlive: 5 * time.Minute}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c, trips: &p.trips}, nil
		}
		cfg.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
			p.mu.Lock()
			p.pids = append(p.pids, c.PgConn().PID())
			p.mu.Unlock()
			return nil
		}
		cfg.ConnConfig.Tracer = stmtCounter{&p.stmts}
		// No ping before handing out a connection that was idle: it would be a round trip
		// that depends on the machine's speed.
		cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	}
	o.batched = func(int, error) { p.commits.Add(1) }
}

// backendCPU sums user and system time of the pool's backends (Linux /proc; 0 elsewhere).
func (p *probe) backendCPU() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var cpu time.Duration
	for _, pid := range p.pids {
		cpu += procCPU(fmt.Sprintf("/proc/%d/stat", pid))
	}
	return cpu
}

// procCPU returns the user and system time of the process whose stat file is at path (Linux
// /proc; 0 elsewhere).
func procCPU(path string) time.Duration {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) <= 12 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+s) * 10 * time.Millisecond // USER_HZ = 100
}

func (p *probe) start() {
	p.wal0 = p.walEnd() // first: its round trip is not the benchmark's
	p.cpu0, p.trips0, p.commits0, p.stmts0 = p.backendCPU(), p.trips.Load(), p.commits.Load(), p.stmts.Load()
	p.self0 = procCPU("/proc/self/stat")
}

func (p *probe) report(b *testing.B, n int, unit string) {
	b.ReportMetric(float64(p.trips.Load()-p.trips0)/float64(n), "roundtrips/"+unit)
	b.ReportMetric(float64(p.commits.Load()-p.commits0)/float64(n), "commits/"+unit)
	b.ReportMetric(float64(p.stmts.Load()-p.stmts0)/float64(n), "statements/"+unit)
	b.ReportMetric(float64(p.backendCPU()-p.cpu0)/float64(time.Microsecond)/float64(n), "pg-cpu-µs/"+unit)
	if p.wal != nil {
		b.ReportMetric(float64(p.walEnd()-p.wal0)/float64(n), "wal-bytes/"+unit)
	}
	// The benchmark's own process: the store's side (pgx, group commit, encoding) and the
	// benchmark's loop.
	b.ReportMetric(float64(procCPU("/proc/self/stat")-p.self0)/float64(time.Microsecond)/float64(n), "go-cpu-µs/"+unit)
}

// stmtCounter counts the statements pgx sends: each query, each query of a batch, and each
// statement of a simple query without arguments (pipeTx sends its framing and COMMIT as one).
type stmtCounter struct{ n *atomic.Int64 }

func (c stmtCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if len(d.Args) == 0 {
		c.n.Add(int64(strings.Count(d.SQL, "; ")) + 1)
	} else {
		c.n.Add(1)
	}
	return ctx
}
func (stmtCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (stmtCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (c stmtCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) { c.n.Add(1) }
func (stmtCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)       {}

// countingConn counts round trips: a read after a write. pgx may write and read from different
// goroutines (its background reader), so the flag is atomic.
type countingConn struct {
	net.Conn
	wrote atomic.Bool
	trips *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.wrote.Store(true)
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	if c.wrote.CompareAndSwap(true, false) {
		c.trips.Add(1)
	}
	return c.Conn.Read(b)
}
