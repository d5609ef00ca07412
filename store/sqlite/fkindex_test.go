package sqlite

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// Deleting a row that other rows refer to looks those up by their foreign key (to cascade, set
// NULL or refuse), under the one writer's lock: each lookup must go through an index, not a scan
// of the child table. Before migration 00019 deleting a session scanned every run the retention
// keeps (runs.session_id had only the partial runs_one_running, which a cascade cannot use).
// The statements are the parents' deletes by the key their children name, whatever the schema
// has: a new foreign key without an index fails here.
func TestDeletingAParentSearchesItsChildrenByIndex(t *testing.T) {
	s := openTemp(t)
	defer s.Close()
	ctx := context.Background()
	rows, err := s.db.QueryContext(ctx, `SELECT DISTINCT p."table", p."to" FROM sqlite_schema m, pragma_foreign_key_list(m.name) p
		WHERE m.type = 'table' ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	type parent struct{ table, key string }
	var parents []parent
	for rows.Next() {
		var p parent
		if err := rows.Scan(&p.table, &p.key); err != nil {
			t.Fatal(err)
		}
		parents = append(parents, p)
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	if len(parents) < 3 { // sessions, resources, projects
		t.Fatalf("parents %v: is the query right?", parents)
	}
	for _, p := range parents {
		q := `DELETE FROM ` + p.table + ` WHERE ` + p.key + ` = ?`
		plan := queryPlan(t, s, q, 1)
		if slices.ContainsFunc(plan, func(step string) bool { return strings.HasPrefix(step, "SCAN") }) {
			t.Errorf("%s:\n  %s", q, strings.Join(plan, "\n  "))
		}
	}
}
