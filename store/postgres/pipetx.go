package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/parleyhq/parley/store/internal/groupcommit"
)

// pipeTx is the transaction of one group-commit batch. Its framing statements (BEGIN, a
// savepoint before each write, its release) need no answer of their own before the write's next
// statement: they wait here and go to the server in one network write with that statement (a
// pipelined batch), and the last of them with COMMIT. A batch of n writes of k statements each
// thus costs n·k + 1 round trips instead of n·k + n + 3, and a lone write one round trip less
// than a transaction begun on its own. Only the rollback to the savepoint of a write that failed
// is sent at once (rollbackTo).
//
// A framing statement that fails (the connection broke, or a write left the transaction aborted
// and said nothing) makes the statement it went with fail too, and the transaction is broken: the
// writer's next step (savepoint, release, rollback to it, commit) returns that error, and the
// whole batch fails, as it did when the framing statement was a round trip of its own.
type pipeTx struct {
	conn    *pgxpool.Conn
	tx      pgx.Tx   // pgx's transaction, once BEGIN was sent (for the few methods delegated to it)
	pending []string // framing statements not sent yet, BEGIN first while tx is nil
	held    []held   // merged statements not sent yet, after pending (hold)
	broken  error    // a framing or held statement failed: the transaction cannot go on
	done    bool     // committed or rolled back: the connection went back to the pool
}

// held is a statement whose answer its write does not need before the batch's commit: it goes
// to the server with the next statement, or with COMMIT, and read reads its results then.
type held struct {
	sql  string
	args []any
	read func(pgx.BatchResults) error
	own  bool // holdFirst: read's error is its write's own, returned as it is
}

var _ pgx.Tx = (*pipeTx)(nil)

// errBroken wraps the failure of a framing statement, or of a held one.
type errBroken struct {
	err error
	// apart: a held statement failed and PostgreSQL aborted the transaction, COMMIT unrun
	// (groupcommit.ErrApart: the batch runs again, each write by its own statements).
	apart bool
	// own: err is the failure of a write's own statement held by holdFirst, told as that
	// write would tell it had it sent the statement at once.
	own bool
}

func (e *errBroken) Error() string {
	if e.own {
		return e.err.Error()
	}
	return fmt.Sprintf("postgres: the batch's transaction could not go on: %v", e.err)
}
func (e *errBroken) Unwrap() error        { return e.err }
func (e *errBroken) Is(target error) bool { return e.apart && target == groupcommit.ErrApart }

// hold adds a statement of a merged write to send with the next statement or with COMMIT,
// whichever comes first, saving the round trip it would take on its own: read reads its results
// then. read must fail only when the statement did (a check of its results that can fail belongs
// in the statement, which then fails): COMMIT may already have run when read is called. If the
// statement fails, the transaction is broken, and Commit says so with groupcommit.ErrApart.
func (p *pipeTx) hold(sql string, args []any, read func(pgx.BatchResults) error) error {
	if p.broken != nil {
		return p.broken
	}
	p.held = append(p.held, held{sql: sql, args: args, read: read})
	return nil
}

// holdFirst holds the statement of a write that is the first thing its transaction does (no
// statement sent or waiting, no savepoint before it) and needs none of its results before the
// commit, to go with the next statement or with COMMIT: a write alone in its transaction (the
// group-commit writer's lone write on a quiet writer) is then [BEGIN, statement, COMMIT], one
// round trip instead of two. read gives the write's own error, which the next statement or
// Commit returns as it is (and, as for hold, with groupcommit.ErrApart when the transaction was
// aborted, COMMIT unrun): alone, that is the write's error; in a batch without savepoints
// (groupcommit's Optimistic), the batch runs again with one around each write, where the
// statement is no longer first and is sent at once. It reports false, holding nothing, if the
// write is not first: the caller sends the statement itself.
func (p *pipeTx) holdFirst(sql string, args []any, read func(pgx.BatchResults) error) bool {
	if p.broken != nil || p.tx != nil || len(p.pending) > 0 || len(p.held) > 0 {
		return false
	}
	p.held = append(p.held, held{sql: sql, args: args, read: read, own: true})
	return true
}

// queue adds framing statements to send before the next statement; it returns the error that
// broke the transaction, if one did.
func (p *pipeTx) queue(stmts ...string) error {
	if p.broken != nil {
		return p.broken
	}
	p.pending = append(p.pending, stmts...)
	return nil
}

// rollbackTo undoes the write since the savepoint. Unlike the other framing statements it is
// sent at once: the transaction is aborted until it ran, and pgx prepares a statement it has not
// seen on this connection in a round trip of its own before the batch it is in, which an aborted
// transaction refuses.
func (p *pipeTx) rollbackTo(ctx context.Context) error {
	if p.broken != nil {
		return p.broken
	}
	if p.tx == nil { // nothing reached the server: nothing to undo
		return nil
	}
	if len(p.held) > 0 { // they take arguments: not in the simple query below
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	stmts := append(p.pending, "ROLLBACK TO SAVEPOINT op")
	p.pending = p.pending[:0]
	if _, err := p.conn.Exec(ctx, strings.Join(stmts, "; ")); err != nil { // no arguments: one simple query
		p.broken = &errBroken{err: err}
		return p.broken
	}
	return nil
}

// ready reports whether a statement can go to the server as it is: the transaction has begun
// and no framing statement waits.
func (p *pipeTx) ready() bool { return p.tx != nil && len(p.pending) == 0 && len(p.held) == 0 }

// send sends the waiting framing statements, BEGIN first if the transaction has not begun, the
// held statements, then the queued queries of b, in one batch, and reads the framing and held
// statements' results: what is left of the results is b's.
func (p *pipeTx) send(ctx context.Context, b *pgx.Batch) (pgx.BatchResults, error) {
	if p.broken != nil {
		return nil, p.broken
	}
	nb := &pgx.Batch{}
	framing := len(p.pending)
	if p.tx == nil {
		nb.BeginTx(pgx.TxOptions{})
		framing++
	}
	for _, s := range p.pending {
		nb.Queue(s)
	}
	p.pending = p.pending[:0]
	hs := p.held
	p.held = nil
	for _, h := range hs {
		nb.Queue(h.sql, h.args...)
	}
	if b != nil {
		nb.QueuedQueries = append(nb.QueuedQueries, b.QueuedQueries...)
	}
	br := p.conn.SendBatch(ctx, nb)
	if p.tx == nil {
		if t, ok := br.(interface{ Tx() pgx.Tx }); ok {
			p.tx = t.Tx()
		}
	}
	for range framing {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			p.broken = &errBroken{err: err}
			return nil, p.broken
		}
	}
	for _, h := range hs {
		if err := h.read(br); err != nil {
			_ = br.Close()
			// Apart only if PostgreSQL aborted the transaction: then a COMMIT in b did not run.
			p.broken = &errBroken{err: err, apart: p.conn.Conn().PgConn().TxStatus() == 'E', own: h.own}
			return nil, p.broken
		}
	}
	return br, nil
}

// flush sends the waiting framing statements (and BEGIN) on their own.
func (p *pipeTx) flush(ctx context.Context) error {
	if p.ready() {
		return nil
	}
	br, err := p.send(ctx, nil)
	if err != nil {
		return err
	}
	return br.Close()
}

// plainArgs reports whether args can go in a batch: a batch takes no query options, and a
// statement without arguments may be several statements, which only the simple protocol runs.
func plainArgs(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryRewriter:
		return false
	}
	return true
}

func (p *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !p.ready() && plainArgs(args) {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		br, err := p.send(ctx, b)
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		tag, err := br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		return tag, err
	}
	if err := p.flush(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return p.conn.Exec(ctx, sql, args...)
}

func (p *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !p.ready() && plainArgs(args) {
		b := &pgx.Batch{}
		b.Queue(sql, args...)
		br, err := p.send(ctx, b)
		if err != nil {
			return nil, err
		}
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return nil, err
		}
		return &batchRows{Rows: rows, br: br}, nil
	}
	if err := p.flush(ctx); err != nil {
		return nil, err
	}
	return p.conn.Query(ctx, sql, args...)
}

func (p *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p.ready() {
		return p.conn.QueryRow(ctx, sql, args...)
	}
	rows, err := p.Query(ctx, sql, args...)
	return &batchRow{rows: rows, err: err}
}

func (p *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p.ready() {
		return p.conn.SendBatch(ctx, b)
	}
	br, err := p.send(ctx, b)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

func (p *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := p.flush(ctx); err != nil {
		return 0, err
	}
	return p.conn.CopyFrom(ctx, table, cols, src)
}

func (p *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := p.flush(ctx); err != nil {
		return nil, err
	}
	return p.conn.Conn().Prepare(ctx, name, sql)
}

// Begin starts a nested transaction (a savepoint of pgx's own).
func (p *pipeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if err := p.flush(ctx); err != nil {
		return nil, err
	}
	return p.tx.Begin(ctx)
}

func (p *pipeTx) LargeObjects() pgx.LargeObjects {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.flush(ctx); err != nil || p.tx == nil {
		// pgx gives no way to return the error: the large objects' calls fail on the
		// broken transaction.
		return pgx.LargeObjects{}
	}
	return p.tx.LargeObjects()
}

// Conn returns the connection, once the waiting framing statements were sent: a statement run
// on it directly must not run before BEGIN. If they fail, the transaction is broken and the
// batch fails at the writer's next step.
func (p *pipeTx) Conn() *pgx.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = p.flush(ctx)
	return p.conn.Conn()
}

// Commit sends the waiting framing statements and COMMIT in one round trip.
func (p *pipeTx) Commit(ctx context.Context) error {
	if p.done {
		return pgx.ErrTxClosed
	}
	if p.broken != nil {
		return p.broken
	}
	var tag pgconn.CommandTag
	switch {
	case len(p.held) > 0: // they go in one batch with COMMIT (and BEGIN, if nothing else went)
		b := &pgx.Batch{}
		b.Queue("COMMIT")
		br, err := p.send(ctx, b)
		if err != nil {
			return err // Rollback follows
		}
		tag, err = br.Exec()
		if cerr := br.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case p.tx == nil: // nothing was written: there is nothing to commit
		p.release()
		return nil
	default:
		// Framing statements take no arguments: with COMMIT they go as one simple query.
		var err error
		tag, err = p.conn.Exec(ctx, strings.Join(append(p.pending, "COMMIT"), "; "))
		p.pending = p.pending[:0]
		if err != nil {
			return err // Rollback follows
		}
	}
	if tag.String() == "ROLLBACK" { // the transaction was aborted: PostgreSQL rolled it back
		p.release()
		return pgx.ErrTxCommitRollback
	}
	p.release()
	return nil
}

// Rollback drops the transaction, if it began, and gives the connection back (or closes it,
// if the rollback failed).
func (p *pipeTx) Rollback(ctx context.Context) error {
	if p.done {
		return pgx.ErrTxClosed
	}
	defer p.release()
	p.pending, p.held = p.pending[:0], nil
	if p.tx == nil || p.conn.Conn().PgConn().TxStatus() == 'I' {
		return nil
	}
	if _, err := p.conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = p.conn.Conn().Close(ctx) // the pool drops a closed connection
		return err
	}
	return nil
}

func (p *pipeTx) release() {
	if !p.done {
		p.done = true
		p.conn.Release()
	}
}

// batchRows are the rows of a query sent in a batch: closing them closes the batch.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// batchRow is QueryRow's row of a query sent in a batch (pgx's connRow does the same on Rows).
type batchRow struct {
	rows pgx.Rows
	err  error
}

func (r *batchRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}
