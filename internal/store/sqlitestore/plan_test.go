package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
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

func (r *recorder) keep(query string, args []any) {
	r.calls = append(r.calls, recordedCall{label: r.label, sql: query, args: append([]any(nil), args...)})
}

func (r *recorder) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.keep(query, args)
	return r.q.ExecContext(ctx, query, args...)
}

func (r *recorder) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.keep(query, args)
	return r.q.QueryContext(ctx, query, args...)
}

func (r *recorder) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.keep(query, args)
	return r.q.QueryRowContext(ctx, query, args...)
}

// wantIndex names the indexes each statement is built for (migrations 001,
// 002, 005, 007 and 008); its plan must search the table through one of
// them.
var wantIndex = map[string][]string{
	"GetOperation":       {"operations_key"},
	"GetOperation/in_tx": {"operations_key"},
	"UpdateOperation":    {"operations_key"},
	"GetAttempt":         {"PRIMARY KEY (operation_id=? AND id=?)"},
	"ListAttempts":       {"PRIMARY KEY (operation_id=?)"},
	"ListTimeline":       {"PRIMARY KEY (operation_id=?)"},
	"LastTimelineEntry":  {"PRIMARY KEY (operation_id=?)"},
	// The entries after the newest into a state: that one found back
	// from the newest, the count read on from it.
	"CountTimeline":              {"PRIMARY KEY (operation_id=? AND seq>?)"},
	"DueOperations/tenant":       {"operations_due"},
	"DueOperations/destinations": {"operations_due"},
	"LockDue/tenant":             {"operations_due"},
	"DueOperations/all_tenants":  {"operations_due_all"},
	"LockDue/all_tenants":        {"operations_due_all"},
	"UncertainDue":               {"operations_uncertain"},
	"UncertainDue/destinations":  {"operations_uncertain"},
	"ExpiredLeases":              {"COVERING INDEX operations_not_succeeded (state=?"},
	"FinalBefore":                {"operations_final"},
	"ListOperations/tenant":      {"operations_tenant_created"},
	"ListOperations/cursor":      {"operations_tenant_created (tenant=? AND created_at<?)"},
	"ListOperations/state":       {"operations_not_succeeded (state=? AND tenant=?)"},
	"ListOperations/succeeded":   {"operations_tenant_created (tenant=?)"},
	// Several states but the succeeded one (the exception queue): one
	// search of operations_not_succeeded per state, merged in order.
	"ListOperations/states":        {"operations_not_succeeded (state=? AND tenant=?)"},
	"ListOperations/states_cursor": {"operations_not_succeeded (state=? AND tenant=? AND created_at<?)"},
	"CountByState":                 {"operations_not_succeeded", "operations_tenant_created (tenant=?)"},
	"ListOperations/duplicates":    {"operations_duplicates (tenant=? AND duplicate_effects>?)"},
	// The exception queue's failed operations and their count: the
	// operation's own timeline tells a cancelled workflow's step.
	"ListOperations/except_cancelled": {"operations_not_succeeded (state=? AND tenant=?)"},
	"CountFailedNeedingDecision":      {"operations_not_succeeded (state=? AND tenant=?)"},
	"CountFailedByKind":               {"operations_not_succeeded (state=? AND tenant=?)"},
	// The events page's and the dashboard's counts, at each load: each
	// table searched by tenant, never scanned.
	"EventCounts": {"events_status (tenant=?)", "deliveries_tenant (tenant=?)", "PRIMARY KEY (tenant=?)"},
	// The held operations by review time (migration 014).
	"ListOperations/review":        {"operations_held_review (tenant=?)"},
	"ListOperations/review_cursor": {"operations_held_review (tenant=? AND review_by>?)"},
	"CountOverdueReviews":          {"operations_held_review (tenant=? AND review_by<?)"},
	"CountOverdueReviews/all":      {"operations_held_review"},
	// OldestDue reads the oldest pending operations in order (this
	// fixture's tenant has few pending operations, so never the due ones
	// by operations_due, which storecheck.OldestDue exercises).
	"OldestDue":     {"operations_not_succeeded (state=? AND tenant=?)"},
	"OldestDue/all": {"operations_not_succeeded (state=?)"},
	// The operations awaiting approval, sorted by their last change.
	"OldestAwaitingApproval":     {"operations_not_succeeded (state=? AND tenant=?)"},
	"OldestAwaitingApproval/all": {"operations_not_succeeded (state=?)"},
	// Retention (migration 012): each runs several statements, every one
	// of them through an index.
	"CompactDeliveriesBefore":  {"deliveries_received", "INTEGER PRIMARY KEY"},
	"ForgetEventsBefore":       {"deliveries_event", "events_received_all", "PRIMARY KEY (tenant=? AND source=? AND event_id=?)"},
	"ForgetEventObjectsBefore": {"event_objects_updated", "PRIMARY KEY (tenant=? AND source=? AND object_key=?)"},
	"ForgetWorkflowsBefore":    {"workflows_done", "PRIMARY KEY (tenant=? AND key=?)"},
	"DeleteTombstonesBefore":   {"tombstones_compacted", "workflows_open (tenant=? AND current_key=?)"},
	"DeleteSessionsBefore":     {"sessions_expires"},
	// The recoveries an older release stored with their key (migration
	// 028), not the whole table of decisions.
	"ForgetRecoveryKeysBefore": {"recoveries_keyed (at<?)"},
}

// readsTableBy names, for some steps, the index every search of a table
// must use: forgetting events reads their deliveries by event, where
// SQLite without statistics would rather range over all of a tenant's.
var readsTableBy = map[string]map[string]string{
	"ForgetEventsBefore": {"deliveries": "deliveries_event"},
}

// sortsFew are the statements allowed to sort their matches, because
// there are few: ListAttempts reads the history of one operation, whose
// attempts are stored in id order (migration 008) and listed in number
// order, and an operation has a handful of attempts (its retry policy's
// MaxAttempts); the list of operations with duplicate effects reads the
// partial index of those, each one an incident of a destination acting
// twice.
//
// OldestDue across tenants is not among the few, but its sort keeps only
// the first store.OldestDueScanRows+1 rows (SQLite's sorter holds no more
// than the LIMIT). Nor, under a policy that makes every payment wait,
// need the operations awaiting approval be few; OldestAwaitingApproval's
// sort keeps one row, reading each of them once (what MIN would cost).
var sortsFew = map[string]bool{"ListAttempts": true, "ListOperations/duplicates": true, "OldestDue/all": true,
	"OldestAwaitingApproval": true, "OldestAwaitingApproval/all": true}

var errRollback = errors.New("roll back")

// syntheticLedger opens a migrated store on a new file holding n synthetic
// operations of tenant (with their history when history), closed when
// the test ends, and returns it with the file's path.
func syntheticLedger(t *testing.T, tenant string, n int, history bool) (*Store, string) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s, err := Open(ctx, path, Options{SynchronousNormal: true})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, LoadSynthetic(ctx, path, tenant, n, history))
	return s, path
}

// TestClaimPathUsesIndexes checks, with EXPLAIN QUERY PLAN on a table of
// 10,000 operations after ANALYZE (kept small because the pure-Go SQLite
// runs many times slower under the race detector; BenchmarkClaim covers
// 1,000,000), that the statements on the claim path
// search a table through an index ("USING INDEX", "USING PRIMARY KEY"),
// never scan it ("SCAN operations"), and that the queue queries (due,
// uncertain, expired leases) read their matches in index order instead of
// sorting them ("USE TEMP B-TREE FOR ORDER BY"). The statements are the
// ones the store really sends, captured from its reader and transaction.
func TestClaimPathUsesIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tenant = "plan"
	s, path := syntheticLedger(t, tenant, 10_000, true)
	// A few due operations of the tenant, and a backlog of another one
	// that a claim of this tenant must not wade through.
	_, err := InsertDue(ctx, path, tenant, "due:", 20)
	require.NoError(t, err)
	_, err = InsertDue(ctx, path, "busy", "due:", 5000)
	require.NoError(t, err)
	insertRecoveries(t, path, 5000, 50)
	require.NoError(t, Analyze(ctx, path))

	rec := &recorder{q: s.reader}
	r := &sqlReader{q: rec}
	now, err := r.Now(ctx)
	require.NoError(t, err)
	step := func(rec *recorder, label string, fn func() error) {
		t.Helper()
		rec.label = label
		require.NoError(t, fn(), label)
	}
	step(rec, "GetOperation", func() error { _, err := r.GetOperation(ctx, tenant, "bulk:00004242"); return err })
	step(rec, "GetAttempt", func() error { _, err := r.GetAttempt(ctx, tenant, "bulk:00004242", "bulk-00004242"); return err })
	step(rec, "ListAttempts", func() error { _, err := r.ListAttempts(ctx, tenant, "bulk:00004242"); return err })
	step(rec, "ListTimeline", func() error { _, err := r.ListTimeline(ctx, tenant, "bulk:00004242"); return err })
	step(rec, "LastTimelineEntry", func() error {
		// The plan is the same whether the operation has an entry.
		if _, err := r.LastTimelineEntry(ctx, tenant, "bulk:00004242"); !errors.Is(err, store.ErrNotFound) {
			return err
		}
		return nil
	})
	step(rec, "CountTimeline", func() error {
		_, err := r.CountTimeline(ctx, store.TimelineCount{Tenant: tenant, Key: "bulk:00004242", SinceState: "uncertain",
			Event: "reconcile deferred", ReasonPrefix: "lookup failed: "})
		return err
	})
	step(rec, "DueOperations/tenant", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Tenant: tenant, Now: now, Limit: 1})
		return err
	})
	step(rec, "DueOperations/all_tenants", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Now: now, Limit: 1})
		return err
	})
	step(rec, "DueOperations/destinations", func() error {
		_, err := r.DueOperations(ctx, store.DueParams{Tenant: tenant, Destinations: []string{"crm"}, Now: now, Limit: 1})
		return err
	})
	step(rec, "UncertainDue", func() error { _, err := r.UncertainDue(ctx, store.DueParams{Now: now, Limit: 100}); return err })
	step(rec, "UncertainDue/destinations", func() error {
		_, err := r.UncertainDue(ctx, store.DueParams{Now: now, Limit: 100, Destinations: []string{"crm"}})
		return err
	})
	step(rec, "ExpiredLeases", func() error { _, err := r.ExpiredLeases(ctx, now, store.OperationID{}, 200); return err })
	step(rec, "FinalBefore", func() error {
		_, err := r.FinalBefore(ctx, store.FinalParams{Before: now, After: store.FinalRow{UpdatedAt: now.Add(-time.Hour)}, Limit: 200})
		return err
	})
	step(rec, "ListOperations/tenant", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, Limit: 50})
		return err
	})
	step(rec, "ListOperations/cursor", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, AfterAt: now.Add(-time.Hour), AfterKey: "bulk:00004242", Limit: 50})
		return err
	})
	step(rec, "ListOperations/state", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"held"}, Limit: 50})
		return err
	})
	step(rec, "ListOperations/states", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"held", "uncertain", "failed"}, Limit: 50})
		return err
	})
	step(rec, "ListOperations/states_cursor", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"failed", "held", "uncertain", "held"},
			Owner: "bulk-team", Destination: "crm", AfterAt: now.Add(-time.Hour), AfterKey: "bulk:00004242", Limit: 50})
		return err
	})
	step(rec, "ListOperations/succeeded", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"succeeded"}, Limit: 50})
		return err
	})
	step(rec, "CountByState", func() error { _, err := r.CountByState(ctx, tenant); return err })
	step(rec, "ListOperations/duplicates", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, Duplicates: true, Limit: 50})
		return err
	})
	step(rec, "ListOperations/except_cancelled", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, States: []string{"failed"}, ExceptCancelled: true, Limit: 50})
		return err
	})
	step(rec, "CountFailedNeedingDecision", func() error { _, err := r.CountFailedNeedingDecision(ctx, tenant); return err })
	step(rec, "CountFailedByKind", func() error { _, err := r.CountFailedByKind(ctx, tenant); return err })
	step(rec, "EventCounts", func() error { _, err := r.EventCounts(ctx, tenant); return err })
	step(rec, "ListOperations/review", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, ByReview: true, Limit: 50})
		return err
	})
	step(rec, "ListOperations/review_cursor", func() error {
		_, err := r.ListOperations(ctx, store.ListParams{Tenant: tenant, ByReview: true, AfterAt: now, AfterKey: "held:1", Limit: 50})
		return err
	})
	step(rec, "CountOverdueReviews", func() error { _, err := r.CountOverdueReviews(ctx, tenant, now); return err })
	step(rec, "CountOverdueReviews/all", func() error { _, err := r.CountOverdueReviews(ctx, "", now); return err })
	step(rec, "OldestDue", func() error { _, _, err := r.OldestDue(ctx, tenant, now); return err })
	step(rec, "OldestDue/all", func() error { _, _, err := r.OldestDue(ctx, "", now); return err })
	step(rec, "OldestAwaitingApproval", func() error { _, _, err := r.OldestAwaitingApproval(ctx, tenant); return err })
	step(rec, "OldestAwaitingApproval/all", func() error { _, _, err := r.OldestAwaitingApproval(ctx, ""); return err })

	// Inside a write transaction, rolled back.
	var txCalls []recordedCall
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		txRec := &recorder{q: tx.(*sqlTx).q}
		w := &sqlTx{sqlReader: sqlReader{q: txRec}}
		step(txRec, "LockDue/tenant", func() error {
			_, err := w.LockDue(ctx, store.DueParams{Tenant: tenant, Now: now, Limit: 1})
			return err
		})
		step(txRec, "LockDue/all_tenants", func() error {
			_, err := w.LockDue(ctx, store.DueParams{Now: now, Limit: 1})
			return err
		})
		var op *store.Operation
		step(txRec, "GetOperation/in_tx", func() error {
			var err error
			op, err = w.GetOperation(ctx, tenant, "due:00000001")
			return err
		})
		step(txRec, "UpdateOperation", func() error {
			prev := op.Revision
			op.Revision++
			return w.UpdateOperation(ctx, op, prev)
		})
		step(txRec, "CompactDeliveriesBefore", func() error { _, err := w.CompactDeliveriesBefore(ctx, now, 1000); return err })
		step(txRec, "ForgetEventsBefore", func() error { _, err := w.ForgetEventsBefore(ctx, now, 1000); return err })
		step(txRec, "ForgetEventObjectsBefore", func() error { _, err := w.ForgetEventObjectsBefore(ctx, now, 1000); return err })
		step(txRec, "ForgetWorkflowsBefore", func() error { _, err := w.ForgetWorkflowsBefore(ctx, now, 1000); return err })
		step(txRec, "DeleteTombstonesBefore", func() error { _, err := w.DeleteTombstonesBefore(ctx, now, 1000); return err })
		step(txRec, "DeleteSessionsBefore", func() error { _, err := w.DeleteSessionsBefore(ctx, now, 1000); return err })
		step(txRec, "ForgetRecoveryKeysBefore", func() error {
			n, err := w.ForgetRecoveryKeysBefore(ctx, now, 1000)
			if err == nil && n != 50 {
				err = fmt.Errorf("cleared %d keys, not 50", n)
			}
			return err
		})
		txCalls = txRec.calls
		return errRollback
	})
	require.ErrorIs(t, err, errRollback)

	calls := append(rec.calls, txCalls...)
	labels := map[string]bool{}
	for _, c := range calls {
		labels[c.label] = true
	}
	require.Len(t, labels, len(wantIndex), "every step ran")
	for _, c := range calls {
		checkQueryPlan(t, s.reader, c)
	}
}

// insertRecoveries adds operator decisions to the file at path: plain
// ones without a key, as this release writes them, and keyed ones, as a
// release before 6 December 2026 wrote them, all an hour old.
func insertRecoveries(t *testing.T, path string, plain, keyed int) {
	t.Helper()
	raw, err := openRawDB(path)
	require.NoError(t, err)
	defer raw.Close()
	at := toMicros(time.Now().Add(-time.Hour))
	_, err = raw.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
		INSERT INTO recoveries (tenant, key, decision, at, waited)
		SELECT 'plan', CASE WHEN i <= ? THEN 'old:' || i ELSE '' END, 'retry', ? + i, 1000 FROM n`, plain+keyed, keyed, at)
	require.NoError(t, err)
}

// queryPlan runs EXPLAIN QUERY PLAN on a statement and returns the
// details of its steps.
func queryPlan(t *testing.T, db *sql.DB, query string, args ...any) []string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	require.NoError(t, err, query)
	var details []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		require.NoError(t, rows.Scan(&id, &parent, &notUsed, &detail))
		details = append(details, detail)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, rows.Close())
	return details
}

// checkQueryPlan runs EXPLAIN QUERY PLAN on one captured statement.
func checkQueryPlan(t *testing.T, db *sql.DB, c recordedCall) {
	t.Helper()
	details := queryPlan(t, db, c.sql, c.args...)
	require.NotEmpty(t, details, c.label)
	want := wantIndex[c.label]
	used := false
	for _, d := range details {
		if strings.HasPrefix(d, "SCAN ") && !strings.Contains(d, " USING ") {
			t.Errorf("%s: scans a table: %q (plan %q)", c.label, d, details)
		}
		if strings.HasPrefix(d, "SEARCH t ") && !strings.Contains(d, "PRIMARY KEY (operation_id=?)") {
			t.Errorf("%s: reads the timeline other than by its operation: %q (plan %q)", c.label, d, details)
		}
		for table, ix := range readsTableBy[c.label] {
			if strings.HasPrefix(d, "SEARCH "+table+" ") && !strings.Contains(d, " INDEX "+ix+" ") {
				t.Errorf("%s: reads %s other than by %s (plan %q)", c.label, table, ix, details)
			}
		}
		if strings.Contains(c.sql, "ORDER BY") && strings.Contains(d, "TEMP B-TREE FOR ORDER BY") && !sortsFew[c.label] {
			t.Errorf("%s: sorts its matches instead of reading them in index order (plan %q)", c.label, details)
		}
		if (strings.Contains(d, "USING INDEX ") || strings.Contains(d, "USING COVERING INDEX ") || strings.Contains(d, "USING PRIMARY KEY")) &&
			slices.ContainsFunc(want, func(ix string) bool { return strings.Contains(d, ix) }) {
			used = true
		}
	}
	require.True(t, used, "%s: uses none of %v (plan %q)", c.label, want, details)
	t.Logf("%-28s %q", c.label, details)
}

// TestListStatesMerged checks the list of several states but the
// succeeded one, read as one search of operations_not_succeeded per state
// merged in order: page after page it returns exactly what a plain query
// of those states returns, in the same order (operations created in the
// same microsecond included, ordered by key), whatever the filters, and
// it reads the index with no statistics either, on a ledger with a
// backlog of pending operations, where SQLite left to choose reads the
// tenant's operations in creation order instead.
func TestListStatesMerged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tenant = "merge"
	s, path := syntheticLedger(t, tenant, 3000, false)
	// A backlog of pending operations all created in the same
	// microsecond, and the same keys in another tenant.
	_, err := InsertDue(ctx, path, tenant, "due:", 3000)
	require.NoError(t, err)
	_, err = InsertDue(ctx, path, "other", "bulk:", 500)
	require.NoError(t, err)
	raw, err := openRawDB(path)
	require.NoError(t, err)
	defer raw.Close()
	_, err = raw.ExecContext(ctx, `DROP TABLE sqlite_stat1`) // as the store runs: no ANALYZE
	require.NoError(t, err)

	r := &sqlReader{q: s.reader}
	keysOf := func(ops []*store.Operation) []string {
		out := []string{}
		for _, op := range ops {
			out = append(out, op.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		p     store.ListParams
		extra string // the plain query's filters
		args  []any
	}{
		{"exceptions", store.ListParams{States: []string{"held", "uncertain", "failed"}}, "", nil},
		{"repeated", store.ListParams{States: []string{"held", "held", "failed"}}, "", nil},
		{"backlog", store.ListParams{States: []string{"pending", "held"}}, "", nil},
		{"owner", store.ListParams{States: []string{"pending", "in_progress"}, Owner: "bench-team"}, " AND owner = ?", []any{"bench-team"}},
		{"destination", store.ListParams{States: []string{"held", "failed", "uncertain"}, Destination: "crm"}, " AND destination = ?", []any{"crm"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			states := slices.Compact(slices.Sorted(slices.Values(tc.p.States)))
			args := []any{tenant}
			for _, st := range states {
				args = append(args, st)
			}
			rows, err := raw.QueryContext(ctx, `SELECT key FROM operations WHERE tenant = ? AND state IN (?`+
				strings.Repeat(", ?", len(states)-1)+`)`+tc.extra+` ORDER BY created_at DESC, key DESC`, append(args, tc.args...)...)
			require.NoError(t, err)
			want := []string{}
			for rows.Next() {
				var k string
				require.NoError(t, rows.Scan(&k))
				want = append(want, k)
			}
			require.NoError(t, rows.Err())
			require.NotEmpty(t, want)

			p := tc.p
			p.Tenant, p.Limit = tenant, 97
			query, qargs := listQuery(p)
			details := queryPlan(t, s.reader, query, qargs...)
			for _, d := range details {
				require.NotContains(t, d, "operations_tenant_created", "plan %q", details)
				require.NotContains(t, d, "TEMP B-TREE", "plan %q", details)
			}
			var got []string
			for {
				page, err := r.ListOperations(ctx, p)
				require.NoError(t, err)
				got = append(got, keysOf(page)...)
				if len(page) < p.Limit {
					break
				}
				last := page[len(page)-1]
				p.AfterAt, p.AfterKey = last.CreatedAt, last.Key
			}
			require.Equal(t, want, got)
		})
	}
}
