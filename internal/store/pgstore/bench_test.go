package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
)

// benchTenant owns both the preloaded operations and the claimed ones, so
// that the tenant's due index holds everything the table holds.
const benchTenant = "bench"

// BenchmarkClaim measures claims (storetest.BenchClaim: next, which takes
// its row FOR UPDATE SKIP LOCKED, next_all_tenants, key and next_parallel)
// on an empty table and on one that already holds 1,000,000 recorded
// operations (pgstore.SyntheticMix, with one attempt and three timeline
// entries each), loaded with SQL.
//
// commit=sync is the default configuration: every claim waits for its WAL
// flush. commit=async runs the same claims with synchronous_commit=off, so
// that the figures show the work of the statements themselves, which is
// what would grow with the table if anything did.
//
// Run it with, for example:
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 2000x ./internal/store/pgstore/
func BenchmarkClaim(b *testing.B) {
	// Both tables are built first.
	storetest.BenchClaim(b, "commit", []string{"sync", "async"},
		[]storetest.ClaimFixture{newClaimFixture(b, 0), newClaimFixture(b, 1_000_000)})
}

type claimFixture struct {
	ctx context.Context
	dsn string
	// ledgers by commit mode: "sync" (the default) and "async"
	// (synchronous_commit=off).
	ledgers map[string]*opledger.Ledger
	rows    int
	rounds  int
}

func newClaimFixture(b *testing.B, rows int) *claimFixture {
	b.Helper()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(b)
	f := &claimFixture{ctx: ctx, dsn: dsn, ledgers: map[string]*opledger.Ledger{}, rows: rows}
	for mode, d := range map[string]string{"sync": dsn, "async": dsn + "&synchronous_commit=off"} {
		l, err := opledger.Open(ctx, d, opledger.Options{Tenant: benchTenant, Worker: "bench", Lease: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		f.ledgers[mode] = l
	}
	if rows > 0 {
		start := time.Now()
		if err := pgstore.LoadSynthetic(ctx, dsn, benchTenant, rows, true); err != nil {
			b.Fatal(err)
		}
		b.Logf("loaded %d operations (%s) with attempts and timeline in %s", rows, pgstore.SyntheticMix, time.Since(start).Round(time.Millisecond))
	}
	return f
}

func (f *claimFixture) Rows() int { return f.rows }

func (f *claimFixture) Ledger(setting string) *opledger.Ledger { return f.ledgers[setting] }

// Prepare empties the table of earlier rounds' operations, inserts b.N due
// operations and resets the timer. It returns their key prefix.
func (f *claimFixture) Prepare(b *testing.B) string {
	b.Helper()
	b.StopTimer()
	f.rounds++
	conn, err := pgx.Connect(f.ctx, f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(f.ctx)
	for _, q := range []string{
		`DELETE FROM operations WHERE key LIKE 'claim%'`,
		`DELETE FROM attempts WHERE key LIKE 'claim%'`,
		`DELETE FROM timeline WHERE key LIKE 'claim%'`,
	} {
		if _, err := conn.Exec(f.ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	prefix := fmt.Sprintf("claim%d:", f.rounds)
	if _, err := pgstore.InsertDue(f.ctx, f.dsn, benchTenant, prefix, b.N); err != nil {
		b.Fatal(err)
	}
	// What autovacuum would do between bursts: no dead index entries from
	// earlier rounds, fresh statistics.
	if _, err := conn.Exec(f.ctx, `VACUUM (ANALYZE) operations`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.StartTimer()
	return prefix
}

// BenchmarkStats measures Ledger.Stats, which /metrics, /v1/stats and the
// console read, across every tenant of a schema holding 100,000 and then
// 1,000,000 operations (pgstore.SyntheticMix, one attempt each). It reads
// every live operation and attempt, so its time grows with the ledger
// (docs/scaling.md).
// Each size runs with one caller and with 16 at once
// (storetest.BenchStats), whose concurrent calls share reads.
//
//	go test -run '^$' -bench BenchmarkStats -benchtime 3x ./internal/store/pgstore/
func BenchmarkStats(b *testing.B) {
	for _, rows := range []int{100_000, 1_000_000} {
		storetest.BenchStats(b, newClaimFixture(b, rows).ledgers["sync"], rows)
	}
}

// BenchmarkCompactEvents measures the first retention run over a backlog of
// inbound events: each round loads events and twice as many deliveries
// (half of them duplicates), all received 500 days ago, with SQL, then
// times one Ledger.Compact, which deletes the deliveries (past Retention)
// and the events (past TombstoneRetention) in transactions of 1,000 rows
// and carries their counts. It fails unless EventStats is the same before
// and after.
//
//	go test -run '^$' -bench BenchmarkCompactEvents -benchtime 1x ./internal/store/pgstore/
func BenchmarkCompactEvents(b *testing.B) {
	testdb.RequirePostgres(b)
	for _, events := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("events=%d", events), func(b *testing.B) {
			ctx := context.Background()
			for range b.N {
				b.StopTimer()
				dsn := testdb.PostgresDSN(b)
				l, err := opledger.Open(ctx, dsn, opledger.Options{})
				if err != nil {
					b.Fatal(err)
				}
				conn, err := pgx.Connect(ctx, dsn)
				if err != nil {
					b.Fatal(err)
				}
				for _, q := range []string{
					`INSERT INTO events (tenant, source, event_id, type, payload_sha256, status, received_at)
					SELECT 'default', 'bench', 'evt-' || i, 'bench', 'h', 'applied', now() - interval '500 days' + i * interval '1 microsecond'
					FROM generate_series(1, $1::int) i`,
					`INSERT INTO deliveries (tenant, source, event_id, received_at, duplicate, payload_sha256)
					SELECT 'default', 'bench', 'evt-' || ((i - 1) % $1::int + 1), now() - interval '500 days' + i * interval '1 microsecond', i > $1::int, 'h'
					FROM generate_series(1, 2 * $1::int) i`,
				} {
					if _, err := conn.Exec(ctx, q, events); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := conn.Exec(ctx, `ANALYZE events; ANALYZE deliveries`); err != nil {
					b.Fatal(err)
				}
				conn.Close(ctx)
				storetest.TimeCompactEvents(b, l, events)
				l.Close()
			}
		})
	}
}
