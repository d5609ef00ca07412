package postgres

import (
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// One row merged. A merged statement takes its rows from arrays (unnest), which suits a batch of
// many writes; but under load about half the batches hold one write (a caller that finds a
// writer slot free while the other commits), merged all the same (groupcommit's MergeAlone),
// and for one row the arrays cost the backend more than the rows: PostgreSQL plans the generic
// statement for the hundred rows it guesses an unnest of a parameter gives (sorts, hash joins),
// or plans it anew each time because that guess makes the generic plan look dearer than a
// custom one. Each merged statement has a twin for one row (oneRow), the same statement with its
// rows taken from a VALUES list of the arrays' first elements: the same checks, the same rows
// stored and returned, planned for one row.

// oneRowTwins are the one-row twins of the merged statements, by their text.
var oneRowTwins = func() map[string]string {
	m := make(map[string]string)
	for _, q := range []string{mergedBeginSQL, mergedTurnsSQL, mergedAnswersSQL, mergedForeseenSQL, mergedEndsSQL} {
		m[q] = oneRow(q)
	}
	return m
}()

var (
	unnestRE   = regexp.MustCompile(`unnest\(([^()]*)\) AS `)
	arrayArgRE = regexp.MustCompile(`\$([0-9]+)::([a-z0-9]+)\[\]`)
)

// oneRow returns the merged statement q with its unnest of arrays made a VALUES list of one row
// of their elements, and each other use of an array parameter ($n::type[]) an array of that
// one element.
func oneRow(q string) string {
	q = unnestRE.ReplaceAllStringFunc(q, func(u string) string {
		list := unnestRE.FindStringSubmatch(u)[1]
		return "(VALUES (" + arrayArgRE.ReplaceAllString(list, "$$$1::$2") + ")) AS "
	})
	return arrayArgRE.ReplaceAllString(q, "ARRAY[$$$1::$2]")
}

// mergedStatement returns the statement to send for the merged statement q with args (an array
// each, as many elements each): q's one-row twin with the arrays' elements if they hold one,
// else q and args.
func mergedStatement(q string, args []any) (string, []any, error) {
	twin, ok := oneRowTwins[q]
	if !ok || len(args) == 0 {
		return q, args, nil
	}
	one := make([]any, len(args))
	for i, a := range args {
		var (
			v any
			n int
		)
		switch a := a.(type) {
		case []string:
			v, n = lone(a)
		case []pgtype.Text:
			v, n = lone(a)
		case []pgtype.Bool:
			v, n = lone(a)
		case []int64:
			v, n = lone(a)
		case []int32:
			v, n = lone(a)
		case []float64:
			v, n = lone(a)
		case []time.Time:
			v, n = lone(a)
		case [][]byte:
			v, n = lone(a)
		default:
			return "", nil, fmt.Errorf("postgres: merged statement: argument %d is a %T", i+1, a)
		}
		if n != 1 {
			return q, args, nil
		}
		one[i] = v
	}
	return twin, one, nil
}

// lone returns a's element if it holds one, and its length.
func lone[T any](a []T) (any, int) {
	if len(a) == 1 {
		return a[0], 1
	}
	return nil, len(a)
}
