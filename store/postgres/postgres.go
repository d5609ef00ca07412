// Package postgres is Parley's Store on PostgreSQL, for deployments that outgrow one SQLite file
// or run several instances. It uses pgx/v5 with a connection pool; tool calls, parts, usage and
// resource metadata are JSONB. Migrations are goose files embedded in the binary.
package postgres

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

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

// Store is a parley.Store on a PostgreSQL database.
type Store struct {
	pool *pgxpool.Pool
	// w batches the writes of a chat's path (sessions, messages, runs, event numbers, events,
	// the tool-call ledger) of concurrent callers into one transaction: one commit, one WAL
	// flush, one pooled connection for the lot.
	w *groupcommit.Writer[pgx.Tx]

	// betweenBranchReads, when set (tests), is called between ListBranch's two reads of a
	// branched session: the branch's tip, then its messages.
	betweenBranchReads func()
	// hints: where the answers of the runs under way will go (hints.go)
	hints answerHints
}

var _ parley.Store = (*Store)(nil)

type options struct {
	migrate bool
	batched func(n int, err error) // tests: told the size of each group-commit batch
	writers int                    // tests: transactions written at once (default: half the pool)
	crowd   int                    // benchmarks: groupcommit.Options.Crowd (default 0: off)
	// tests and benchmarks: changes the pool's configuration (to count round trips, to know
	// the backends' process ids)
	configure func(*pgxpool.Config)
}

// Option configures Open.
type Option func(*options)

// WithoutMigrate opens the database without applying pending migrations.
func WithoutMigrate() Option { return func(o *options) { o.migrate = false } }

// Open connects to the database at url (postgres://user@host:port/db?sslmode=…; a search_path
// parameter selects the schema) and applies pending migrations.
func Open(ctx context.Context, url string, opts ...Option) (*Store, error) {
	o := options{migrate: true}
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The error may quote the URL, password included: say only what kind of error it is.
		return nil, errors.New("postgres: the database URL cannot be parsed (want postgres://user:password@host:port/database)")
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if o.configure != nil {
		o.configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{pool: pool}
	// Half the pool writes, a batch per connection, so that reads always find a connection.
	if o.writers <= 0 {
		o.writers = max(1, int(cfg.MaxConns)/2)
	}
	// Optimistic: a savepoint is a statement and a subtransaction on PostgreSQL; a batch sets
	// them only when one of its writes failed. MergeAlone: a lone write while the other writer's
	// batch runs sends its merged statements with its COMMIT (one round trip), where its own take
	// two or three.
	s.w = groupcommit.New[pgx.Tx](pgTx{pool}, groupcommit.Options{Batched: o.batched, Writers: o.writers, Retry: isTransient,
		Optimistic: true, MergeAlone: true, Crowd: o.crowd})
	if err := s.Ping(ctx); err != nil {
		s.w.Close()
		pool.Close()
		return nil, err
	}
	if err := s.checkSchema(ctx, cfg.ConnConfig.RuntimeParams["search_path"]); err != nil {
		s.w.Close()
		pool.Close()
		return nil, err
	}
	if o.migrate {
		db := s.DB()
		err := Migrate(ctx, db, "up", io.Discard)
		db.Close()
		if err != nil {
			s.w.Close()
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

// checkSchema makes sure a schema that search_path names exists: without one PostgreSQL only
// says, at the first table, that no schema has been selected to create in. The error names the
// schema and the statement that creates it.
func (s *Store) checkSchema(ctx context.Context, searchPath string) error {
	if strings.TrimSpace(searchPath) == "" {
		return nil
	}
	var exists bool
	if err := s.pool.QueryRow(ctx, `SELECT current_schema() IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("postgres: reading the current schema: %w", err)
	}
	if exists {
		return nil
	}
	name := strings.Trim(strings.TrimSpace(strings.Split(searchPath, ",")[0]), `"`)
	return fmt.Errorf("postgres: the schema %q that search_path names does not exist in this database; create it first "+
		"(psql: CREATE SCHEMA %s;) or leave search_path out of the database URL to use the schema public",
		name, pgx.Identifier{name}.Sanitize())
}

// Pool returns the connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// DB returns a database/sql handle on the pool, for migrations and tools. Closing it leaves the
// pool open.
func (s *Store) DB() *sql.DB { return stdlib.OpenDBFromPool(s.pool) }

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// Close stops the writer (once the batch under way is durable) and closes the pool.
func (s *Store) Close() error {
	s.w.Close()
	s.pool.Close()
	return nil
}

// Migrate applies ("up"), reverts the newest ("down") or lists ("status") the embedded
// migrations, writing what it did to out.
func Migrate(ctx context.Context, db *sql.DB, command string, out io.Writer) error {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	return migrate.Run(ctx, goose.DialectPostgres, db, sub, command, out)
}

// write runs fn in a transaction shared with the writes of other callers waiting at the same
// moment (group commit), and returns once it is committed, or fn's error. fn must use the ctx it
// is given: a query cancelled by its caller's context would make pgx close the connection.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.w.Do(ctx, fn)
}

// writeFor is write for a write that locks the rows of one session: a batch takes its sessions'
// locks in the order of their ids, so that batches written at once on two connections do not
// deadlock over them (groupcommit.Writer.DoKey).
func (s *Store) writeFor(ctx context.Context, sessionID string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	return s.w.DoKey(ctx, sessionID, fn)
}

// pgTx is the group-commit writer's view of the database. Its transactions are pipelined
// (pipeTx): BEGIN, the savepoints around each write and their releases go to the server with the
// next statement instead of a round trip each, and the last of them with COMMIT.
type pgTx struct{ pool *pgxpool.Pool }

func (d pgTx) Begin(ctx context.Context) (pgx.Tx, error) {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: begin: %w", err)
	}
	return &pipeTx{conn: conn}, nil // BEGIN goes with the first statement
}

func (pgTx) Savepoint(_ context.Context, tx pgx.Tx) error { return tx.(*pipeTx).queue(`SAVEPOINT op`) }
func (pgTx) Release(_ context.Context, tx pgx.Tx) error {
	return tx.(*pipeTx).queue(`RELEASE SAVEPOINT op`)
}
func (pgTx) Next(_ context.Context, tx pgx.Tx) error {
	return tx.(*pipeTx).queue(`RELEASE SAVEPOINT op`, `SAVEPOINT op`)
}
func (pgTx) RollbackTo(ctx context.Context, tx pgx.Tx) error { return tx.(*pipeTx).rollbackTo(ctx) }

func (pgTx) Commit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		if b, ok := err.(*errBroken); ok && b.own { // a write's own statement, held (holdFirst)
			return err
		}
		return fmt.Errorf("postgres: commit: %w", err)
	}
	return nil
}

func (pgTx) Rollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

func notFound(kind, id string) error {
	return fmt.Errorf("%s %q: %w", kind, id, parley.ErrNotFound)
}

// isTransient reports whether err is a deadlock or a serialization failure: batches written at
// once on two connections may lock the same sessions' rows in opposite orders, and PostgreSQL
// then fails one statement; run again after its batch-mates committed, it goes through.
func isTransient(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// isFKViolation reports whether err is a foreign key violation.
func isFKViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23503"
}

// CreateSession stores sess.
func (s *Store) CreateSession(ctx context.Context, sess *parley.Session) error {
	if err := checkSession(sess); err != nil {
		return err
	}
	return s.writeFor(ctx, sess.ID, func(ctx context.Context, tx pgx.Tx) error {
		return createSession(ctx, tx, sess)
	})
}

func checkSession(sess *parley.Session) error {
	if sess.ID == "" || sess.CreatedAt.IsZero() || sess.UpdatedAt.IsZero() {
		return parley.Errorf(parley.ECInvalid, "session: id, created_at and updated_at are required")
	}
	return nil
}

// createSession is CreateSession's work inside a transaction.
func createSession(ctx context.Context, tx pgx.Tx, sess *parley.Session) error {
	_, err := tx.Exec(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id) VALUES ($1, $2, $3, $4, $5, $6)`,
		sess.ID, sess.Title, sess.Owner, sess.CreatedAt.UTC(), sess.UpdatedAt.UTC(), nullable(sess.ProjectID))
	if isFKViolation(err) {
		return notFound("project", sess.ProjectID)
	}
	if err != nil {
		return fmt.Errorf("postgres: creating session: %w", err)
	}
	return nil
}

const sessionCols = `id, title, owner, created_at, updated_at, prompt_tokens, completion_tokens, total_tokens,
	reasoning_tokens, cached_tokens, cost, COALESCE(project_id, ''), COALESCE(leaf_id, '')`

func scanSession(r pgx.Row) (*parley.Session, error) {
	var sess parley.Session
	u := &sess.Usage
	if err := r.Scan(&sess.ID, &sess.Title, &sess.Owner, &sess.CreatedAt, &sess.UpdatedAt, &u.PromptTokens,
		&u.CompletionTokens, &u.TotalTokens, &u.ReasoningTokens, &u.CachedTokens, &u.Cost, &sess.ProjectID, &sess.LeafID); err != nil {
		return nil, err
	}
	sess.CreatedAt, sess.UpdatedAt = sess.CreatedAt.UTC(), sess.UpdatedAt.UTC()
	return &sess, nil
}

// GetSession returns the session with id.
func (s *Store) GetSession(ctx context.Context, id string) (*parley.Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `SELECT `+sessionCols+` FROM sessions WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading session: %w", err)
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
	q := `SELECT ` + sessionCols + ` FROM sessions WHERE owner = $1`
	args := []any{owner}
	if p.Query != "" {
		// strpos, not LIKE: the query's % and _ are plain characters.
		args = append(args, p.Query)
		q += fmt.Sprintf(` AND strpos(lower(title), lower($%d)) > 0`, len(args))
	}
	if p.Project != "" {
		args = append(args, p.Project)
		q += fmt.Sprintf(` AND project_id = $%d`, len(args))
	}
	if p.Cursor != "" {
		upd, id, err := rowcodec.DecodeCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		// A row-value comparison walks the (owner, updated_at DESC, id DESC) index from the cursor on.
		args = append(args, time.UnixMicro(upd).UTC(), id)
		q += fmt.Sprintf(` AND (updated_at, id) < ($%d, $%d)`, len(args)-1, len(args))
	}
	q += fmt.Sprintf(` ORDER BY updated_at DESC, id DESC LIMIT %d`, limit+1)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, "", fmt.Errorf("postgres: listing sessions: %w", err)
	}
	defer rows.Close()
	out := []parley.Session{}
	for rows.Next() {
		sess, err := scanSession(rows)
		if err != nil {
			return nil, "", fmt.Errorf("postgres: listing sessions: %w", err)
		}
		out = append(out, *sess)
	}
	if err := rows.Err(); err != nil {
		return nil, "", fmt.Errorf("postgres: listing sessions: %w", err)
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		last := out[limit-1]
		next = rowcodec.EncodeCursor(last.UpdatedAt.UnixMicro(), last.ID)
	}
	return out, next, nil
}

// RenameSession sets the session's title.
func (s *Store) RenameSession(ctx context.Context, id, title string, now time.Time) (*parley.Session, error) {
	sess, err := scanSession(s.pool.QueryRow(ctx, `UPDATE sessions SET title = $1, updated_at = $2 WHERE id = $3
		RETURNING `+sessionCols, title, now.UTC(), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("session", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: renaming session: %w", err)
	}
	return sess, nil
}

// DeleteSession deletes the session with its messages and resources. Its files go with it,
// unless it has forks (whose copied messages may refer to them): then they, and the session's
// place in the fork tree, pass to its oldest fork (handOver).
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := handOver(ctx, tx, id); err != nil {
			return err
		}
		// Messages first: they refer to the resources that go with them.
		if _, err := tx.Exec(ctx, `DELETE FROM messages WHERE session_id = $1`, id); err != nil {
			return fmt.Errorf("postgres: deleting messages: %w", err)
		}
		tag, err := tx.Exec(ctx, `DELETE FROM sessions WHERE id = $1`, id)
		if err != nil {
			return fmt.Errorf("postgres: deleting session: %w", err)
		}
		if tag.RowsAffected() == 0 {
			return notFound("session", id)
		}
		return nil
	})
}

// lockForks takes the transaction-scoped lock on the fork trees of the owner of session id
// (forks are made by the owner of the session forked): Fork and DeleteSession take it, so that a
// deletion sees every fork committed before it and a fork is not made of a session being
// deleted. It is ECNotFound if the session does not exist. The statement that takes the lock
// reads the session as it was before waiting for it: the caller reads it again after (a
// session deleted meanwhile is gone then).
func lockForks(ctx context.Context, tx pgx.Tx, id string) error {
	tag, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('parley-forks:' || owner, 0)) FROM sessions WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("postgres: locking the fork tree: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return notFound("session", id)
	}
	return nil
}

// handOver gives the files and artifacts (every version) of session id, which is about to be
// deleted, to its oldest fork (the heir), makes its other forks forks of the heir and the heir a
// fork of what id was forked from: a file or artifact then goes only with the last session of its
// fork tree, and the tree stays one tree. A session without forks hands nothing over.
func handOver(ctx context.Context, tx pgx.Tx, id string) error {
	if err := lockForks(ctx, tx, id); err != nil {
		return err
	}
	var parent, heir *string
	err := tx.QueryRow(ctx, `SELECT forked_from, (SELECT f.id FROM sessions f WHERE f.forked_from = s.id
		ORDER BY f.created_at, f.id LIMIT 1) FROM sessions s WHERE s.id = $1`, id).Scan(&parent, &heir)
	if errors.Is(err, pgx.ErrNoRows) {
		return notFound("session", id)
	}
	if err != nil {
		return fmt.Errorf("postgres: finding the session's forks: %w", err)
	}
	if heir == nil {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE files SET session_id = $1 WHERE session_id = $2`, *heir, id); err != nil {
		return fmt.Errorf("postgres: handing files to a fork: %w", err)
	}
	// The copied messages show the artifacts made before the fork by id: every version goes too.
	if _, err := tx.Exec(ctx, `UPDATE artifacts SET session_id = $1 WHERE session_id = $2`, *heir, id); err != nil {
		return fmt.Errorf("postgres: handing artifacts to a fork: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE sessions SET forked_from = CASE id WHEN $1 THEN $2 ELSE $1 END
		WHERE forked_from = $3`, *heir, parent, id); err != nil {
		return fmt.Errorf("postgres: re-parenting forks: %w", err)
	}
	return nil
}

const insertMessage = `INSERT INTO messages (id, session_id, seq, role, content, parts, name, tool_calls,
	tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error,
	parent_id)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21)`

// AppendMessages appends msgs to the session in one transaction.
func (s *Store) AppendMessages(ctx context.Context, sessionID string, msgs ...*parley.Message) error {
	if len(msgs) == 0 {
		return nil
	}
	cols, err := encodeMessages(msgs)
	if err != nil {
		return err
	}
	var (
		last  int64
		links rowcodec.Links
	)
	s.hints.forget(sessionID) // the answer of a run under way goes after these
	err = s.writeFor(ctx, sessionID, func(ctx context.Context, tx pgx.Tx) (err error) {
		last, links, err = appendMessages(ctx, tx, sessionID, msgs, cols)
		return err
	})
	if err != nil {
		return err
	}
	setSeqs(sessionID, msgs, last, links)
	return nil
}

// encodeMessages validates msgs and encodes their columns.
func encodeMessages(msgs []*parley.Message) ([]rowcodec.Columns, error) {
	cols := make([]rowcodec.Columns, len(msgs))
	for i, m := range msgs {
		if err := rowcodec.Validate(i, m); err != nil {
			return nil, err
		}
		c, err := rowcodec.Encode(m)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		cols[i] = c
	}
	return cols, nil
}

// appendMessages is AppendMessages' work inside a transaction: it returns the last seq and the
// messages' parents.
func appendMessages(ctx context.Context, tx pgx.Tx, sessionID string, msgs []*parley.Message, cols []rowcodec.Columns) (int64, rowcodec.Links, error) {
	if chained(msgs) {
		return appendChain(ctx, tx, sessionID, msgs, cols)
	}
	total := rowcodec.TotalUsage(msgs)
	var (
		last  int64
		links rowcodec.Links
	)
	// One statement locks the session's row until commit, reserves the seqs, totals the usage,
	// moves the leaf and touches the session, and returns the leaf it had: the parent of the
	// first message, unless that names its own. No row means no session.
	var leaf pgtype.Text
	err := tx.QueryRow(ctx, `WITH old AS (SELECT leaf_id FROM sessions WHERE id = $10 FOR UPDATE)
		UPDATE sessions SET last_seq = last_seq + $1, updated_at = GREATEST(updated_at, $2),
		prompt_tokens = prompt_tokens + $3, completion_tokens = completion_tokens + $4, total_tokens = total_tokens + $5,
		reasoning_tokens = reasoning_tokens + $6, cached_tokens = cached_tokens + $7, cost = cost + $8,
		open_calls = GREATEST(0, open_calls + $9), leaf_id = $11
		FROM old WHERE sessions.id = $10 RETURNING last_seq, old.leaf_id`,
		len(msgs), msgs[len(msgs)-1].CreatedAt.UTC(), total.PromptTokens, total.CompletionTokens, total.TotalTokens,
		total.ReasoningTokens, total.CachedTokens, total.Cost, rowcodec.OpenCallsDelta(msgs), sessionID,
		msgs[len(msgs)-1].ID).Scan(&last, &leaf)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, links, notFound("session", sessionID)
	}
	if err != nil {
		return 0, links, fmt.Errorf("postgres: appending messages: %w", err)
	}
	links = rowcodec.LinkParents(msgs, leaf.String)
	if err := checkParents(ctx, tx, sessionID, links.Outside); err != nil {
		return 0, links, err
	}
	b := &pgx.Batch{}
	queueMessages(b, sessionID, last-int64(len(msgs))+1, msgs, cols, links.Parents)
	if links.Branches {
		b.Queue(`UPDATE sessions SET branched = true WHERE id = $1 AND NOT branched`, sessionID)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, links, fmt.Errorf("postgres: appending messages: %w", err)
	}
	return last, links, nil
}

// setSeqs numbers msgs, stored with last as the last seq, and sets their parents.
func setSeqs(sessionID string, msgs []*parley.Message, last int64, links rowcodec.Links) {
	first := last - int64(len(msgs)) + 1
	for i, m := range msgs {
		m.Seq, m.SessionID, m.ParentID = first+int64(i), sessionID, links.Parents[i]
	}
}

// queueMessages queues the inserts of msgs (cols their encoded columns) with seqs from first on
// and their parents.
func queueMessages(b *pgx.Batch, sessionID string, first int64, msgs []*parley.Message, cols []rowcodec.Columns, parents []string) {
	for i, m := range msgs {
		b.Queue(insertMessage, messageArgs(m, cols[i], sessionID, first+int64(i), nullStr(parents[i]))...)
	}
}

// messageArgs are the arguments of insertMessage (and insertChained) for m.
func messageArgs(m *parley.Message, c rowcodec.Columns, sessionID string, seq int64, parent any) []any {
	var success any
	if m.Success != nil {
		success = *m.Success
	}
	return []any{m.ID, sessionID, seq, string(m.Role), c.Text, c.Parts, nullStr(m.Name),
		c.ToolCalls, nullStr(m.ToolCallID), nullStr(m.Reasoning), nullStr(m.RunID), nullStr(m.Model),
		m.LatencyMS, c.Usage, success, nullStr(m.ResourceID), m.CreatedAt.UTC(), c.Thinking, nullStr(m.Server), nullStr(string(m.Error)),
		parent}
}

// insertChained inserts a message that extends the session's chain: its seq is $3 after the
// session's last, its parent $21 or else the session's leaf; it returns its parent. Both are read
// under the session's row lock, which the transaction then holds: FOR UPDATE waits for a writer
// that holds it and reads the row as that writer committed it (the statement's snapshot, taken
// before, would give the leaf it replaced). No session: seq is NULL and the insert fails
// (not_null_violation).
const insertChained = `INSERT INTO messages (id, session_id, seq, role, content, parts, name, tool_calls,
	tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error,
	parent_id)
	VALUES ($1, $2, (SELECT last_seq FROM sessions WHERE id = $2 FOR UPDATE) + $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
	$14, $15, $16, $17, $18, $19, $20, COALESCE($21, (SELECT leaf_id FROM sessions WHERE id = $2 FOR UPDATE)))
	RETURNING parent_id`

// appendChain is appendMessages for messages none of which names its parent (a chat's turn):
// each extends the chain, so that nothing need be read before they are written. The inserts and
// the session's update go in one batch, one round trip, where appendMessages takes two.
func appendChain(ctx context.Context, tx pgx.Tx, sessionID string, msgs []*parley.Message, cols []rowcodec.Columns) (int64, rowcodec.Links, error) {
	return appendChainReleasing(ctx, tx, sessionID, msgs, cols, nil)
}

// appendChainReleasing is appendChain that also gives back the event numbers of rel, if not nil
// (queueChainReleasing).
func appendChainReleasing(ctx context.Context, tx pgx.Tx, sessionID string, msgs []*parley.Message, cols []rowcodec.Columns, rel *release) (int64, rowcodec.Links, error) {
	b := &pgx.Batch{}
	queueChainReleasing(b, sessionID, msgs, cols, rel)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	last, links, err := readChain(br, sessionID, msgs)
	if err != nil {
		return 0, links, err
	}
	if err := br.Close(); err != nil {
		return 0, links, fmt.Errorf("postgres: appending messages: %w", err)
	}
	return last, links, nil
}

// queueChain queues appendChain's statements: the inserts, then the session's update.
func queueChain(b *pgx.Batch, sessionID string, msgs []*parley.Message, cols []rowcodec.Columns) {
	queueChainReleasing(b, sessionID, msgs, cols, nil)
}

// release is what ReleaseEventSeqs is given: the numbers after Last go back if Limit is still the
// last one reserved.
type release struct{ Limit, Last int64 }

// queueChainReleasing is queueChain that also gives back the event numbers of rel, if not nil, in
// the same update of the session's row (one statement and one row version fewer than
// releaseEventSeqs after it).
func queueChainReleasing(b *pgx.Batch, sessionID string, msgs []*parley.Message, cols []rowcodec.Columns, rel *release) {
	if len(msgs) == 1 { // one statement
		m, total := msgs[0], rowcodec.TotalUsage(msgs)
		args := append(messageArgs(m, cols[0], sessionID, 1, nil), total.PromptTokens, total.CompletionTokens, total.TotalTokens,
			total.ReasoningTokens, total.CachedTokens, total.Cost, rowcodec.OpenCallsDelta(msgs))
		if rel == nil {
			b.Queue(insertOneChained, args...)
		} else {
			b.Queue(insertOneChainedReleasing, append(args, rel.Limit, rel.Last)...)
		}
		return
	}
	for i, m := range msgs {
		var parent any
		if i > 0 {
			parent = msgs[i-1].ID
		}
		b.Queue(insertChained, messageArgs(m, cols[i], sessionID, int64(i+1), parent)...)
	}
	total := rowcodec.TotalUsage(msgs)
	args := []any{len(msgs), msgs[len(msgs)-1].CreatedAt.UTC(), total.PromptTokens, total.CompletionTokens, total.TotalTokens,
		total.ReasoningTokens, total.CachedTokens, total.Cost, rowcodec.OpenCallsDelta(msgs), sessionID,
		msgs[len(msgs)-1].ID}
	if rel == nil {
		b.Queue(updateChain+` WHERE id = $10 RETURNING last_seq`, args...)
		return
	}
	b.Queue(updateChain+`, event_seq = CASE WHEN event_seq = $12 THEN $13 ELSE event_seq END WHERE id = $10 RETURNING last_seq`,
		append(args, rel.Limit, rel.Last)...)
}

// insertOneChained is the statements of queueChain for one message in one: the session's row
// is locked and updated (its leaf read before), and the message inserted after that leaf with
// the seq the update took; it returns the message's parent and seq. Its arguments are those of
// insertChained ($3 = 1, $21 = NULL), then the message's usage ($22-$27) and the open calls it
// adds ($28). No session: seq is NULL and the insert fails (not_null_violation), as
// insertChained does.
const insertOneChained = `WITH old AS (SELECT leaf_id FROM sessions WHERE id = $2 FOR UPDATE),
	s AS (UPDATE sessions SET last_seq = last_seq + $3, updated_at = GREATEST(updated_at, $17),
		prompt_tokens = prompt_tokens + $22, completion_tokens = completion_tokens + $23, total_tokens = total_tokens + $24,
		reasoning_tokens = reasoning_tokens + $25, cached_tokens = cached_tokens + $26, cost = cost + $27,
		open_calls = GREATEST(0, open_calls + $28), leaf_id = $1` + oneChainedRest

// insertOneChainedReleasing is insertOneChained that also gives back event numbers in the same
// update ($29: the last number reserved, $30: the last used), as releaseEventSeqs does.
const insertOneChainedReleasing = `WITH old AS (SELECT leaf_id FROM sessions WHERE id = $2 FOR UPDATE),
	s AS (UPDATE sessions SET last_seq = last_seq + $3, updated_at = GREATEST(updated_at, $17),
		prompt_tokens = prompt_tokens + $22, completion_tokens = completion_tokens + $23, total_tokens = total_tokens + $24,
		reasoning_tokens = reasoning_tokens + $25, cached_tokens = cached_tokens + $26, cost = cost + $27,
		open_calls = GREATEST(0, open_calls + $28), leaf_id = $1,
		event_seq = CASE WHEN event_seq = $29 THEN $30 ELSE event_seq END` + oneChainedRest

const oneChainedRest = `
		FROM old WHERE sessions.id = $2 RETURNING sessions.last_seq, old.leaf_id)
	INSERT INTO messages (id, session_id, seq, role, content, parts, name, tool_calls,
	tool_call_id, reasoning, run_id, model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error,
	parent_id)
	VALUES ($1, $2, (SELECT last_seq FROM s), $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,
	$14, $15, $16, $17, $18, $19, $20, COALESCE($21, (SELECT leaf_id FROM s)))
	RETURNING parent_id, seq`

// updateChain is the session's update after messages that extend its chain, up to its WHERE.
const updateChain = `UPDATE sessions SET last_seq = last_seq + $1, updated_at = GREATEST(updated_at, $2),
		prompt_tokens = prompt_tokens + $3, completion_tokens = completion_tokens + $4, total_tokens = total_tokens + $5,
		reasoning_tokens = reasoning_tokens + $6, cached_tokens = cached_tokens + $7, cost = cost + $8,
		open_calls = GREATEST(0, open_calls + $9), leaf_id = $11`

// readChain reads the results of queueChain's statements: the last seq and the messages'
// parents.
func readChain(br pgx.BatchResults, sessionID string, msgs []*parley.Message) (int64, rowcodec.Links, error) {
	var (
		leaf, parent pgtype.Text
		last         int64
		links        rowcodec.Links
	)
	for i := range msgs {
		var err error
		if len(msgs) == 1 { // insertOneChained: the session's update is in it
			err = br.QueryRow().Scan(&parent, &last)
		} else {
			err = br.QueryRow().Scan(&parent)
		}
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23502" && pe.ColumnName == "seq" { // not_null_violation: no session
			return 0, links, notFound("session", sessionID)
		}
		if err != nil {
			return 0, links, fmt.Errorf("postgres: appending messages: %w", err)
		}
		if i == 0 {
			leaf = parent
		}
	}
	if len(msgs) > 1 {
		if err := br.QueryRow().Scan(&last); err != nil {
			return 0, links, fmt.Errorf("postgres: appending messages: %w", err)
		}
	}
	return last, rowcodec.LinkParents(msgs, leaf.String), nil
}

// chained reports whether none of msgs names its parent: each extends the chain.
func chained(msgs []*parley.Message) bool {
	return !slices.ContainsFunc(msgs, func(m *parley.Message) bool { return m.ParentID != "" })
}

func nullStr(s string) any {
	if s == "" {
		return nil
	}
	return s
}

const messageCols = `id, session_id, seq, role, content, parts, name, tool_calls, tool_call_id, reasoning, run_id,
	model, latency_ms, usage, success, resource_id, created_at, thinking_blocks, server, error, parent_id`

func scanMessage(r pgx.Row) (parley.Message, error) {
	var (
		m                             parley.Message
		role                          string
		text, name, callID, reasoning pgtype.Text
		run, model, resource, server  pgtype.Text
		failed, parent                pgtype.Text
		parts, calls, usage, thinking []byte
		latency                       pgtype.Int8
		success                       pgtype.Bool
	)
	if err := r.Scan(&m.ID, &m.SessionID, &m.Seq, &role, &text, &parts, &name, &calls, &callID, &reasoning, &run,
		&model, &latency, &usage, &success, &resource, &m.CreatedAt, &thinking, &server, &failed, &parent); err != nil {
		return m, err
	}
	if err := decodeOpenAI(&m, role, text, name, callID, reasoning, parts, calls, usage, thinking); err != nil {
		return m, err
	}
	if success.Valid {
		ok := success.Bool
		m.Success = &ok
	}
	m.RunID, m.Model, m.ResourceID, m.Server, m.LatencyMS = run.String, model.String, resource.String, server.String, latency.Int64
	m.Error = parley.ErrorCode(failed.String)
	m.ParentID = parent.String
	m.CreatedAt = m.CreatedAt.UTC()
	return m, nil
}

// decodeOpenAI fills the OpenAI fields of m (and its usage) from their columns.
func decodeOpenAI(m *parley.Message, role string, text, name, callID, reasoning pgtype.Text, parts, calls, usage, thinking []byte) error {
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
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(prompt_tokens), 0)::bigint, COALESCE(SUM(completion_tokens), 0)::bigint,
		COALESCE(SUM(total_tokens), 0)::bigint, COALESCE(SUM(reasoning_tokens), 0)::bigint, COALESCE(SUM(cached_tokens), 0)::bigint,
		COALESCE(SUM(cost), 0)::double precision
		FROM sessions WHERE owner = $1`, owner).
		Scan(&u.PromptTokens, &u.CompletionTokens, &u.TotalTokens, &u.ReasoningTokens, &u.CachedTokens, &u.Cost)
	if err != nil {
		return u, fmt.Errorf("postgres: totalling usage: %w", err)
	}
	return u, nil
}

// SessionsWithOpenToolCalls returns sessions with tool calls that no tool message answers.
func (s *Store) SessionsWithOpenToolCalls(ctx context.Context, afterID string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id FROM sessions WHERE open_calls > 0 AND id > $1
		AND NOT EXISTS (SELECT 1 FROM runs WHERE runs.session_id = sessions.id AND runs.state = 'running') ORDER BY id LIMIT $2`, afterID, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: finding open tool calls: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: finding open tool calls: %w", err)
	}
	return ids, nil
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
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading messages: %w", err)
	}
	defer rows.Close()
	out := []parley.Message{}
	for rows.Next() {
		m, err := scanMessage(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: reading messages: %w", err)
		}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: reading messages: %w", err)
	}
	return out, nil
}

// PutResource stores r.
func (s *Store) PutResource(ctx context.Context, r *parley.Resource) error {
	meta, err := rowcodec.ResourceMeta(r)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO resources (id, session_id, kind, uri, meta, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		r.ID, r.SessionID, r.Kind, r.URI, meta, r.CreatedAt.UTC())
	if isFKViolation(err) {
		return notFound("session", r.SessionID)
	}
	if err != nil {
		return fmt.Errorf("postgres: storing resource: %w", err)
	}
	return nil
}

// GetResource returns the resource with id.
func (s *Store) GetResource(ctx context.Context, id string) (*parley.Resource, error) {
	var (
		r    parley.Resource
		meta []byte
	)
	err := s.pool.QueryRow(ctx, `SELECT id, session_id, kind, uri, meta::text, created_at FROM resources WHERE id = $1`, id).
		Scan(&r.ID, &r.SessionID, &r.Kind, &r.URI, &meta, &r.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("resource", id)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading resource: %w", err)
	}
	if meta != nil {
		r.Meta = json.RawMessage(meta)
	}
	r.CreatedAt = r.CreatedAt.UTC()
	return &r, nil
}
