package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	parley "github.com/parleyhq/parley"
)

const approvalCols = `session_id, call_id, run_id, tool, server, arguments, why, state, run_arguments, edited, always, answer, decided_by, created_at, expires_at, decided_at`

func scanApproval(row pgx.Row) (*parley.ApprovalRecord, error) {
	var (
		a                parley.ApprovalRecord
		created, expires time.Time
		decided          *time.Time
	)
	if err := row.Scan(&a.SessionID, &a.CallID, &a.RunID, &a.Tool, &a.Server, &a.Arguments, &a.Why, &a.State, &a.RunArguments,
		&a.Edited, &a.Always, &a.Answer, &a.DecidedBy, &created, &expires, &decided); err != nil {
		return nil, err
	}
	a.CreatedAt, a.ExpiresAt = created.UTC(), expires.UTC()
	if decided != nil {
		a.DecidedAt = decided.UTC()
	}
	return &a, nil
}

// CreateApproval stores r as pending, or returns the session's approval of the same call.
func (s *Store) CreateApproval(ctx context.Context, r *parley.ApprovalRecord) (*parley.ApprovalRecord, error) {
	if r.SessionID == "" || r.CallID == "" || r.Tool == "" || r.CreatedAt.IsZero() || r.ExpiresAt.IsZero() {
		return nil, parley.Errorf(parley.ECInvalid, "approval: session, call, tool, created_at and expires_at are required")
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO approvals (session_id, call_id, run_id, tool, server, arguments, why, state, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9) ON CONFLICT (session_id, call_id) DO NOTHING`,
		r.SessionID, r.CallID, r.RunID, r.Tool, r.Server, r.Arguments, r.Why, r.CreatedAt.UTC(), r.ExpiresAt.UTC())
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23503" {
		return nil, notFound("session", r.SessionID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: storing an approval: %w", err)
	}
	return s.GetApproval(ctx, r.SessionID, r.CallID)
}

// GetApproval returns the session's approval of callID.
func (s *Store) GetApproval(ctx context.Context, sessionID, callID string) (*parley.ApprovalRecord, error) {
	a, err := scanApproval(s.pool.QueryRow(ctx, `SELECT `+approvalCols+` FROM approvals WHERE session_id = $1 AND call_id = $2`, sessionID, callID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound("approval", callID)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: reading an approval: %w", err)
	}
	return a, nil
}

// ListApprovals returns the session's approvals, oldest first.
func (s *Store) ListApprovals(ctx context.Context, sessionID string, pendingOnly bool) ([]parley.ApprovalRecord, error) {
	q := `SELECT ` + approvalCols + ` FROM approvals WHERE session_id = $1`
	if pendingOnly {
		q += ` AND state = 'pending'`
	}
	rows, err := s.pool.Query(ctx, q+` ORDER BY created_at, call_id`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("postgres: listing approvals: %w", err)
	}
	defer rows.Close()
	out := []parley.ApprovalRecord{}
	for rows.Next() {
		a, err := scanApproval(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: listing approvals: %w", err)
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
	a, err := scanApproval(s.pool.QueryRow(ctx, `UPDATE approvals SET state = $1, run_arguments = $2, edited = $3, always = $4, answer = $5, decided_by = $6, decided_at = $7
		WHERE session_id = $8 AND call_id = $9 AND state = 'pending' RETURNING `+approvalCols,
		d.State, d.RunArguments, d.Edited, d.Always, d.Answer, d.DecidedBy, d.At.UTC(), sessionID, callID))
	if err == nil {
		return a, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: deciding an approval: %w", err)
	}
	cur, err := s.GetApproval(ctx, sessionID, callID)
	if err != nil {
		return nil, err
	}
	return nil, parley.Errorf(parley.ECConflict, "this tool call was already decided: %s", cur.State)
}

// AlwaysAllowed returns the tools allowed for the rest of the session.
func (s *Store) AlwaysAllowed(ctx context.Context, sessionID string) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT tool FROM approvals WHERE session_id = $1 AND always AND state = 'approved' ORDER BY tool`, sessionID)
	if err != nil {
		return nil, fmt.Errorf("postgres: reading allowed tools: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("postgres: reading allowed tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// DeleteDecidedApprovalsBefore deletes the approvals decided, or pending and expired, before t,
// but those that allowed a tool "always".
func (s *Store) DeleteDecidedApprovalsBefore(ctx context.Context, t time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM approvals WHERE NOT (always AND state = 'approved')
		AND (state <> 'pending' AND decided_at < $1 OR state = 'pending' AND expires_at < $1)`, t.UTC())
	if err != nil {
		return 0, fmt.Errorf("postgres: deleting approvals: %w", err)
	}
	return tag.RowsAffected(), nil
}
