package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	parley "github.com/parleyhq/parley"
	"github.com/parleyhq/parley/store/internal/rowcodec"
)

// tip is what reading a branch needs to know of its session.
type tip struct {
	leaf     string
	seq      int64 // the leaf's
	branched bool  // the branch is found by walking up from leaf, not by seq alone
}

// branchTip reads the session and the leaf of the branch asked for ("" for the active one).
func branchTip(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, sessionID, leaf string) (tip, error) {
	var (
		t   tip
		id  pgtype.Text
		seq pgtype.Int8
	)
	err := q.QueryRow(ctx, `SELECT s.branched, m.id, m.seq FROM sessions s
		LEFT JOIN messages m ON m.session_id = s.id AND m.id = COALESCE(NULLIF($1, ''), s.leaf_id)
		WHERE s.id = $2`, leaf, sessionID).Scan(&t.branched, &id, &seq)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && !id.Valid {
		if leaf != "" {
			return t, notFound("message", leaf)
		}
		return t, nil // no session, or no message yet
	}
	if err != nil {
		return t, fmt.Errorf("postgres: reading branch: %w", err)
	}
	t.leaf, t.seq = id.String, seq.Int64
	return t, nil
}

// branchQuery returns the query of the columns cols of the branch that ends at t's leaf, with seq
// > after, in order, at most limit rows (<= 0: all). A session that is one chain reads its rows
// by seq; another walks up from the leaf, stopping at the first seq not above after.
func branchQuery(cols, sessionID string, t tip, after int64, limit int) (string, []any) {
	var (
		q    string
		args []any
	)
	if !t.branched {
		q = `SELECT ` + cols + ` FROM messages WHERE session_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq`
		args = []any{sessionID, after, t.seq}
	} else {
		q = `WITH RECURSIVE path(pid, up) AS (
			SELECT id, parent_id FROM messages WHERE id = $2 AND session_id = $1 AND seq > $3
			UNION ALL
			SELECT m.id, m.parent_id FROM messages m JOIN path ON m.id = path.up WHERE m.seq > $3)
			SELECT ` + cols + ` FROM path JOIN messages ON messages.id = path.pid ORDER BY seq`
		args = []any{sessionID, t.leaf, after}
	}
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	return q, args
}

// readBranch reads the tip of the branch that ends at leaf ("": the active leaf) and, if the
// session is one chain, its messages with seq > after (at most limit, <= 0: all) in the same
// statement: one round trip, one snapshot (the tip and the rows agree). Each message row goes to
// each (with the leaf's seq, which bounds the branch's length), its columns cols. A branched session's row says only its tip: its messages are read by
// walking up from the leaf (branchQuery), a second round trip.
func (s *Store) readBranch(ctx context.Context, sessionID, leaf, cols string, after int64, limit int,
	each func(r pgx.Row, leafSeq int64) error) (tip, bool, error) {
	q := `WITH t AS (SELECT s.branched, m.id, m.seq FROM sessions s
		LEFT JOIN messages m ON m.session_id = s.id AND m.id = COALESCE(NULLIF($2, ''), s.leaf_id) WHERE s.id = $1)
		SELECT t.branched, t.id, t.seq, ` + qualify("msg", cols) + ` FROM t
		LEFT JOIN messages msg ON NOT t.branched AND msg.session_id = $1 AND msg.seq > $3 AND msg.seq <= t.seq
		ORDER BY msg.seq`
	if limit > 0 {
		q += fmt.Sprintf(` LIMIT %d`, limit)
	}
	var (
		t     tip
		id    pgtype.Text
		seq   pgtype.Int8
		found bool
	)
	rows, err := s.pool.Query(ctx, q, sessionID, leaf, after)
	if err != nil {
		return t, false, fmt.Errorf("postgres: reading branch: %w", err)
	}
	defer rows.Close()
	// The tip is read from the first row alone (the message's columns skipped: nil), then
	// each message's columns without it.
	tipOnly := make([]any, 3+strings.Count(cols, ",")+1)
	tipOnly[0], tipOnly[1], tipOnly[2] = &t.branched, &id, &seq
	row := &prefixRow{rows: rows, n: 3, dest: make([]any, 3, len(tipOnly))} // reused: no allocation per row
	for rows.Next() {
		if !found {
			found = true
			if err := rows.Scan(tipOnly...); err != nil {
				return t, false, fmt.Errorf("postgres: reading branch: %w", err)
			}
		}
		if rows.RawValues()[3] == nil { // no message: the session's row alone
			continue
		}
		if err := each(row, seq.Int64); err != nil {
			return t, false, err
		}
	}
	if err := rows.Err(); err != nil {
		return t, false, fmt.Errorf("postgres: reading branch: %w", err)
	}
	if !found || !id.Valid {
		if leaf != "" {
			return t, false, notFound("message", leaf)
		}
		return tip{}, false, nil // no session, or no message yet
	}
	t.leaf, t.seq = id.String, seq.Int64
	return t, !t.branched, nil
}

// qualify prefixes each of the comma-separated columns cols with table.
func qualify(table, cols string) string {
	f := strings.Split(cols, ",")
	for i, c := range f {
		f[i] = table + "." + strings.TrimSpace(c)
	}
	return strings.Join(f, ", ")
}

// prefixRow is a row whose first n columns are skipped (dest holds nil for them): Scan's
// destinations take the rest.
type prefixRow struct {
	rows pgx.Rows
	n    int
	dest []any
}

func (r *prefixRow) Scan(dest ...any) error {
	r.dest = append(r.dest[:r.n], dest...)
	return r.rows.Scan(r.dest...)
}

// ListBranch returns messages of the branch that ends at leaf ("": the active leaf).
func (s *Store) ListBranch(ctx context.Context, sessionID, leaf string, afterSeq int64, limit int) ([]parley.Message, parley.BranchTip, error) {
	msgs := []parley.Message{}
	each := func(r pgx.Row, _ int64) error {
		m, err := scanMessage(r)
		if err != nil {
			return fmt.Errorf("postgres: reading messages: %w", err)
		}
		msgs = append(msgs, m)
		return nil
	}
	t, read, err := s.readBranch(ctx, sessionID, leaf, messageCols, afterSeq, limit, each)
	if err != nil || t.leaf == "" {
		return []parley.Message{}, parley.BranchTip{}, err
	}
	if !read {
		if s.betweenBranchReads != nil {
			s.betweenBranchReads()
		}
		q, args := branchQuery(messageCols, sessionID, t, afterSeq, limit)
		if msgs, err = s.queryMessages(ctx, q, args...); err != nil {
			return nil, parley.BranchTip{}, err
		}
	}
	return msgs, parley.BranchTip{ID: t.leaf, Seq: t.seq}, nil
}

// modelCols are the columns of a message a model is sent (ModelBranch).
const modelCols = `role, content, parts, name, tool_calls, tool_call_id, reasoning, thinking_blocks, error`

// ModelBranch returns the model view of the branch that ends at leaf ("": the active leaf).
func (s *Store) ModelBranch(ctx context.Context, sessionID, leaf string) ([]parley.Message, parley.BranchTip, error) {
	var out []parley.Message
	var (
		role                          string
		text, name, callID, reasoning pgtype.Text
		failed                        pgtype.Text
		parts, calls, thinking        []byte
	)
	each := func(r pgx.Row, leafSeq int64) error {
		if err := r.Scan(&role, &text, &parts, &name, &calls, &callID, &reasoning, &thinking, &failed); err != nil {
			return fmt.Errorf("postgres: reading history: %w", err)
		}
		var m parley.Message
		if err := decodeOpenAI(&m, role, text, name, callID, reasoning, parts, calls, nil, thinking); err != nil {
			return fmt.Errorf("postgres: reading history: %w", err)
		}
		m.Error = parley.ErrorCode(failed.String)
		if out == nil {
			// The leaf's seq bounds the branch's length: size the slice once instead of
			// growing it. One spare slot lets llmctx.BuildOwned put a system prompt first
			// without copying.
			out = make([]parley.Message, 0, min(leafSeq, 1<<20)+1)
		}
		out = append(out, m)
		return nil
	}
	t, read, err := s.readBranch(ctx, sessionID, leaf, modelCols, 0, 0, each)
	if err != nil || t.leaf == "" {
		return []parley.Message{}, parley.BranchTip{}, err
	}
	if read {
		if out == nil {
			out = []parley.Message{}
		}
		return out, parley.BranchTip{ID: t.leaf, Seq: t.seq}, nil
	}
	q, args := branchQuery(modelCols, sessionID, t, 0, 0)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, parley.BranchTip{}, fmt.Errorf("postgres: reading history: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows, t.seq); err != nil {
			return nil, parley.BranchTip{}, err
		}
	}
	if err := rows.Err(); err != nil {
		return nil, parley.BranchTip{}, fmt.Errorf("postgres: reading history: %w", err)
	}
	return out, parley.BranchTip{ID: t.leaf, Seq: t.seq}, nil
}

// Tree returns the session's active leaf and all its messages, compact, in seq order.
func (s *Store) Tree(ctx context.Context, sessionID string) (string, []parley.TreeNode, error) {
	var leaf string
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(leaf_id, '') FROM sessions WHERE id = $1`, sessionID).Scan(&leaf)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil, notFound("session", sessionID)
	}
	if err != nil {
		return "", nil, fmt.Errorf("postgres: reading tree: %w", err)
	}
	nodes, err := treeNodes(ctx, s.pool, sessionID)
	return leaf, nodes, err
}

// treeNodes reads the session's nodes in seq order.
func treeNodes(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, sessionID string) ([]parley.TreeNode, error) {
	rows, err := q.Query(ctx, `SELECT id, COALESCE(parent_id, ''), role, created_at FROM messages
		WHERE session_id = $1 ORDER BY seq`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading tree: %w", err)
	}
	defer rows.Close()
	nodes := []parley.TreeNode{}
	for rows.Next() {
		var (
			n    parley.TreeNode
			role string
		)
		if err := rows.Scan(&n.ID, &n.ParentID, &role, &n.CreatedAt); err != nil {
			return nil, fmt.Errorf("postgres: reading tree: %w", err)
		}
		n.Role, n.CreatedAt = parley.Role(role), n.CreatedAt.UTC()
		nodes = append(nodes, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: reading tree: %w", err)
	}
	return nodes, nil
}

// SwitchBranch makes the newest message of messageID's subtree the active leaf.
func (s *Store) SwitchBranch(ctx context.Context, sessionID, messageID string) (string, error) {
	return s.setLeaf(ctx, sessionID, messageID, true)
}

// SetLeaf makes messageID the active leaf.
func (s *Store) SetLeaf(ctx context.Context, sessionID, messageID string) error {
	_, err := s.setLeaf(ctx, sessionID, messageID, false)
	return err
}

// setLeaf makes messageID, or the newest message of its subtree, the active leaf.
func (s *Store) setLeaf(ctx context.Context, sessionID, messageID string, newest bool) (string, error) {
	var leaf string
	s.hints.forget(sessionID) // the answer of a run under way goes after the new leaf
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) (err error) {
		leaf, err = setLeafTx(ctx, tx, sessionID, messageID, newest)
		return err
	})
	return leaf, err
}

// setLeafTx is setLeaf's work in tx.
func setLeafTx(ctx context.Context, tx pgx.Tx, sessionID, messageID string, newest bool) (string, error) {
	// The session's row lock orders this after any append in progress.
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE`, sessionID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", notFound("session", sessionID)
	}
	if err != nil {
		return "", fmt.Errorf("postgres: setting leaf: %w", err)
	}
	if newest {
		if err := noRunningRun(ctx, tx, sessionID); err != nil {
			return "", err
		}
	}
	nodes, err := treeNodes(ctx, tx, sessionID)
	if err != nil {
		return "", err
	}
	leaf := rowcodec.NewestInSubtree(nodes, messageID)
	if leaf == "" {
		return "", notFound("message", messageID)
	}
	if !newest {
		leaf = messageID
	}
	// A leaf that is not the last message makes the tree more than a chain to read.
	if _, err := tx.Exec(ctx, `UPDATE sessions SET leaf_id = $1, branched = branched OR $2 WHERE id = $3`,
		leaf, leaf != nodes[len(nodes)-1].ID, sessionID); err != nil {
		return "", fmt.Errorf("postgres: setting leaf: %w", err)
	}
	return leaf, nil
}

// noRunningRun refuses to switch branches under a running run, whose next message would land on
// the other branch. Read after the session's row lock is held: a run whose message was appended
// before is seen (its record was committed before its first append), and one whose first append
// comes after waits for the lock and goes on from the new leaf.
func noRunningRun(ctx context.Context, tx pgx.Tx, sessionID string) error {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM runs WHERE session_id = $1 AND state = 'running'`, sessionID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("postgres: setting leaf: %w", err)
	}
	return rowcodec.ErrRunning
}

// checkParents checks that each id is a message of the session.
func checkParents(ctx context.Context, tx pgx.Tx, sessionID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ids = rowcodec.Distinct(ids)
	var n int
	err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM messages WHERE session_id = $1 AND id = ANY($2)`, sessionID, ids).Scan(&n)
	if err != nil {
		return fmt.Errorf("postgres: checking parents: %w", err)
	}
	if n != len(ids) {
		return parley.Errorf(parley.ECInvalid, "parent_id: not a message of this session")
	}
	return nil
}

// Fork copies the branch that ends at messageID into the new session into, a fork of sessionID
// (forked_from): the copies may refer to sessionID's files, which DeleteSession hands over.
func (s *Store) Fork(ctx context.Context, sessionID, messageID string, into *parley.Session) ([]parley.Message, error) {
	copies, parents, ptrs, err := rowcodec.ForkBranch(ctx, s.ListBranch, sessionID, messageID, into)
	if err != nil {
		return nil, err
	}
	cols := make([]rowcodec.Columns, len(copies))
	for i := range copies {
		if cols[i], err = rowcodec.Encode(&copies[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The source may have been deleted since its branch was read (its files would be gone),
		// and must not be deleted before the fork is known as its fork.
		if err := lockForks(ctx, tx, sessionID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT 1 FROM sessions WHERE id = $1`, sessionID).Scan(new(int)); errors.Is(err, pgx.ErrNoRows) {
			return notFound("session", sessionID)
		} else if err != nil {
			return fmt.Errorf("postgres: reading the forked session: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, last_seq, leaf_id, open_calls, forked_from)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			into.ID, into.Title, into.Owner, into.CreatedAt.UTC(), into.UpdatedAt.UTC(), nullable(into.ProjectID),
			len(copies), copies[len(copies)-1].ID, max(0, rowcodec.OpenCallsDelta(ptrs)), sessionID)
		if isFKViolation(err) {
			return notFound("project", into.ProjectID)
		}
		if err != nil {
			return fmt.Errorf("postgres: creating session: %w", err)
		}
		b := &pgx.Batch{}
		queueMessages(b, into.ID, 1, ptrs, cols, parents)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("postgres: forking session: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for i := range copies {
		copies[i].SessionID, copies[i].Seq, copies[i].ParentID = into.ID, int64(i+1), parents[i]
	}
	return copies, nil
}
