package reconciler_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// stoppingLookup is a Go destination whose calls end uncertain and whose
// lookup heeds its context: once it ends, it takes a moment to wind down
// (a connection to close), then returns.
type stoppingLookup struct {
	entered  chan struct{}
	returned atomic.Bool
}

func (*stoppingLookup) Name() string { return "stopping" }
func (*stoppingLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*stoppingLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *stoppingLookup) Lookup(ctx context.Context, _ *opledger.Operation, _ []string) (destination.LookupResult, error) {
	d.entered <- struct{}{}
	<-ctx.Done()
	time.Sleep(100 * time.Millisecond) // winding down, not a synchronisation
	d.returned.Store(true)
	return destination.LookupResult{}, ctx.Err()
}

// TestStopWaitsForALookupThatHeedsIt: when the reconciler's context ends
// (the process stops), a lookup that heeds its context's end is waited
// for, up to LookupGrace: RunOnce used to return at once, leaving the
// lookup running behind it, counted as abandoned.
func TestStopWaitsForALookupThatHeedsIt(t *testing.T) {
	t.Parallel()
	d := &stoppingLookup{entered: make(chan struct{}, 1)}
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Extra = []destination.Destination{d}
	})
	r.Record("lookup:S1", "stopping", `{}`)
	require.Equal(t, opledger.StateUncertain, r.Step().State)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = r.Rec.RunOnce(ctx)
	}()
	<-d.entered
	cancel()
	<-done
	require.True(t, d.returned.Load(), "the lookup had returned when RunOnce did")
	require.Zero(t, r.Rec.AbandonedLookups())
}
