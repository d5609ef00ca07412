package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
)

// The writer's connection. Every write transaction of the store runs on one connection, taken
// from the pool once and kept (a *sql.Conn), so that a batch's merged statements can run on
// the driver's connection directly (Raw) rather than through database/sql. database/sql, for
// each statement it runs, converts every argument to a driver.NamedValue in a slice of its own
// (about 80 parameters a chat in the merged statements, and the largest allocation of a chat),
// takes its connection's and statement's locks and finds the statement's copy prepared on that
// connection. Here a batch's merged statements are prepared once on the writer's connection and
// run with one reused argument slice, under one Raw call.
//
// One connection for the writes changes no transaction: SQLite has one writer at a time
// whatever the connection, and the group-commit writer runs one transaction at a time.

// writeConn is the writer's connection and what is prepared on it. Used by the writer only
// (Begin, Merge, Commit, Rollback run one at a time), and by close once the writer has stopped.
type writeConn struct {
	conn  *sql.Conn
	tx    *sql.Tx                // the transaction under way on conn, nil between transactions
	stmts map[string]driver.Stmt // the merged statements prepared on conn, by text
	args  []driver.NamedValue    // the arguments of the statement being run, reused
}

// begin starts a write transaction on the writer's connection, taking one from the pool the
// first time and again after the connection was found closed.
func (w *writeConn) begin(ctx context.Context, db *sql.DB) (*sql.Tx, error) {
	for try := 0; ; try++ {
		if w.conn == nil {
			c, err := db.Conn(ctx)
			if err != nil {
				return nil, err
			}
			w.conn, w.stmts = c, map[string]driver.Stmt{}
		}
		tx, err := w.conn.BeginTx(ctx, nil)
		if errors.Is(err, sql.ErrConnDone) && try == 0 { // database/sql closed it (a bad connection)
			w.drop()
			continue
		}
		if err != nil {
			return nil, err
		}
		w.tx = tx
		return tx, nil
	}
}

// end is called once the transaction under way has committed or rolled back.
func (w *writeConn) end() { w.tx = nil }

// drop lets go of the connection and its statements.
func (w *writeConn) drop() {
	if w.conn == nil {
		return
	}
	_ = w.conn.Raw(func(any) error {
		for _, st := range w.stmts {
			st.Close()
		}
		return nil
	})
	w.conn.Close()
	w.conn, w.stmts = nil, nil
}

// rawRun is one merged statement's rows to run: m's texts, args in rows of m.cols parameters.
type rawRun struct {
	m    *mergedStmt
	args []any
}

// errNotWriter: Merge was given a transaction that is not the writer's.
var errNotWriter = errors.New("sqlite: a merge outside the writer's transaction")

// execRaw runs each of runs (mergeChunk rows a statement) on the writer's connection, in the
// transaction under way (merge, its caller, checks that it is the writer's), and returns the rows
// each changed. ctx must not end (the statements run without the driver's cancellation, as
// cachedTx's).
func (s *Store) execRaw(ctx context.Context, runs []rawRun, changed []int64) error {
	w := &s.wc
	return w.conn.Raw(func(dc any) error {
		prep, ok := dc.(driver.ConnPrepareContext)
		if !ok {
			return fmt.Errorf("sqlite: the driver's connection %T cannot prepare with a context", dc)
		}
		for i, r := range runs {
			args := r.args
			for len(args) > 0 {
				n := min(len(args)/r.m.cols, mergeChunk)
				q := r.m.texts[n]
				st, ok := w.stmts[q]
				if !ok {
					var err error
					if st, err = prep.PrepareContext(ctx, q); err != nil {
						return notBad(err)
					}
					w.stmts[q] = st
				}
				ex, ok := st.(driver.StmtExecContext)
				if !ok {
					return fmt.Errorf("sqlite: the driver's statement %T cannot run with a context", st)
				}
				k := n * r.m.cols
				nv, err := namedValues(w.args[:0], args[:k])
				w.args = nv
				if err != nil {
					return err
				}
				s.ran.Add(1)
				res, err := ex.ExecContext(ctx, nv)
				clear(nv) // keep no caller's strings and bytes past the statement
				if err != nil {
					return notBad(err)
				}
				m, err := res.RowsAffected()
				if err != nil {
					return notBad(err)
				}
				changed[i] += m
				args = args[k:]
			}
		}
		return nil
	})
}

// notBad keeps a statement's error from telling database/sql to close the writer's connection
// (driver.ErrBadConn): the connection holds the transaction under way, which then fails as any
// statement's failure makes it.
func notBad(err error) error {
	if errors.Is(err, driver.ErrBadConn) {
		return fmt.Errorf("sqlite: %v", err)
	}
	return err
}

// namedValues appends to nv args as the driver's values, as database/sql converts them for a
// driver without a converter of its own (driver.DefaultParameterConverter), numbered from 1.
func namedValues(nv []driver.NamedValue, args []any) ([]driver.NamedValue, error) {
	for i, a := range args {
		var v driver.Value
		switch a := a.(type) {
		case nil, int64, float64, string, []byte, bool:
			v = a
		case int:
			v = int64(a)
		default:
			var err error
			if v, err = driver.DefaultParameterConverter.ConvertValue(a); err != nil {
				return nv, fmt.Errorf("sqlite: argument %d: %w", i+1, err)
			}
		}
		nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: v})
	}
	return nv, nil
}
