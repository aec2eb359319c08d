package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// recorder passes statements through to q and keeps their text and
// arguments, so that the test explains exactly what the store sends.
type recorder struct {
	q     querier
	label string
	calls []recordedCall
}

type recordedCall struct {
	label string
	sql   string
	args  []any
}

func (r *recorder) keep(sql string, args []any) {
	label := r.label
	if n := len(r.calls); n > 0 && r.calls[n-1].label == label {
		label += "/then" // a step's second statement (OldestDue's reading by the due index)
	}
	r.calls = append(r.calls, recordedCall{label: label, sql: sql, args: append([]any(nil), args...)})
}

func (r *recorder) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	r.keep(sql, args)
	return r.q.Exec(ctx, sql, args...)
}

func (r *recorder) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	r.keep(sql, args)
	return r.q.Query(ctx, sql, args...)
}

func (r *recorder) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	r.keep(sql, args)
	return r.q.QueryRow(ctx, sql, args...)
}

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	PlanRows     float64    `json:"Plan Rows"`
	Plans        []planNode `json:"Plans"`
}

// syntheticStore opens a migrated store on a fresh schema that holds
// 100,000 operations of tenant (LoadSynthetic, with their history or
// without), and a connection to it for EXPLAIN; both close when the test
// ends.
func syntheticStore(t *testing.T, tenant string, history bool) (*Store, string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, LoadSynthetic(ctx, dsn, tenant, 100_000, history))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return s, dsn, conn
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// TestClaimPathUsesIndexes checks, with EXPLAIN on a table of 100,000
// operations after ANALYZE, that the statements on the claim path use an
// index and never scan a table sequentially, and that the queue queries
// (due, uncertain, expired leases) take their order from an index instead
// of sorting every match. The statements are the ones the store really
// sends, captured from its reader and transaction; both the plan for the
// actual values and the generic plan of the prepared statement (which pgx
// reuses) are checked.
func TestClaimPathUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tenant = "plan"
	s, dsn, conn := syntheticStore(t, tenant, true)
	// A few due operations of the tenant, and a backlog of another one
	// that a claim of this tenant must not wade through.
	_, err := InsertDue(ctx, dsn, tenant, "due:", 20)
	require.NoError(t, err)
	_, err = InsertDue(ctx, dsn, "busy", "due:", 20000)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ANALYZE operations")
	require.NoError(t, err)
	// Operator decisions: plain ones, as this release writes them, and a
	// few keyed ones, as a release before 6 December 2026 wrote them.
	_, err = conn.Exec(ctx, `INSERT INTO recoveries (tenant, key, decision, at, waited)
		SELECT 'plan', CASE WHEN i <= 50 THEN 'old:' || i ELSE '' END, 'retry', now() - interval '1 hour', 1000
		FROM generate_series(1, 100000) AS i`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ANALYZE recoveries")
	require.NoError(t, err)

	rec := &recorder{q: s.pool}
	r := &reader{q: rec}
	now, err := r.Now(ctx)
	require.NoError(t, err)
	rec.calls = nil // the clock read is no query on a table
	step := func(label string, fn func() error) {
		t.Helper()
		rec.label = label
		require.NoError(t, fn(), label)
	}
	step("GetOperation", func() error { _, err := r.GetOperation(ctx, tenant, "bulk:00004242"); return err })
	step("GetAttempt", func() error { _, err := r.GetAttempt(ctx, tenant, "bulk:00004242", "bulk-00004242"); return err })
	step("ListTimeline", func() error { _, err := r.ListTimeline(ctx, tenant, "bulk:00004242"); return err })
	step("LastTimelineEntry", func() error { return found(r.LastTimelineEntry(ctx, tenant, "bulk:00004242")) })
	step("CountTimeline", func() error {
		_, err := r.CountTimeline(ctx, store.TimelineCount{Tenant: tenant, Key: "bulk:00004242", SinceState: "uncertain",
			Event: "reconcile deferred", ReasonPrefix: "lookup failed: "})
		return err
	})
	step("DueOperations/tenant", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Tenant: tenant, Now: now, Limit: 1})
		return err
	})
	step("DueOperations/all_tenants", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Now: now, Limit: 1})
		return err
	})
	step("DueOperations/destinations", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Tenant: tenant, Destinations: []string{"crm"}, Now: now, Limit: 1})
		return err
	})
	step("UncertainDue", func() error { _, err := r.UncertainDue(ctx, store.DueParams{Now: now, Limit: 100}); return err })
	step("UncertainDue/destinations", func() error {
		_, err := r.UncertainDue(ctx, store.DueParams{Now: now, Limit: 100, Destinations: []string{"crm"}})
		return err
	})
	step("OldestDue", func() error { _, _, err := r.OldestDue(ctx, tenant, now); return err })
	step("OldestDue/all", func() error { _, _, err := r.OldestDue(ctx, "", now); return err })
	step("OldestAwaitingApproval", func() error { _, _, err := r.OldestAwaitingApproval(ctx, tenant); return err })
	step("OldestAwaitingApproval/all", func() error { _, _, err := r.OldestAwaitingApproval(ctx, ""); return err })
	step("ExpiredLeases", func() error { _, err := r.ExpiredLeases(ctx, now, store.OperationID{}, 200); return err })
	step("FinalBefore", func() error {
		_, err := r.FinalBefore(ctx, store.FinalParams{Before: now, After: store.FinalRow{UpdatedAt: now.Add(-time.Hour)}, Limit: 200})
		return err
	})
	step("ListOperations/state", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"held"}, Limit: 50})
		return err
	})
	step("ListOperations/succeeded", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"succeeded"}, Limit: 50})
		return err
	})
	step("ListOperations/except_cancelled", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"failed"}, ExceptCancelled: true, Limit: 50})
		return err
	})
	step("CountFailedNeedingDecision", func() error { _, err := r.CountFailedNeedingDecision(ctx, tenant); return err })
	step("CountFailedByKind", func() error { _, err := r.CountFailedByKind(ctx, tenant); return err })
	step("ListOperations/duplicates", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, Duplicates: true, Limit: 50})
		return err
	})

	// Inside a write transaction, rolled back: the locking forms.
	tx, err := s.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	txRec := &recorder{q: tx}
	w := &pgTx{reader{q: txRec, inTx: true}}
	txStep := func(label string, fn func() error) {
		t.Helper()
		txRec.label = label
		require.NoError(t, fn(), label)
	}
	txStep("LockDue/tenant", func() error {
		_, err := w.LockDue(ctx, store.DueParams{Tenant: tenant, Now: now, Limit: 1})
		return err
	})
	txStep("LockDue/all_tenants", func() error {
		_, err := w.LockDue(ctx, store.DueParams{Now: now, Limit: 1})
		return err
	})
	// Retention's batch: fifty operations of the tenant, locked, and
	// their attempts counted.
	batch := make([]store.OperationID, 50)
	for i := range batch {
		batch[i] = store.OperationID{Tenant: tenant, Key: fmt.Sprintf("bulk:%08d", 5000+i)}
	}
	var locked []*store.Operation
	txStep("LockOperations", func() error {
		locked, err = w.LockOperations(ctx, batch)
		if err == nil && len(locked) != len(batch) {
			err = fmt.Errorf("locked %d of %d", len(locked), len(batch))
		}
		return err
	})
	txStep("CountAttempts", func() error {
		counts, err := w.CountAttempts(ctx, batch)
		if err == nil && len(counts) == 0 {
			err = fmt.Errorf("no attempts counted")
		}
		return err
	})
	txStep("CompactOperations", func() error {
		cs := make([]store.Compaction, len(locked))
		for i, op := range locked {
			cs[i] = store.Compaction{Revision: op.Revision, Tombstone: store.Tombstone{Tenant: op.Tenant, Key: op.Key,
				Fingerprint: op.Fingerprint, State: op.State, CreatedAt: op.CreatedAt, FinishedAt: op.UpdatedAt, CompactedAt: now}}
		}
		start := len(txRec.calls)
		if err := w.CompactOperations(ctx, cs); err != nil {
			return err
		}
		// The tombstones' insert reads no table, and the running totals
		// (written one by one outside a transaction) have a row per
		// tenant; the deletes, one per table, must find their rows by
		// key.
		var deletes []recordedCall
		for _, c := range txRec.calls[start:] {
			for _, table := range []string{"operations", "timeline", "attempts"} {
				if strings.Contains(c.sql, "DELETE FROM "+table+"\n") {
					c.label = "CompactOperations/" + table
					deletes = append(deletes, c)
				}
			}
		}
		if len(deletes) != 3 {
			return fmt.Errorf("%d deletes, not one per table", len(deletes))
		}
		txRec.calls = append(txRec.calls[:start], deletes...)
		return nil
	})
	var op *store.Operation
	txStep("GetOperation/for_update", func() error { op, err = w.GetOperation(ctx, tenant, "due:00000001"); return err })
	txStep("UpdateOperation", func() error {
		prev := op.Revision
		op.Revision++
		return w.UpdateOperation(ctx, op, prev)
	})
	txStep("UpdateAttempt", func() error {
		a, err := w.GetAttempt(ctx, tenant, "bulk:00004242", "bulk-00004242")
		if err != nil {
			return err
		}
		txRec.calls = txRec.calls[:len(txRec.calls)-1] // the read is checked above
		a.Outcome = "succeeded"
		return w.UpdateAttempt(ctx, a)
	})
	txStep("ForgetRecoveryKeysBefore", func() error {
		n, err := w.ForgetRecoveryKeysBefore(ctx, now, 1000)
		if err == nil && n != 50 {
			err = fmt.Errorf("cleared %d keys, not 50", n)
		}
		return err
	})
	require.NoError(t, tx.Rollback(ctx))

	calls := append(rec.calls, txRec.calls...)
	require.Len(t, calls, len(wantIndex), "one statement per step")
	for i, c := range calls {
		ordered := strings.Contains(c.sql, "ORDER BY") && !sortsFew[c.label]
		custom := explainPlan(t, conn, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...)
		checkPlan(t, c.label+" (custom plan)", custom, ordered, wantIndex[c.label])
		if !strings.HasPrefix(strings.TrimSpace(c.sql), "SELECT") {
			continue
		}
		generic := explainGeneric(t, conn, fmt.Sprintf("plan_check_%d", i), c)
		checkPlan(t, c.label+" (generic plan)", generic, ordered, wantIndex[c.label])
	}
}

// TestListByStateEstimates checks that the planner estimates how many of
// a tenant's operations a list by state reads to within a factor of three
// of the truth, for the states of operations_not_succeeded: a tenth of it,
// as when the index's condition was spelled out beside a state parameter,
// made the planner list the uncertain operations of a large ledger through
// operations_uncertain and sort them all (stateLiterals).
func TestListByStateEstimates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tenant = "plan"
	s, _, conn := syntheticStore(t, tenant, false)

	rec := &recorder{q: s.pool}
	r := &reader{q: rec}
	states := [][]string{{"uncertain"}, {"held"}, {"failed"}, {"in_progress"}, {"held", "uncertain"}}
	for _, st := range states {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: st, Limit: 50})
		require.NoError(t, err)
	}
	require.Len(t, rec.calls, len(states))
	for i, c := range rec.calls {
		var actual int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM operations WHERE tenant = $1 AND state = ANY($2)`,
			tenant, states[i]).Scan(&actual))
		require.Positive(t, actual)
		estimated := -1.0
		explainPlan(t, conn, "EXPLAIN (FORMAT JSON) "+c.sql, c.args...).walk(func(n planNode) {
			if n.RelationName == "operations" {
				estimated = n.PlanRows
			}
		})
		require.Positive(t, estimated, "%v: no scan of operations", states[i])
		require.True(t, estimated >= float64(actual)/3 && estimated <= float64(actual)*3,
			"%v: the planner expects %.0f operations where there are %d", states[i], estimated, actual)
		t.Logf("%v: %.0f estimated, %d there", states[i], estimated, actual)
	}
	// The states are written into the statement: anything but a state
	// name is refused, never quoted.
	_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"held", "x' OR '1'='1"}, Limit: 5})
	require.ErrorContains(t, err, `"x' OR '1'='1" is not a state name`)
}

// explainGeneric explains the generic plan of c's statement, prepared as
// name, as a prepared statement reused many times may get it.
func explainGeneric(t *testing.T, conn *pgx.Conn, name string, c recordedCall) planNode {
	t.Helper()
	ctx := context.Background()
	_, err := conn.Exec(ctx, "PREPARE "+name+" AS "+c.sql)
	require.NoError(t, err, c.label)
	_, err = conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan")
	require.NoError(t, err)
	execute := "EXECUTE " + name
	if len(c.args) > 0 { // a statement without parameters takes no parentheses
		execute += "(" + executeLiterals(t, c.args) + ")"
	}
	generic := explainPlan(t, conn, "EXPLAIN (FORMAT JSON) "+execute)
	_, err = conn.Exec(ctx, "RESET plan_cache_mode")
	require.NoError(t, err)
	return generic
}

func explainPlan(t *testing.T, conn *pgx.Conn, sql string, args ...any) planNode {
	t.Helper()
	var raw []byte
	require.NoError(t, conn.QueryRow(context.Background(), sql, args...).Scan(&raw), sql)
	var out []struct {
		Plan planNode `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &out))
	require.Len(t, out, 1)
	return out[0].Plan
}

// wantIndex names the indexes each statement is built for; the plan must
// use one of them. Since migration 011 the primary keys of attempts and
// timeline begin with the operation's (tenant, key). A tenant's claim uses
// operations_due, so that another tenant's backlog of due operations is
// never read.
var wantIndex = map[string][]string{
	"GetOperation":                 {"operations_pkey"},
	"GetOperation/for_update":      {"operations_pkey"},
	"UpdateOperation":              {"operations_pkey"},
	"GetAttempt":                   {"attempts_pkey"},
	"ListTimeline":                 {"timeline_pkey"},
	"LastTimelineEntry":            {"timeline_pkey"},
	"CountTimeline":                {"timeline_pkey"},
	"UpdateAttempt":                {"attempts_pkey"},
	"DueOperations/tenant":         {"operations_due"},
	"DueOperations/destinations":   {"operations_due"},
	"LockDue/tenant":               {"operations_due"},
	"DueOperations/all_tenants":    {"operations_due_all"},
	"LockDue/all_tenants":          {"operations_due_all"},
	"UncertainDue":                 {"operations_uncertain"},
	"UncertainDue/destinations":    {"operations_uncertain"},
	"ExpiredLeases":                {"operations_not_succeeded"},
	"FinalBefore":                  {"operations_final"},
	"LockOperations":               {"operations_pkey"},
	"CountAttempts":                {"attempts_pkey"},
	"CompactOperations/operations": {"operations_pkey"},
	"CompactOperations/timeline":   {"timeline_pkey"},
	"CompactOperations/attempts":   {"attempts_pkey"},
	"ListOperations/state":         {"operations_not_succeeded"},
	"ListOperations/succeeded":     {"operations_tenant_created"},
	"ListOperations/duplicates":    {"operations_duplicates"},
	// The exception queue's failed operations and their count: the
	// operation's own timeline tells a cancelled workflow's step.
	"ListOperations/except_cancelled": {"operations_not_succeeded"},
	"CountFailedNeedingDecision":      {"operations_not_succeeded"},
	"CountFailedByKind":               {"operations_not_succeeded"},
	// OldestDue reads the oldest pending operations in order, and only
	// if more than store.OldestDueScanRows of them wait for a retry, the
	// due ones (/then).
	"OldestDue":          {"operations_not_succeeded"},
	"OldestDue/then":     {"operations_due", "operations_due_all"},
	"OldestDue/all":      {"operations_not_succeeded", "operations_due_all"},
	"OldestDue/all/then": {"operations_due_all", "operations_due"},
	// The operations awaiting approval, sorted by their last change.
	"OldestAwaitingApproval":     {"operations_not_succeeded", "operations_tenant_state_created"},
	"OldestAwaitingApproval/all": {"operations_not_succeeded"},
	// The recoveries an older release stored with their key (migration
	// 028), not the whole table of decisions.
	"ForgetRecoveryKeysBefore": {"recoveries_keyed"},
}

// sortsFew are the statements allowed to sort their matches, because
// there are few: the operations with duplicate effects, read through their
// partial index, are each an incident of a destination acting twice; the
// expired leases are in_progress operations, one per running claim;
// retention's batch is the operations it names, fifty at most.
//
// OldestDue's reading by the due index (/then) is not among the few,
// but its sort keeps only the first row (LIMIT 1: a top-1 heap, what MIN
// would cost); across tenants its first reading sorts the first rows of
// each tenant's pending operations. Nor, under a policy that makes every
// payment wait, need the operations awaiting approval be few;
// OldestAwaitingApproval's sort keeps one row too.
var sortsFew = map[string]bool{"ListOperations/duplicates": true, "ExpiredLeases": true, "LockOperations": true,
	"OldestDue/all": true, "OldestDue/then": true, "OldestDue/all/then": true,
	"OldestAwaitingApproval": true, "OldestAwaitingApproval/all": true}

// checkPlan fails on a sequential scan, on a plan that uses none of the
// indexes want, and on a sort in a query that must take its order from an
// index. An incremental sort reads in the index's order and sorts only
// the rows equal on its columns (FinalBefore's of one updated_at).
func checkPlan(t *testing.T, label string, plan planNode, ordered bool, want []string) {
	t.Helper()
	var nodes, indexes []string
	plan.walk(func(n planNode) {
		nodes = append(nodes, n.NodeType)
		if n.IndexName != "" {
			indexes = append(indexes, n.IndexName)
		}
		require.NotEqual(t, "Seq Scan", n.NodeType, "%s: sequential scan of %s", label, n.RelationName)
		if ordered && n.NodeType != "Incremental Sort" {
			require.NotContains(t, n.NodeType, "Sort", "%s: sorts its matches instead of reading them in index order (%s)", label, n.NodeType)
		}
	})
	require.True(t, slices.ContainsFunc(indexes, func(ix string) bool { return slices.Contains(want, ix) }),
		"%s: uses %v, none of %v (plan: %v)", label, indexes, want, nodes)
	t.Logf("%-40s %v using %v", label, nodes, indexes)
}

// executeLiterals renders the arguments of a captured statement as SQL literals
// for EXECUTE.
func executeLiterals(t *testing.T, args []any) string {
	t.Helper()
	out := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = quoteLiteral(v)
		case int, int64:
			out[i] = fmt.Sprint(v)
		case []string:
			q := make([]string, len(v))
			for j, s := range v {
				q[j] = quoteLiteral(s)
			}
			out[i] = "ARRAY[" + strings.Join(q, ", ") + "]::text[]"
		case pgtype.Timestamptz:
			require.True(t, v.Valid, "argument %d: a NULL timestamp", i)
			out[i] = quoteLiteral(v.Time.UTC().Format(time.RFC3339Nano)) + "::timestamptz"
		default:
			t.Fatalf("argument %d: no literal for %T", i, a)
		}
	}
	return strings.Join(out, ", ")
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// found is the error of a read of one row, nil for a row not there: the
// plan is the same whether the operation has one.
func found[T any](_ T, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	return err
}
