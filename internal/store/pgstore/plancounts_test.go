package pgstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// TestTenantCountsUseIndexes checks the plans of the counts read at every
// events page (EventCounts) and by /v1/stats (Stats) for one tenant of a
// ledger of many: with the generic plan of their prepared statements,
// which PostgreSQL may choose after five executions (forced here with
// plan_cache_mode), each must search its table by tenant through an
// index, not scan it. One condition covering one tenant and all of them
// (an OR) could not (tenantIs).
func TestTenantCountsUseIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tenant = "plan"
	dsn := testdb.PostgresDSN(t)
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	require.NoError(t, s.Migrate(ctx, nil))
	require.NoError(t, LoadSynthetic(ctx, dsn, tenant, 500, true))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	// The tenant's operations and attempts, copied for 200 other
	// tenants; 20,000 tenants with a few rows each in the other tables.
	for _, q := range []string{
		`INSERT INTO operations SELECT (jsonb_populate_record(o, jsonb_build_object('tenant', 'other' || g))).*
			FROM operations o, generate_series(1, 200) g WHERE o.tenant = 'plan'`,
		`INSERT INTO attempts SELECT (jsonb_populate_record(a, jsonb_build_object('tenant', 'other' || g))).*
			FROM attempts a, generate_series(1, 200) g WHERE a.tenant = 'plan'`,
		`INSERT INTO events (tenant, source, event_id, type, payload_sha256, status, received_at)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, 'src', 'e' || i, 'ticket', 'x',
				(ARRAY['processed', 'ignored', 'failed'])[i % 3 + 1], now()
			FROM generate_series(0, 20000) g, generate_series(1, 5) i`,
		`INSERT INTO deliveries (tenant, source, event_id, received_at, duplicate, payload_sha256)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, 'src', 'e' || i, now(), i = 5, 'x'
			FROM generate_series(0, 20000) g, generate_series(1, 5) i`,
		`INSERT INTO compacted_events (tenant, status, events, deliveries, duplicate_deliveries)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, s, 10, 12, 2
			FROM generate_series(0, 20000) g, unnest(ARRAY['processed', 'ignored', 'failed']) s`,
		`INSERT INTO compacted_effects (tenant, confirmed, duplicates)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, 10, 1 FROM generate_series(0, 20000) g`,
		`INSERT INTO tombstones (tenant, key, fingerprint, state, created_at, finished_at, compacted_at, counted)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, 'gone:' || i, 'x', 'succeeded', now(), now(), now(), i > 2
			FROM generate_series(0, 20000) g, generate_series(1, 5) i`,
		`INSERT INTO compacted_attempts (tenant, destination, outcome, count)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, d, o, 3
			FROM generate_series(0, 20000) g, unnest(ARRAY['crm', 'mail']) d, unnest(ARRAY['succeeded', 'rejected']) o`,
		`INSERT INTO recoveries (tenant, key, decision, at, waited)
			SELECT CASE WHEN g = 0 THEN 'plan' ELSE 'other' || g END, '', 'retry', now(), i * 1000
			FROM generate_series(0, 20000) g, generate_series(1, 5) i`,
		// This schema's tables only: a bare ANALYZE analyzes every table
		// of the database, other tests' schemas too (TestFirstAnalyze
		// checks that the store analyzes its tables at the right time).
		`ANALYZE operations, attempts, events, deliveries, compacted_events, compacted_effects, tombstones,
			compacted_attempts, recoveries`,
	} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err, q)
	}

	rec := &recorder{q: s.pool}
	r := &reader{q: rec}
	var calls []recordedCall
	step := func(label string, fn func() error) {
		t.Helper()
		rec.calls = nil
		require.NoError(t, fn(), label)
		for i, c := range rec.calls {
			c.label = fmt.Sprintf("%s#%d", label, i+1)
			calls = append(calls, c)
		}
	}
	step("EventCounts", func() error { _, err := r.EventCounts(ctx, tenant); return err })
	step("Stats", func() error { _, err := r.Stats(ctx, tenant, []time.Duration{2 * time.Millisecond}); return err })

	want := map[string][]string{
		"EventCounts#1": {"events_status"},
		"EventCounts#2": {"deliveries_tenant"},
		"EventCounts#3": {"compacted_events_pkey"},
		"Stats#1":       {"operations_not_succeeded", "operations_tenant_created", "operations_pkey"}, // countByState
		"Stats#2":       {"operations_duplicates"},
		"Stats#3":       {"compacted_effects_pkey", "tombstones_uncounted"},
		"Stats#4":       {"attempts_outcome", "attempts_pkey", "compacted_attempts_pkey"},
		"Stats#5":       {"recoveries_tenant"}, // count and total
		"Stats#6":       {"recoveries_tenant"}, // the 90th percentile
		"Stats#7":       {"recoveries_tenant"}, // the bucket
	}
	require.Len(t, calls, len(want), "the statements of EventCounts and Stats")
	for i, c := range calls {
		generic := explainGeneric(t, conn, fmt.Sprintf("counts_%d", i), c)
		checkPlan(t, c.label+" (generic plan)", generic, false, want[c.label])
	}
}
