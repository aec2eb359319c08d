package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/testdb"
)

// benchTenant owns both the preloaded operations and the claimed ones, so
// that the tenant's due index holds everything the table holds.
const benchTenant = "bench"

// BenchmarkClaim measures claims on an empty table and on one that already
// holds 1,000,000 recorded operations (pgstore.SyntheticMix, with one
// attempt and three timeline entries each), loaded with SQL. Each round
// inserts b.N due operations and claims each once:
//
//   - next: Ledger.ClaimNext for the tenant, the work-queue claim (FOR
//     UPDATE SKIP LOCKED);
//   - next_all_tenants: ClaimNext across tenants;
//   - key: Ledger.Claim of a named key;
//   - next_parallel: ClaimNext from 4×GOMAXPROCS goroutines at once (ns/op
//     is then wall time per claim, the inverse of throughput).
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
	// Both tables are built first and every variant then runs on each in
	// turn, so that the two figures of a pair are taken moments apart.
	fixtures := []*claimFixture{newClaimFixture(b, 0), newClaimFixture(b, 1_000_000)}
	modes := []struct {
		name  string
		claim func(f *claimFixture, l *opledger.Ledger, i int, prefix string) error
	}{
		{"next", func(f *claimFixture, l *opledger.Ledger, _ int, _ string) error {
			_, err := l.ClaimNext(f.ctx, opledger.ClaimNextOptions{})
			return err
		}},
		{"next_all_tenants", func(f *claimFixture, l *opledger.Ledger, _ int, _ string) error {
			_, err := l.ClaimNext(f.ctx, opledger.ClaimNextOptions{AllTenants: true})
			return err
		}},
		{"key", func(f *claimFixture, l *opledger.Ledger, i int, prefix string) error {
			_, err := l.Claim(f.ctx, fmt.Sprintf("%s%08d", prefix, i+1), opledger.ClaimOptions{})
			return err
		}},
		{"next_parallel", nil},
	}
	for _, commit := range []string{"sync", "async"} {
		for _, m := range modes {
			b.Run("commit="+commit+"/"+m.name, func(b *testing.B) {
				for _, f := range fixtures {
					l := f.ledgers[commit]
					b.Run(fmt.Sprintf("rows=%d", f.rows), func(b *testing.B) {
						if m.claim != nil {
							f.round(b, func(i int, prefix string) error { return m.claim(f, l, i, prefix) })
							return
						}
						f.prepare(b)
						b.SetParallelism(4)
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								if _, err := l.ClaimNext(f.ctx, opledger.ClaimNextOptions{}); err != nil {
									b.Error(err)
									return
								}
							}
						})
						b.StopTimer()
					})
				}
			})
		}
	}
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

// prepare empties the table of earlier rounds' operations, inserts b.N due
// operations and resets the timer. It returns their key prefix.
func (f *claimFixture) prepare(b *testing.B) string {
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

// round claims b.N operations one after the other with claim.
func (f *claimFixture) round(b *testing.B, claim func(i int, prefix string) error) {
	prefix := f.prepare(b)
	for i := range b.N {
		if err := claim(i, prefix); err != nil {
			if errors.Is(err, opledger.ErrNothingDue) {
				b.Fatalf("claim %d of %d: nothing due", i+1, b.N)
			}
			b.Fatal(err)
		}
	}
	b.StopTimer()
}

// BenchmarkStats measures Ledger.Stats, which /metrics, /v1/stats and the
// console read, across every tenant of a schema holding 100,000 and then
// 1,000,000 operations (pgstore.SyntheticMix, one attempt each). It reads
// every live operation and attempt, so its time grows with the ledger
// (docs/scaling.md).
//
//	go test -run '^$' -bench BenchmarkStats -benchtime 3x ./internal/store/pgstore/
func BenchmarkStats(b *testing.B) {
	for _, rows := range []int{100_000, 1_000_000} {
		f := newClaimFixture(b, rows)
		l := f.ledgers["sync"]
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			for b.Loop() {
				st, err := l.Stats(f.ctx, true)
				if err != nil {
					b.Fatal(err)
				}
				if st.AttemptsTotal != rows {
					b.Fatalf("%d attempts counted, want %d", st.AttemptsTotal, rows)
				}
			}
		})
	}
}
