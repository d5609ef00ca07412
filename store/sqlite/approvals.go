package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	parley "github.com/parleyhq/parley"
)

const approvalCols = `session_id, call_id, run_id, tool, server, arguments, why, state, run_arguments, edited, always, answer, decided_by, created_at, expires_at, decided_at`

func scanApproval(r scanner) (*parley.ApprovalRecord, error) {
	var (
		a                         parley.ApprovalRecord
		edited, always            int64
		created, expires, decided int64
	)
	if err := r.Scan(&a.SessionID, &a.CallID, &a.RunID, &a.Tool, &a.Server, &a.Arguments, &a.Why, &a.State, &a.RunArguments,
		&edited, &always, &a.Answer, &a.DecidedBy, &created, &expires, &decided); err != nil {
		return nil, err
	}
	a.Edited, a.Always = edited != 0, always != 0
	a.CreatedAt, a.ExpiresAt = fromMicros(created), fromMicros(expires)
	if decided != 0 {
		a.DecidedAt = fromMicros(decided)
	}
	return &a, nil
}

// CreateApproval stores r as pending, or returns the session's approval of the same call.
func (s *Store) CreateApproval(ctx context.Context, r *parley.ApprovalRecord) (*parley.ApprovalRecord, error) {
	if r.SessionID == "" || r.CallID == "" || r.Tool == "" || r.CreatedAt.IsZero() || r.ExpiresAt.IsZero() {
		return nil, parley.Errorf(parley.ECInvalid, "approval: session, call, tool, created_at and expires_at are required")
	}
	var out *parley.ApprovalRecord
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO approvals (session_id, call_id, run_id, tool, server, arguments, why, state, created_at, expires_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?) ON CONFLICT (session_id, call_id) DO NOTHING`,
			r.SessionID, r.CallID, r.RunID, r.Tool, r.Server, r.Arguments, r.Why, micros(r.CreatedAt), micros(r.ExpiresAt))
		if err != nil {
			if strings.Contains(err.Error(), "FOREIGN KEY") {
				return notFound("session", r.SessionID)
			}
			return fmt.Errorf("sqlite: storing an approval: %w", err)
		}
		out, err = scanApproval(tx.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE session_id = ? AND call_id = ?`, r.SessionID, r.CallID))
		if err != nil {
			return fmt.Errorf("sqlite: reading an approval: %w", err)
		}
		return nil
	})
	return out, err
}

// GetApproval returns the session's approval of callID.
func (s *Store) GetApproval(ctx context.Context, sessionID, callID string) (*parley.ApprovalRecord, error) {
	a, err := scanApproval(s.db.QueryRowContext(ctx, `SELECT `+approvalCols+` FROM approvals WHERE session_id = ? AND call_id = ?`, sessionID, callID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound("approval", callID)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading an approval: %w", err)
	}
	return a, nil
}

// ListApprovals returns the session's approvals, oldest first.
func (s *Store) ListApprovals(ctx context.Context, sessionID string, pendingOnly bool) ([]parley.ApprovalRecord, error) {
	q := `SELECT ` + approvalCols + ` FROM approvals WHERE session_id = ?`
	if pendingOnly {
		q += ` AND state = 'pending'`
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY created_at, call_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: listing approvals: %w", err)
	}
	defer rows.Close()
	out := []parley.ApprovalRecord{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: listing approvals: %w", err)
		}
		out = append(out, *a)
	}
	return out, rows.Err()
}

// DecideApproval records d on a pending approval.
func (s *Store) DecideApproval(ctx context.Context, sessionID, callID string, d parley.ApprovalDecision) (*parley.ApprovalRecord, error) {
	if d.State != parley.ApprovalApproved && d.State != parley.ApprovalDenied && d.State != parley.ApprovalExpired {
		return nil, parley.Errorf(parley.ECInvalid, "approval: unknown decision %q", d.State)
	}
	var out *parley.ApprovalRecord
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		a, err := scanApproval(tx.QueryRowContext(ctx, `UPDATE approvals SET state = ?, run_arguments = ?, edited = ?, always = ?, answer = ?, decided_by = ?, decided_at = ?
			WHERE session_id = ? AND call_id = ? AND state = 'pending' RETURNING `+approvalCols,
			d.State, d.RunArguments, d.Edited, d.Always, d.Answer, d.DecidedBy, micros(d.At), sessionID, callID))
		if err == nil {
			out = a
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("sqlite: deciding an approval: %w", err)
		}
		var state string
		err = tx.QueryRowContext(ctx, `SELECT state FROM approvals WHERE session_id = ? AND call_id = ?`, sessionID, callID).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("approval", callID)
		}
		if err != nil {
			return fmt.Errorf("sqlite: deciding an approval: %w", err)
		}
		return parley.Errorf(parley.ECConflict, "this tool call was already decided: %s", state)
	})
	return out, err
}

// AlwaysAllowed returns the tools allowed for the rest of the session.
func (s *Store) AlwaysAllowed(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT tool FROM approvals WHERE session_id = ? AND always = 1 AND state = 'approved' ORDER BY tool`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: reading allowed tools: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("sqlite: reading allowed tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteDecidedApprovalsBefore deletes the approvals decided, or pending and expired, before t,
// but those that allowed a tool "always".
func (s *Store) DeleteDecidedApprovalsBefore(ctx context.Context, t time.Time) (int64, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM approvals WHERE NOT (always = 1 AND state = 'approved')
			AND (state <> 'pending' AND decided_at < ?1 OR state = 'pending' AND expires_at < ?1)`, micros(t))
		if err != nil {
			return fmt.Errorf("sqlite: deleting approvals: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}
