package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/opledger/opledger"
)

// ClaimFixture is a store's table for BenchClaim: a ledger per
// durability setting, over a store preloaded with Rows operations.
type ClaimFixture interface {
	// Rows is how many operations were preloaded.
	Rows() int
	// Ledger is the fixture's ledger with the named durability setting.
	Ledger(setting string) *opledger.Ledger
	// Prepare stops the timer, deletes earlier rounds' claimed
	// operations, inserts b.N due ones of the benchmark tenant, resets
	// and starts the timer, and returns their key prefix (the keys are
	// the prefix and 1 to b.N in eight digits).
	Prepare(b *testing.B) string
}

// BenchClaim runs a store's BenchmarkClaim. For each durability setting
// (named "setting=value" in the benchmark's name; the first is the
// default one) and each fixture in turn, so that the figures of a pair
// are taken moments apart, each round claims b.N due operations once:
//
//   - next: Ledger.ClaimNext for the tenant, the work-queue claim;
//   - next_all_tenants: ClaimNext across tenants;
//   - key: Ledger.Claim of a named key;
//   - next_parallel: ClaimNext from 4×GOMAXPROCS goroutines at once
//     (ns/op is then wall time per claim, the inverse of throughput).
func BenchClaim(b *testing.B, setting string, values []string, fixtures []ClaimFixture) {
	ctx := context.Background()
	modes := []struct {
		name  string
		claim func(l *opledger.Ledger, i int, prefix string) error
	}{
		{"next", func(l *opledger.Ledger, _ int, _ string) error {
			_, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			return err
		}},
		{"next_all_tenants", func(l *opledger.Ledger, _ int, _ string) error {
			_, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{AllTenants: true})
			return err
		}},
		{"key", func(l *opledger.Ledger, i int, prefix string) error {
			_, err := l.Claim(ctx, fmt.Sprintf("%s%08d", prefix, i+1), opledger.ClaimOptions{})
			return err
		}},
		{"next_parallel", nil},
	}
	for _, value := range values {
		for _, m := range modes {
			b.Run(setting+"="+value+"/"+m.name, func(b *testing.B) {
				for _, f := range fixtures {
					l := f.Ledger(value)
					b.Run(fmt.Sprintf("rows=%d", f.Rows()), func(b *testing.B) {
						prefix := f.Prepare(b)
						if m.claim == nil {
							b.SetParallelism(4)
							b.RunParallel(func(pb *testing.PB) {
								for pb.Next() {
									if _, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{}); err != nil {
										b.Error(err)
										return
									}
								}
							})
							b.StopTimer()
							return
						}
						for i := range b.N {
							if err := m.claim(l, i, prefix); err != nil {
								if errors.Is(err, opledger.ErrNothingDue) {
									b.Fatalf("claim %d of %d: nothing due", i+1, b.N)
								}
								b.Fatal(err)
							}
						}
						b.StopTimer()
					})
				}
			})
		}
	}
}
