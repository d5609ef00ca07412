package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parleyhq/parley/bench/internal/benchproc"
)

// pgSnap is what -pg-diag reads of the PostgreSQL server before and after each loop on the
// PostgreSQL path: the WAL and the buffers (server-wide: another database's work on the same
// server counts too), Parley's database (its size, blocks, commits, and its tables' updates and
// dead rows), and the CPU of every server process by its backend type.
type pgSnap struct {
	walRecords, walFPI, walBytes int64
	checkpoints, bufBackend      int64
	bufCheckpoint, bufAlloc      int64
	size, blksRead, blksHit      int64
	commits                      int64
	upd, hotUpd, dead            map[string]int64 // by table
	idxRead                      map[string]int64 // index entries read, by index
	cpu                          map[int32]procCPU
}

type procCPU struct {
	kind string // "client" (Parley's database), "autovacuum", the backend type otherwise
	cpu  time.Duration
}

// diagSnap reads a pgSnap; an error leaves the figures it could not read at 0.
func (p *pgBench) diagSnap(ctx context.Context) (pgSnap, error) {
	s := pgSnap{upd: map[string]int64{}, hotUpd: map[string]int64{}, dead: map[string]int64{}, idxRead: map[string]int64{}, cpu: map[int32]procCPU{}}
	if _, err := p.admin.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return s, err
	}
	if err := p.admin.QueryRow(ctx, "SELECT wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal").Scan(&s.walRecords, &s.walFPI, &s.walBytes); err != nil {
		return s, err
	}
	if err := p.admin.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req, buffers_backend, buffers_checkpoint, buffers_alloc
		FROM pg_stat_bgwriter`).Scan(&s.checkpoints, &s.bufBackend, &s.bufCheckpoint, &s.bufAlloc); err != nil {
		return s, err
	}
	if err := p.admin.QueryRow(ctx, `SELECT pg_database_size(datname), blks_read, blks_hit, xact_commit
		FROM pg_stat_database WHERE datname = $1`, p.name).Scan(&s.size, &s.blksRead, &s.blksHit, &s.commits); err != nil {
		return s, err
	}
	rows, err := p.admin.Query(ctx, "SELECT pid, coalesce(backend_type, ''), coalesce(datname, '') FROM pg_stat_activity")
	if err != nil {
		return s, err
	}
	type act struct {
		Pid      int32
		Typ, Dat string
	}
	acts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[act])
	if err != nil {
		return s, err
	}
	for _, a := range acts {
		kind := a.Typ
		switch {
		case a.Typ == "client backend" && a.Dat == p.name:
			kind = "client"
		case a.Typ == "client backend":
			continue // another database's (this connection's, another benchmark's)
		case a.Typ == "autovacuum worker":
			kind = "autovacuum"
		}
		if c, err := benchproc.CPU(int(a.Pid)); err == nil {
			s.cpu[a.Pid] = procCPU{kind: kind, cpu: c}
		}
	}
	// The tables' counters are the database's own: read them on a connection to it.
	cfg := p.admin.Config().Copy()
	cfg.Database = p.name
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return s, err
	}
	defer c.Close(context.Background())
	rows, err = c.Query(ctx, "SELECT relname, n_tup_upd, n_tup_hot_upd, n_dead_tup FROM pg_stat_user_tables")
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var upd, hot, dead int64
		if err := rows.Scan(&name, &upd, &hot, &dead); err != nil {
			return s, err
		}
		s.upd[name], s.hotUpd[name], s.dead[name] = upd, hot, dead
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	rows, err = c.Query(ctx, "SELECT indexrelname, idx_tup_read FROM pg_stat_user_indexes")
	if err != nil {
		return s, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return s, err
		}
		s.idxRead[name] = n
	}
	return s, rows.Err()
}

// diagLine formats what changed from a to b over chats chats: per chat, the WAL records, full
// page images and bytes, the buffers the backends wrote themselves and the blocks read from
// outside shared buffers; the checkpoints; the database's size; each updated table's updates and
// how many were HOT, and its dead rows; the index entries read (runs_one_running's, all); the CPU per chat of each kind of server process (a
// process that ended between a and b is not counted).
func diagLine(a, b pgSnap, chats int) string {
	if chats == 0 {
		return ""
	}
	n := float64(chats)
	var sb strings.Builder
	fmt.Fprintf(&sb, "  pg: WAL %.1f records, %.2f FPI, %.0f B a chat; %d checkpoints; backend-written buffers %.2f, blocks read %.2f a chat (hit %.0f); database %.1f MB",
		float64(b.walRecords-a.walRecords)/n, float64(b.walFPI-a.walFPI)/n, float64(b.walBytes-a.walBytes)/n,
		b.checkpoints-a.checkpoints, float64(b.bufBackend-a.bufBackend)/n, float64(b.blksRead-a.blksRead)/n,
		float64(b.blksHit-a.blksHit)/n, float64(b.size)/(1<<20))
	for _, t := range []string{"sessions", "runs"} {
		u := b.upd[t] - a.upd[t]
		fmt.Fprintf(&sb, "; %s: %.2f updates a chat, %d%% HOT, %d dead", t, float64(u)/n, pct64(b.hotUpd[t]-a.hotUpd[t], u), b.dead[t])
	}
	fmt.Fprintf(&sb, "; index entries read a chat: runs_one_running %.1f, all %.1f",
		float64(b.idxRead["runs_one_running"]-a.idxRead["runs_one_running"])/n, float64(sum(b.idxRead)-sum(a.idxRead))/n)
	byKind := map[string]time.Duration{}
	for pid, c := range b.cpu {
		d := c.cpu
		if o, ok := a.cpu[pid]; ok {
			d -= o.cpu
		}
		byKind[c.kind] += d
	}
	sb.WriteString("\n  pg CPU a chat:")
	for _, k := range []string{"client", "autovacuum", "checkpointer", "walwriter", "background writer", "autovacuum launcher"} {
		fmt.Fprintf(&sb, " %s %.3f ms", k, float64(byKind[k])/float64(time.Millisecond)/n)
	}
	return sb.String()
}

func sum(m map[string]int64) (n int64) {
	for _, v := range m {
		n += v
	}
	return n
}

func pct64(part, whole int64) int64 {
	if whole == 0 {
		return 0
	}
	return part * 100 / whole
}
