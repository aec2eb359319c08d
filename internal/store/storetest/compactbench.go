package storetest

import (
	"context"
	"maps"
	"testing"

	"github.com/opledger/opledger"
)

// TimeCompactEvents times one Compact of l, whose store holds events events
// and twice as many deliveries, all past both retention periods (loaded by
// the store's BenchmarkCompactEvents), with the benchmark's timer stopped
// on entry and on return. It fails unless Compact deleted them all and
// EventStats is the same before and after, and reports ns/row over every
// round so far.
func TimeCompactEvents(b *testing.B, l *opledger.Ledger, events int) {
	b.Helper()
	ctx := context.Background()
	before, err := l.EventStats(ctx, true)
	if err != nil {
		b.Fatal(err)
	}
	if before.Events != events || before.Deliveries != 2*events {
		b.Fatalf("loaded %d events and %d deliveries, want %d and %d", before.Events, before.Deliveries, events, 2*events)
	}
	b.StartTimer()
	res, err := l.Compact(ctx)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.EventsForgotten != events || res.DeliveriesCompacted != 2*events {
		b.Fatalf("compacted %+v, want %d events and %d deliveries", res, events, 2*events)
	}
	after, err := l.EventStats(ctx, true)
	if err != nil {
		b.Fatal(err)
	}
	if after.Events != before.Events || after.Deliveries != before.Deliveries ||
		after.DuplicateDeliveries != before.DuplicateDeliveries || !maps.Equal(after.EventsByStatus, before.EventsByStatus) {
		b.Fatalf("totals moved: %+v before, %+v after", *before, *after)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3*events), "ns/row")
}
