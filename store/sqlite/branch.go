package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

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
func (s *Store) branchTip(ctx context.Context, sessionID, leaf string) (tip, error) {
	var (
		t   tip
		id  sql.NullString
		seq sql.NullInt64
	)
	err := s.queryRow(ctx, `SELECT s.branched, m.id, m.seq FROM sessions s
		LEFT JOIN messages m ON m.session_id = s.id AND m.id = COALESCE(NULLIF(?, ''), s.leaf_id)
		WHERE s.id = ?`, leaf, sessionID).Scan(&t.branched, &id, &seq)
	if errors.Is(err, sql.ErrNoRows) || err == nil && !id.Valid {
		if leaf != "" {
			return t, notFound("message", leaf)
		}
		return t, nil // no session, or no message yet
	}
	if err != nil {
		return t, fmt.Errorf("sqlite: reading branch: %w", err)
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
		q = `SELECT ` + cols + ` FROM messages WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq`
		args = []any{sessionID, after, t.seq}
	} else {
		q = `WITH RECURSIVE path(rid, up) AS (
			SELECT rowid, parent_id FROM messages WHERE id = ? AND session_id = ? AND seq > ?
			UNION ALL
			SELECT m.rowid, m.parent_id FROM messages m JOIN path ON m.id = path.up WHERE m.seq > ?)
			SELECT ` + cols + ` FROM path JOIN messages ON messages.rowid = path.rid ORDER BY seq`
		args = []any{t.leaf, sessionID, after, after}
	}
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	return q, args
}

// ListBranch returns messages of the branch that ends at leaf ("": the active leaf).
func (s *Store) ListBranch(ctx context.Context, sessionID, leaf string, afterSeq int64, limit int) ([]parley.Message, parley.BranchTip, error) {
	t, err := s.branchTip(ctx, sessionID, leaf)
	if err != nil || t.leaf == "" {
		return []parley.Message{}, parley.BranchTip{}, err
	}
	if s.betweenBranchReads != nil {
		s.betweenBranchReads()
	}
	q, args := branchQuery(messageCols, sessionID, t, afterSeq, limit)
	msgs, err := s.queryMessages(ctx, q, args...)
	return msgs, parley.BranchTip{ID: t.leaf, Seq: t.seq}, err
}

// ModelBranch returns the model view of the branch that ends at leaf ("": the active leaf).
func (s *Store) ModelBranch(ctx context.Context, sessionID, leaf string) ([]parley.Message, parley.BranchTip, error) {
	t, err := s.branchTip(ctx, sessionID, leaf)
	if err != nil || t.leaf == "" {
		return []parley.Message{}, parley.BranchTip{}, err
	}
	q, args := branchQuery(`role, content, parts, name, tool_calls, tool_call_id, reasoning, thinking_blocks, error`, sessionID, t, 0, 0)
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, parley.BranchTip{}, fmt.Errorf("sqlite: reading history: %w", err)
	}
	defer rows.Close()
	// The leaf's seq bounds the branch's length: size the slice once instead of growing it. One
	// spare slot lets llmctx.BuildOwned put a system prompt first without copying.
	out := make([]parley.Message, 0, min(t.seq, 1<<20)+1)
	var (
		role                          string
		text, name, callID, reasoning sql.NullString
		failed                        sql.NullString
		parts, calls, thinking        sql.RawBytes
	)
	for rows.Next() {
		if err := rows.Scan(&role, &text, &parts, &name, &calls, &callID, &reasoning, &thinking, &failed); err != nil {
			return nil, parley.BranchTip{}, fmt.Errorf("sqlite: reading history: %w", err)
		}
		var m parley.Message
		if err := decodeOpenAI(&m, role, text, name, callID, reasoning, parts, calls, nil, thinking); err != nil {
			return nil, parley.BranchTip{}, fmt.Errorf("sqlite: reading history: %w", err)
		}
		m.Error = parley.ErrorCode(failed.String)
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, parley.BranchTip{}, fmt.Errorf("sqlite: reading history: %w", err)
	}
	return out, parley.BranchTip{ID: t.leaf, Seq: t.seq}, nil
}

// Tree returns the session's active leaf and all its messages, compact, in seq order.
func (s *Store) Tree(ctx context.Context, sessionID string) (string, []parley.TreeNode, error) {
	var leaf string
	err := s.queryRow(ctx, `SELECT COALESCE(leaf_id, '') FROM sessions WHERE id = ?`, sessionID).Scan(&leaf)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil, notFound("session", sessionID)
	}
	if err != nil {
		return "", nil, fmt.Errorf("sqlite: reading tree: %w", err)
	}
	nodes, _, err := treeNodes(ctx, s.db, sessionID)
	return leaf, nodes, err
}

type rowsQuerier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// treeNodes reads the session's nodes in seq order, with their seqs.
func treeNodes(ctx context.Context, q rowsQuerier, sessionID string) ([]parley.TreeNode, []int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, COALESCE(parent_id, ''), role, created_at, seq FROM messages
		WHERE session_id = ? ORDER BY seq`, sessionID)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: reading tree: %w", err)
	}
	defer rows.Close()
	nodes := []parley.TreeNode{}
	var seqs []int64
	for rows.Next() {
		var (
			n       parley.TreeNode
			role    string
			created int64
			seq     int64
		)
		if err := rows.Scan(&n.ID, &n.ParentID, &role, &created, &seq); err != nil {
			return nil, nil, fmt.Errorf("sqlite: reading tree: %w", err)
		}
		n.Role, n.CreatedAt = parley.Role(role), fromMicros(created)
		nodes = append(nodes, n)
		seqs = append(seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("sqlite: reading tree: %w", err)
	}
	return nodes, seqs, nil
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
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		leaf, err = setLeafTx(ctx, tx, sessionID, messageID, newest)
		return err
	})
	return leaf, err
}

// setLeafTx is setLeaf's work in tx.
func setLeafTx(ctx context.Context, tx *sql.Tx, sessionID, messageID string, newest bool) (string, error) {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return "", notFound("session", sessionID)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: setting leaf: %w", err)
	}
	if newest {
		if err := noRunningRun(ctx, tx, sessionID); err != nil {
			return "", err
		}
	}
	nodes, _, err := treeNodes(ctx, tx, sessionID)
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
	if _, err := tx.ExecContext(ctx, `UPDATE sessions SET leaf_id = ?, branched = MAX(branched, ?) WHERE id = ?`,
		leaf, leaf != nodes[len(nodes)-1].ID, sessionID); err != nil {
		return "", fmt.Errorf("sqlite: setting leaf: %w", err)
	}
	return leaf, nil
}

// noRunningRun refuses to switch branches under a running run, whose next message would land on
// the other branch. In the transaction that moves the leaf (SQLite has one writer), it is ordered
// against the run's appends.
func noRunningRun(ctx context.Context, tx *sql.Tx, sessionID string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE session_id = ? AND state = 'running'`, sessionID).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: setting leaf: %w", err)
	}
	return rowcodec.ErrRunning
}

// checkParents checks that each id is a message of the session.
func checkParents(ctx context.Context, tx cachedTx, sessionID string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	ids = rowcodec.Distinct(ids)
	var (
		n   int
		q   = `SELECT COUNT(*) FROM messages WHERE session_id = ? AND id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
		row *sql.Row
	)
	if len(ids) == 1 {
		// One parent named (a chat's message stored after the leaf it was read at, an edit):
		// prepared once. Other counts vary and are not kept.
		row = tx.QueryRowContext(ctx, q, sessionID, ids[0])
	} else {
		row = tx.tx.QueryRowContext(ctx, q, append([]any{sessionID}, anySlice(ids)...)...)
	}
	err := row.Scan(&n)
	if err != nil {
		return fmt.Errorf("sqlite: checking parents: %w", err)
	}
	if n != len(ids) {
		return parley.Errorf(parley.ECInvalid, "parent_id: not a message of this session")
	}
	return nil
}

func anySlice(ids []string) []any {
	out := make([]any, len(ids))
	for i, id := range ids {
		out[i] = id
	}
	return out
}

// Fork copies the branch that ends at messageID into the new session into, a fork of sessionID
// (forked_from): the copies may refer to sessionID's files, which DeleteSession hands over.
func (s *Store) Fork(ctx context.Context, sessionID, messageID string, into *parley.Session) ([]parley.Message, error) {
	copies, parents, ptrs, err := rowcodec.ForkBranch(ctx, s.ListBranch, sessionID, messageID, into)
	if err != nil {
		return nil, err
	}
	rows := make([][]any, len(copies))
	for i := range copies {
		if rows[i], err = messageRow(&copies[i]); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	last := copies[len(copies)-1]
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if into.ProjectID != "" {
			if err := projectExists(ctx, tx, into.ProjectID); err != nil {
				return err
			}
		}
		// The source may have been deleted since its branch was read: its files would be gone.
		if err := tx.QueryRowContext(ctx, `SELECT 1 FROM sessions WHERE id = ?`, sessionID).Scan(new(int)); errors.Is(err, sql.ErrNoRows) {
			return notFound("session", sessionID)
		} else if err != nil {
			return fmt.Errorf("sqlite: reading the forked session: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO sessions (id, title, owner, created_at, updated_at, project_id, last_seq, leaf_id, open_calls, forked_from)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			into.ID, into.Title, into.Owner, micros(into.CreatedAt), micros(into.UpdatedAt), nullable(into.ProjectID),
			len(copies), last.ID, max(0, rowcodec.OpenCallsDelta(ptrs)), sessionID)
		if err != nil {
			return fmt.Errorf("sqlite: creating session: %w", err)
		}
		return insertMessages(ctx, s.cached(tx), into.ID, 1, rows, parents)
	})
	if err != nil {
		return nil, err
	}
	for i := range copies {
		copies[i].SessionID, copies[i].Seq, copies[i].ParentID = into.ID, int64(i+1), parents[i]
	}
	return copies, nil
}
