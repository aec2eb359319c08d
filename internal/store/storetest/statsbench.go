package storetest

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/opledger/opledger"
)

// BenchStats runs the sub-benchmarks of a store's BenchmarkStats on l,
// whose store holds rows operations with one attempt each: Ledger.Stats
// across every tenant from one caller (ns/op is the time of one read),
// and from 16 callers at once, as polling clients of /v1/stats are (ns/op
// is wall time per answer; concurrent calls share reads). Each answer
// must count every attempt.
func BenchStats(b *testing.B, l *opledger.Ledger, rows int) {
	ctx := context.Background()
	read := func() error {
		st, err := l.Stats(ctx, true)
		if err == nil && st.AttemptsTotal != rows {
			err = fmt.Errorf("%d attempts counted, want %d", st.AttemptsTotal, rows)
		}
		return err
	}
	b.Run(fmt.Sprintf("rows=%d/callers=1", rows), func(b *testing.B) {
		for b.Loop() {
			if err := read(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("rows=%d/callers=16", rows), func(b *testing.B) {
		procs := runtime.GOMAXPROCS(0)
		b.SetParallelism((16 + procs - 1) / procs) // 16 goroutines, or the next multiple of GOMAXPROCS
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := read(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
