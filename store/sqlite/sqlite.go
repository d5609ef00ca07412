// Package sqlite is Parley's default Store: one SQLite file in WAL mode, written with
// synchronous=FULL so that a write has reached the disk before the API acknowledges it. It uses the
// pure-Go driver modernc.org/sqlite (no cgo), and goose migrations embedded in the binary.
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/groupcommit"
	"github.com/parleyhq/parley/store/internal/migrate"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Page size limits of ListSessions and ListMessages.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// Store is a parley.Store on one SQLite file.
type Store struct {
	db *sql.DB
	// w is the one writer of the process: concurrent writes queue in Go instead of spinning on
	// SQLite's busy timeout, and those waiting together share one transaction and one fsync.
	w *groupcommit.Writer[*sql.Tx]

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // the hot writes' statements (cachedTx)
	// txStmts are those statements bound to the write transaction under way (tx), made once
	// per transaction instead of once per statement run: a batch runs each many times.
	txStmts struct {
		tx *sql.Tx
		m  map[string]*sql.Stmt
	}

	wc    writeConn // the connection every write transaction runs on (writeconn.go)
	margs mergeArgs // the slices a batch's merge fills, kept for the next (merge.go)

	ckpt *checkpointer // the WAL's checkpoints, after a begin's batch (checkpoint.go)
	// began: the write transaction under way began a run (set and read by the writer's batch,
	// which runs alone: SQLite has one writer)
	began bool

	// ran counts the statements run in write transactions (the savepoints of group commit and
	// the hot writes' statements, cachedTx), for the benchmarks and the tests that count them.
	ran atomic.Int64

	// betweenBranchReads, when set (tests), is called between ListBranch's two reads: the
	// branch's tip, then its messages.
	betweenBranchReads func()
}

var _ parley.Store = (*Store)(nil)

type options struct {
	migrate bool
	batched func(n int, err error) // tests: told the size of each group-commit batch
	// tests: the WAL's frames that start a checkpoint (default checkpointFrames), and a hook
	// told each checkpoint's result
	checkpointAt uint32
	checkpointed func(frames, copied int, err error)
}

// Option configures Open.
type Option func(*options)

// WithoutMigrate opens the database without applying pending migrations.
func WithoutMigrate() Option { return func(o *options) { o.migrate = false } }

// OnCommit has the store tell fn about each write transaction, just before its writes are answered: how
// many writes it carried (group commit) and the error that failed it whole, if any (metrics,
// and tests that count a chat's transactions).
func OnCommit(fn func(writes int, err error)) Option { return func(o *options) { o.batched = fn } }

// Open opens (creating it if needed) the database file at path and applies pending migrations.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{migrate: true, checkpointAt: checkpointFrames}
	for _, opt := range opts {
		opt(&o)
	}
	if path == "" || strings.ContainsAny(path, "?#") {
		return nil, fmt.Errorf("sqlite: invalid database path %q", path)
	}
	dsn := "file:" + path + "?_txlock=immediate" +
		"&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=foreign_keys(1)" +
		"&_pragma=wal_autocheckpoint(0)" // checkpoints run after a begin's batch, not in a commit (checkpoint.go)
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	// WAL lets readers run beside the one writer; a few connections are plenty.
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	db.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{db: db, stmts: map[string]*sql.Stmt{}}
	// Optimistic: a batch runs without savepoints unless one of its writes fails. A savepoint
	// here is two statements per write (SAVEPOINT, RELEASE), and while one is open SQLite copies
	// each page a write changes again into the savepoint's journal: together a fifth of a
	// streamed chat's store CPU at 32 in flight. Each write's function must then be safe to run
	// again, its effects of a first run rolled back: it sets its results, it does not add to them.
	s.w = groupcommit.New[*sql.Tx](sqlTx{db, &s.ran, s}, groupcommit.Options{Batched: o.batched, Optimistic: true})
	s.ckpt = newCheckpointer(db, path, o.checkpointAt, s.w.Then, o.checkpointed)
	if err := s.Ping(ctx); err != nil {
		s.close()
		return nil, err
	}
	if o.migrate {
		if err := Migrate(ctx, db, "up", io.Discard); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// DB returns the underlying database, for migrations and tools.
func (s *Store) DB() *sql.DB { return s.db }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// Close stops the writer (once the batch under way is durable) and closes the database.
func (s *Store) Close() error { return s.close() }

func (s *Store) close() error {
	s.ckpt.interrupt() // a checkpoint holding the writer ends sooner
	s.w.Close()
	s.wc.drop()
	s.ckpt.close()
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmtMu.Unlock()
	return s.db.Close()
}

// Migrate applies ("up"), reverts the newest ("down") or lists ("status") the embedded
// migrations, writing what it did to out.
func Migrate(ctx context.Context, db *sql.DB, command string, out io.Writer) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	return migrate.Run(ctx, goose.DialectSQLite3, db, sub, command, out)
}

// write runs fn in a write transaction shared with the writes of other callers waiting at the
// same moment (group commit), and returns once that transaction is durable, or fn's error. fn
// must use the ctx it is given, not its caller's: a statement interrupted by its caller's context
// would roll back the whole shared transaction.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	return s.w.Do(ctx, fn)
}

// cachedTx runs the statements of the hot writes (a chat's, a run's events) as statements
// prepared once per connection: SQLite then parses and plans each statement once, not at each
// write. They run without the batch's cancellation (context.WithoutCancel): given a context that
// can end, the driver starts a goroutine and sets a progress handler for each statement, and
// these are single-row statements by key, which do not wait for anything once the write
// transaction holds SQLite's lock (BEGIN IMMEDIATE, under the batch's context). The batch's
// bound still applies to its beginning and to the other statements.
type cachedTx struct {
	s  *Store
	tx *sql.Tx
}

func (s *Store) cached(tx *sql.Tx) cachedTx { return cachedTx{s, tx} }

// stmt returns q prepared, bound to the transaction; nil if it cannot be prepared (the caller
// then runs q unprepared, which reports the error).
func (c cachedTx) stmt(ctx context.Context, q string) *sql.Stmt {
	s := c.s
	s.stmtMu.Lock()
	if s.txStmts.tx == c.tx {
		if st, ok := s.txStmts.m[q]; ok {
			s.stmtMu.Unlock()
			return st
		}
	}
	s.stmtMu.Unlock()
	st := s.prepared(ctx, q)
	if st == nil {
		return nil
	}
	// database/sql keeps one prepared copy per connection; the transaction's is reused. The
	// statement bound to the transaction is closed with it (commit or rollback).
	txst := c.tx.StmtContext(ctx, st)
	s.stmtMu.Lock()
	if s.txStmts.tx != c.tx { // the store's first statement in this transaction
		s.txStmts.tx, s.txStmts.m = c.tx, make(map[string]*sql.Stmt, 16)
	}
	s.txStmts.m[q] = txst
	s.stmtMu.Unlock()
	return txst
}

// prepared returns q prepared once for the store, nil if it cannot be prepared. database/sql
// prepares it on each connection the first time it runs there and keeps that copy, so SQLite
// parses and plans a hot statement once per connection instead of at each call. Only fixed query
// texts go here: the cache is never trimmed.
func (s *Store) prepared(ctx context.Context, q string) *sql.Stmt {
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	st, ok := s.stmts[q]
	if !ok {
		var err error
		if st, err = s.db.PrepareContext(ctx, q); err != nil {
			return nil
		}
		s.stmts[q] = st
	}
	return st
}

// queryRow runs the hot read q as a statement prepared once per connection (prepared).
func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	if st := s.prepared(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return s.db.QueryRowContext(ctx, q, args...)
}

// query runs the hot read q as a statement prepared once per connection (prepared).
func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := s.prepared(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return s.db.QueryContext(ctx, q, args...)
}

func (c cachedTx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	c.s.ran.Add(1)
	ctx = context.WithoutCancel(ctx)
	if st := c.stmt(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return c.tx.ExecContext(ctx, q, args...)
}

func (c cachedTx) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	c.s.ran.Add(1)
	ctx = context.WithoutCancel(ctx)
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return c.tx.QueryRowContext(ctx, q, args...)
}

func (c cachedTx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	c.s.ran.Add(1)
	ctx = context.WithoutCancel(ctx)
	if st := c.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return c.tx.QueryContext(ctx, q, args...)
}

// sqlTx is the group-commit writer's view of the database.
type sqlTx struct {
	db  *sql.DB
	ran *atomic.Int64 // Store.ran
	s   *Store        // Merge
}

func (d sqlTx) Begin(ctx context.Context) (*sql.Tx, error) {
	d.s.began = false
	tx, err := d.s.wc.begin(ctx, d.db)
	if err != nil {
		return nil, fmt.Errorf("sqlite: begin: %w", err)
	}
	return tx, nil
}

func (d sqlTx) Savepoint(ctx context.Context, tx *sql.Tx) error {
	d.ran.Add(1)
	return exec(ctx, tx, `SAVEPOINT op`)
}
func (d sqlTx) Release(ctx context.Context, tx *sql.Tx) error {
	d.ran.Add(1)
	return exec(ctx, tx, `RELEASE SAVEPOINT op`)
}
func (d sqlTx) Next(ctx context.Context, tx *sql.Tx) error {
	if err := d.Release(ctx, tx); err != nil {
		return err
	}
	return d.Savepoint(ctx, tx)
}
func (d sqlTx) RollbackTo(ctx context.Context, tx *sql.Tx) error {
	d.ran.Add(1)
	return exec(ctx, tx, `ROLLBACK TO SAVEPOINT op`)
}

func (d sqlTx) Commit(_ context.Context, tx *sql.Tx) error {
	err := tx.Commit()
	d.s.wc.end()
	if err != nil {
		return fmt.Errorf("sqlite: commit: %w", err)
	}
	d.s.ckpt.committed(d.s.began)
	return nil
}

func (d sqlTx) Rollback(tx *sql.Tx) {
	_ = tx.Rollback()
	d.s.wc.end()
}

func exec(ctx context.Context, tx *sql.Tx, q string) error {
	if _, err := tx.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("sqlite: %s: %w", q, err)
	}
	return nil
}

func micros(t time.Time) int64     { return t.UTC().UnixMicro() }
func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func notFound(kind, id string) error {
	return fmt.Errorf("%s %q: %w", kind, id, parley.ErrNotFound)
}

// CreateSession stores sess.
func (s *Store) CreateSession(ctx context.Context, sess *parley.Session) error {
	if err := checkSession(sess); err != nil {
		return err
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return s.createSession(ctx, tx, sess)
	})
}

func checkSession(sess *parley.Session) error {
	if sess.ID == "" || sess.CreatedAt.IsZero() || sess.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "session: id, created_at and updated_at are required")
	}
	return nil
}

// createSession is CreateSession's work inside a write transaction.
func (s *Store) createSession(ctx context.Context, tx *sql.Tx, sess *parley.Session) error {
	c := s.cached(tx)
	if sess.ProjectID != "" {
		if err := projectExists(ctx, tx, sess.ProjectID); err != nil {
			return err
		}
	}
	_, err := c.ExecContext(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id) VALUES (?, ?, ?, ?, ?, ?)`,
		sess.ID, sess.Title, sess.Owner, micros(sess.CreatedAt), micros(sess.UpdatedAt), nullable(sess.ProjectID))
	if err != nil {
		return fmt.Errorf("sqlite: creating session: %w", err)
	}
	return nil
}

const sessionCols = `id, title, owner, created_at, updated_at, prompt_tokens, completion_tokens, total_tokens,
	reasoning_tokens, cached_tokens, cost, COALESCE(project_id, ''), COALESCE(leaf_id, '')`

type scanner interface{ Scan(dest ...any) error }

func scanSession(r scanner) (*parley.Session, error) {
	var (
		sess     parley.Session
		cre, upd int64
	)
	u := &sess.Usage
	if err := r.Scan(&sess.ID, &sess.Title, &sess.Owner, &cre, &upd, &u.PromptTokens, &u.CompletionTokens, &u.TotalTokens,
		&u.ReasoningTokens, &u.CachedTokens, &u.Cost, &sess.ProjectID, &sess.LeafID); err != nil {
		return nil, err
	}
	sess.CreatedAt, sess.UpdatedAt = fromMicros(cre), fromMicros(upd)
	return &sess, nil
}

// GetSession returns the session with id.
func (s *Store) GetSession(ctx context.Context, id string) (*parley.Session, error) {
	sess, err := scanSession(s.queryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("session", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading session: %w", err)
	}
	return sess, nil
}

// ListSessions returns owner's sessions, most recently updated first.
func (s *Store) ListSessions(ctx context.Context, owner string, p parley.Page) ([]parley.Session, string, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = DefaultPageSize
	}
	limit = min(limit, MaxPageSize)
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE owner = ?`
	args := []any{owner}
	if p.Query != "" {
		// instr, not LIKE: the query's % and _ are plain characters. lower() folds ASCII only.
		q += ` AND instr(lower(title), lower(?)) > 0`
		args = append(args, p.Query)
	}
	if p.Project != "" {
		q += ` AND project_id = ?`
		args = append(args, p.Project)
	}
	if p.Cursor != "" {
		upd, id, err := rowcodec.DecodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += ` AND (updated_at, id) < (?, ?)`
		args = append(args, upd, id)
	}
	q += ` ORDER BY updated_at DESC, id DESC LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("sqlite: listing sessions: %w", err)
	}
	defer rows.Close()
	out := []parley.Session{}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, "", fmt.Errorf("sqlite: listing sessions: %w", err)
		}
		out = append(out, *sess)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("sqlite: listing sessions: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = rowcodec.EncodeCursor(micros(last.UpdatedAt), last.ID)
	}
	return out, next, nil
}

// RenameSession sets the session's title.
func (s *Store) RenameSession(ctx context.Context, id, title string, now time.Time) (*parley.Session, error) {
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?`, title, micros(now), id)
		if err != nil {
			return fmt.Errorf("sqlite: renaming session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("session", id)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.GetSession(ctx, id)
}

// DeleteSession deletes the session with its messages and resources. Its files go with it,
// unless it has forks (whose copied messages may refer to them): then they, and the session's
// place in the fork tree, pass to its oldest fork (handOver).
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := handOver(ctx, tx, id); err != nil {
			return err
		}
		// Messages first: they refer to the resources that go with them.
		if _, err := tx.ExecContext(ctx, `DELETE FROM messages WHERE session_id = ?`, id); err != nil {
			return fmt.Errorf("sqlite: deleting messages: %w", err)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("sqlite: deleting session: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return notFound("session", id)
		}
		return nil
	})
}

// handOver gives the files and artifacts (every version) of session id, which is about to be
// deleted, to its oldest fork (the heir), makes its other forks forks of the heir and the heir a
// fork of what id was forked from: a file or artifact then goes only with the last session of its
// fork tree, and the tree stays one tree. A session without forks hands nothing over.
func handOver(ctx context.Context, tx *sql.Tx, id string) error {
	var parent, heir sql.NullString
	err := tx.QueryRowContext(ctx, `SELECT forked_from, (SELECT f.id FROM sessions f WHERE f.forked_from = s.id
		ORDER BY f.created_at, f.id LIMIT 1) FROM sessions s WHERE s.id = ?`, id).Scan(&parent, &heir)
	if errors.Is(err, sql.ErrNoRows) {
		return notFound("session", id)
	}
	if err != nil {
		return fmt.Errorf("sqlite: finding the session's forks: %w", err)
	}
	if !heir.Valid {
		return nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE files SET session_id = ? WHERE session_id = ?`, heir.String, id); err != nil {
		return fmt.Errorf("sqlite: handing files to a fork: %w", err)
	}
	// The copied messages show the artifacts made before the fork by id: every version goes too.
	if _, err := tx.ExecContext(ctx, `UPDATE artifacts SET session_id = ? WHERE session_id = ?`, heir.String, id); err != nil {
		return fmt.Errorf("sqlite: handing artifacts to a fork: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET forked_from = CASE id WHEN ?1 THEN ?2 ELSE ?1 END
		WHERE forked_from = ?3`, heir.String, parent, id); err != nil {
		return fmt.Errorf("sqlite: re-parenting forks: %w", err)
	}
	return nil
}

// AppendMessages appends msgs to the session in one transaction.
func (s *Store) AppendMessages(ctx context.Context, sessionID string, msgs ...*parley.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	rows, err := messageRows(msgs)
	if err != nil {
		return err
	}
	var (
		last  int64
		links rowcodec.Links
	)
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		last, _, links, err = s.appendMessages(ctx, tx, sessionID, msgs, rows, eventSeqs{})
		return err
	})
	if err != nil {
		return err
	}
	setSeqs(sessionID, msgs, last, links)
	return nil
}

// messageRows validates msgs and returns their column values (messageRow).
func messageRows(msgs []*parley.Message) ([][]any, error) {
	rows := make([][]any, len(msgs))
	for i, m := range msgs {
		if err := rowcodec.Validate(i, m); err != nil {
			return nil, err
		}
		r, err := messageRow(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		rows[i] = r
	}
	return rows, nil
}

// eventSeqs is what a write of messages also does to the session's event numbers, in the
// statement that updates the session: reserve more (BeginRun), or give back those after last if
// limit is still the last one reserved (FinishRun, ReleaseEventSeqs).
type eventSeqs struct {
	reserve     int64
	release     bool
	limit, last int64
	// overlaps, if set, is filled by the read of the session's row with the event rows already
	// stored that overlap the events to store (FinishRun: a retried write), so that no
	// statement of its own reads them.
	overlaps *eventOverlaps
}

// eventOverlaps are the event numbers to store, first to last, and the rows already stored that
// overlap them ([first_seq, last_seq] each), as read with the session's row.
type eventOverlaps struct {
	first, last int64
	stored      [][2]int64
}

// readSession is appendMessages' read of the session's row; readSessionOverlaps reads the event
// rows that overlap the events to store as well (eventSeqs.overlaps), each as
// "first_seq,last_seq", joined by ";", or NULL if none.
const (
	readSession         = `SELECT leaf_id, last_seq, event_seq FROM sessions WHERE id = ?`
	readSessionOverlaps = `SELECT leaf_id, last_seq, event_seq, (SELECT group_concat(first_seq || ',' || last_seq, ';')
	FROM event_batches WHERE session_id = sessions.id AND first_seq <= ? AND last_seq >= ?) FROM sessions WHERE id = ?`
)

// parseRanges parses readSessionOverlaps' list of stored rows.
func parseRanges(list string) ([][2]int64, error) {
	var out [][2]int64
	for r := range strings.SplitSeq(list, ";") {
		a, b, ok := strings.Cut(r, ",")
		first, err1 := strconv.ParseInt(a, 10, 64)
		last, err2 := strconv.ParseInt(b, 10, 64)
		if !ok || err1 != nil || err2 != nil {
			return nil, fmt.Errorf("sqlite: reading the stored event rows: %q", list)
		}
		out = append(out, [2]int64{first, last})
	}
	return out, nil
}

// after returns the session's event_seq after e, from seq before.
func (e eventSeqs) after(seq int64) int64 {
	if e.release && seq == e.limit {
		seq = e.last
	}
	return seq + e.reserve
}

// updateSession is the session's part of a write of messages: one statement sets the last seq
// and the event numbers (read before in the same transaction: it is the only writer), totals the
// messages' usage, moves the leaf and touches the session. No RETURNING: SQLite runs one as a
// trigger, and a statement with one keeps a journal of its own of the pages it changes, which
// costs more than the read before.
const updateSession = `UPDATE sessions SET last_seq = ?, event_seq = ?, updated_at = MAX(updated_at, ?),
	prompt_tokens = prompt_tokens + ?, completion_tokens = completion_tokens + ?, total_tokens = total_tokens + ?,
	reasoning_tokens = reasoning_tokens + ?, cached_tokens = cached_tokens + ?, cost = cost + ?,
	open_calls = MAX(0, open_calls + ?), leaf_id = ?, branched = MAX(branched, ?)
	WHERE id = ?`

// appendMessages is AppendMessages' work inside a write transaction, with ev done to the
// session's event numbers in the same statement: it returns the last seq, the session's event_seq
// after ev and the messages' parents.
func (s *Store) appendMessages(ctx context.Context, tx *sql.Tx, sessionID string, msgs []*parley.Message, rows [][]any, ev eventSeqs) (int64, int64, rowcodec.Links, error) {
	c := s.cached(tx)
	var (
		links     rowcodec.Links
		leaf      sql.NullString
		last, seq int64
	)
	// The session's leaf is the parent of the first message, unless it names its own.
	var err error
	if o := ev.overlaps; o == nil {
		err = c.QueryRowContext(ctx, readSession, sessionID).Scan(&leaf, &last, &seq)
	} else {
		var stored sql.NullString
		err = c.QueryRowContext(ctx, readSessionOverlaps, o.last, o.first, sessionID).Scan(&leaf, &last, &seq, &stored)
		if err == nil && stored.Valid {
			o.stored, err = parseRanges(stored.String)
		}
	}
	if errors.Is(err, sql.ErrNoRows) {
		return 0, 0, links, notFound("session", sessionID)
	}
	if err != nil {
		return 0, 0, links, fmt.Errorf("sqlite: appending messages: %w", err)
	}
	links = rowcodec.LinkParents(msgs, leaf.String)
	if err := checkParents(ctx, c, sessionID, links.Outside); err != nil {
		return 0, 0, links, err
	}
	if err := insertMessages(ctx, c, sessionID, last+1, rows, links.Parents); err != nil {
		return 0, 0, links, err
	}
	last, seq = last+int64(len(msgs)), ev.after(seq)
	total := rowcodec.TotalUsage(msgs)
	_, err = c.ExecContext(ctx, updateSession, last, seq, micros(msgs[len(msgs)-1].CreatedAt),
		total.PromptTokens, total.CompletionTokens, total.TotalTokens, total.ReasoningTokens, total.CachedTokens, total.Cost,
		rowcodec.OpenCallsDelta(msgs), msgs[len(msgs)-1].ID, links.Branches, sessionID)
	if err != nil {
		return 0, 0, links, fmt.Errorf("sqlite: appending messages: %w", err)
	}
	return last, seq, links, nil
}

// insertMessage inserts a message at a seq and parent given (insertMessages).
const insertMessage = `INSERT INTO messages (id, session_id, seq, role, content, parts, name, tool_calls,
	tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error,
	parent_id)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// messageArgs are the parameters of insertMessage for a message's row (messageRow).
func messageArgs(r []any, sessionID string, seq int64, parent any) []any {
	return appendMessageArgs(make([]any, 0, len(r)+3), r, sessionID, seq, parent, false)
}

// plainMessageCols are the columns of a plain message (plainMessage): the others are NULL. A
// chat's messages are plain (a user's question, an answer with its usage, a tool's result
// without success, resource or server): its merged inserts (Store.merge) bind 11 parameters a
// message instead of 21.
const plainMessageCols = `id, session_id, seq, role, content, run_id, model, latency_ms, usage, created_at, parent_id`

// plainOmits are the indexes in a message's row (messageRow) of the columns plainMessageCols
// leave out.
var plainOmits = [...]int{3, 4, 5, 6, 7, 12, 13, 15, 16, 17}

// plainMessage reports whether the message of row r (messageRow) is NULL in every column that
// plainMessageCols leave out.
func plainMessage(r []any) bool {
	for _, i := range plainOmits {
		if r[i] != nil {
			return false
		}
	}
	return true
}

// appendMessageArgs appends to args the parameters of a message's row r (messageRow): those of
// insertMessage, or if plain (plainMessage(r)), those of plainMessageCols.
func appendMessageArgs(args, r []any, sessionID string, seq int64, parent any, plain bool) []any {
	if plain {
		return append(args, r[0], sessionID, seq, r[1], r[2], r[8], r[9], r[10], r[11], r[14], parent)
	}
	args = append(args, r[0], sessionID, seq)
	args = append(args, r[1:]...)
	return append(args, parent)
}

// setSeqs numbers msgs, stored with last as the last seq, and sets their parents.
func setSeqs(sessionID string, msgs []*parley.Message, last int64, links rowcodec.Links) {
	first := last - int64(len(msgs)) + 1
	for i, m := range msgs {
		m.Seq, m.SessionID, m.ParentID = first+int64(i), sessionID, links.Parents[i]
	}
}

// insertMessages inserts the message rows (messageRow) with seqs from first on and their parents.
func insertMessages(ctx context.Context, c cachedTx, sessionID string, first int64, rows [][]any, parents []string) error {
	for i, r := range rows {
		if _, err := c.ExecContext(ctx, insertMessage, messageArgs(r, sessionID, first+int64(i), nullStr(parents[i]))...); err != nil {
			return fmt.Errorf("sqlite: appending message %d: %w", i, err)
		}
	}
	return nil
}

// messageRow returns the column values of m, without session_id and seq.
func messageRow(m *parley.Message) ([]any, error) {
	c, err := rowcodec.Encode(m)
	if err != nil {
		return nil, err
	}
	var success any
	if m.Success != nil {
		success = 0
		if *m.Success {
			success = 1
		}
	}
	return []any{m.ID, string(m.Role), c.Text, c.Parts, nullStr(m.Name), c.ToolCalls, nullStr(m.ToolCallID),
		nullStr(m.Reasoning), nullStr(m.RunID), nullStr(m.Model), m.LatencyMS, c.Usage, success,
		nullStr(m.ResourceID), micros(m.CreatedAt), c.Thinking, nullStr(m.Server), nullStr(string(m.Error))}, nil
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const messageCols = `id, session_id, seq, role, content, parts, name, tool_calls, tool_call_id, reasoning, run_id,
	model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error, parent_id`

func scanMessage(r scanner) (parley.Message, error) {
	var (
		m                             parley.Message
		role                          string
		text, name, callID, reasoning sql.NullString
		run, model, resource, server  sql.NullString
		failed, parent                sql.NullString
		parts, calls, usage, thinking sql.RawBytes
		latency, success              sql.NullInt64
		created                       int64
	)
	if err := r.Scan(&m.ID, &m.SessionID, &m.Seq, &role, &text, &parts, &name, &calls, &callID, &reasoning, &run,
		&model, &latency, &usage, &success, &resource, &created, &thinking, &server, &failed, &parent); err != nil {
		return m, err
	}
	if err := decodeOpenAI(&m, role, text, name, callID, reasoning, parts, calls, usage, thinking); err != nil {
		return m, err
	}
	if success.Valid {
		ok := success.Int64 == 1
		m.Success = &ok
	}
	m.RunID, m.Model, m.ResourceID, m.Server, m.LatencyMS = run.String, model.String, resource.String, server.String, latency.Int64
	m.Error = parley.ErrorCode(failed.String)
	m.ParentID = parent.String
	m.CreatedAt = fromMicros(created)
	return m, nil
}

// decodeOpenAI fills the OpenAI fields of m (and its usage) from their columns.
func decodeOpenAI(m *parley.Message, role string, text, name, callID, reasoning sql.NullString, parts, calls, usage, thinking []byte) error {
	m.Role = parley.Role(role)
	if text.Valid {
		m.Content = parley.Text(text.String)
	}
	m.Name, m.ToolCallID, m.Reasoning = name.String, callID.String, reasoning.String
	if err := rowcodec.DecodeThinking(m, thinking); err != nil {
		return err
	}
	return rowcodec.DecodeJSON(m, parts, calls, usage)
}

// ModelHistory returns the active branch's messages with only the fields a model is sent and the
// mark of a failed turn (parley.Message.ModelView).
func (s *Store) ModelHistory(ctx context.Context, sessionID string) ([]parley.Message, error) {
	h, _, err := s.ModelBranch(ctx, sessionID, "")
	return h, err
}

// OwnerUsage totals the token usage of owner's sessions.
func (s *Store) OwnerUsage(ctx context.Context, owner string) (parley.Usage, error) {
	var u parley.Usage
	err := s.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),
		COALESCE(SUM(total_tokens), 0), COALESCE(SUM(reasoning_tokens), 0), COALESCE(SUM(cached_tokens), 0),
		COALESCE(SUM(cost), 0)
		FROM sessions WHERE owner = ?`, owner).
		Scan(&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens, &u.ReasoningTokens, &u.CachedTokens, &u.Cost)
	if err != nil {
		return u, fmt.Errorf("sqlite: totalling usage: %w", err)
	}
	return u, nil
}

// SessionsWithOpenToolCalls returns sessions with tool calls that no tool message answers.
func (s *Store) SessionsWithOpenToolCalls(ctx context.Context, afterID string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM sessions WHERE open_calls > 0 AND id > ?
		AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.session_id = sessions.id AND runs.state = 'running') ORDER BY id LIMIT ?`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: finding open tool calls: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("sqlite: finding open tool calls: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// ListMessages returns up to limit messages of the active branch with seq > afterSeq.
func (s *Store) ListMessages(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]parley.Message, error) {
	if limit <= 0 {
		limit = DefaultPageSize
	}
	msgs, _, err := s.ListBranch(ctx, sessionID, "", afterSeq, limit)
	return msgs, err
}

// History returns all of the active branch's messages, in order.
func (s *Store) History(ctx context.Context, sessionID string) ([]parley.Message, error) {
	msgs, _, err := s.ListBranch(ctx, sessionID, "", 0, 0)
	return msgs, err
}

func (s *Store) queryMessages(ctx context.Context, q string, args ...any) ([]parley.Message, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading messages: %w", err)
	}
	defer rows.Close()
	out := []parley.Message{}
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: reading messages: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: reading messages: %w", err)
	}
	return out, nil
}

// PutResource stores r.
func (s *Store) PutResource(ctx context.Context, r *parley.Resource) error {
	meta, err := rowcodec.ResourceMeta(r)
	if err != nil {
		return err
	}
	return s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, r.SessionID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("session", r.SessionID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: storing resource: %w", err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO resources (id, session_id, kind, uri, meta, created_at) VALUES (?, ?, ?, ?, ?, ?)`,
			r.ID, r.SessionID, r.Kind, r.URI, meta, micros(r.CreatedAt))
		if err != nil {
			return fmt.Errorf("sqlite: storing resource: %w", err)
		}
		return nil
	})
}

// GetResource returns the resource with id.
func (s *Store) GetResource(ctx context.Context, id string) (*parley.Resource, error) {
	var (
		r       parley.Resource
		meta    sql.NullString
		created int64
	)
	err := s.db.QueryRowContext(ctx, `SELECT id, session_id, kind, uri, meta, created_at FROM resources WHERE id = ?`, id).
		Scan(&r.ID, &r.SessionID, &r.Kind, &r.URI, &meta, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("resource", id)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading resource: %w", err)
	}
	if meta.Valid {
		r.Meta = json.RawMessage(meta.String)
	}
	r.CreatedAt = fromMicros(created)
	return &r, nil
}
