package reconciler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// deafLookup is a Go destination whose calls end uncertain and whose
// first lookup ignores its context: it returns only once released. Later
// lookups find the record at once.
type deafLookup struct {
	release chan struct{}
	lookups atomic.Int32
}

func (*deafLookup) Name() string { return "deaf" }
func (*deafLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*deafLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *deafLookup) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	if d.lookups.Add(1) == 1 {
		<-d.release // the context's end is not heard
	}
	return destination.LookupResult{Found: true, Matches: true, Ref: "R1"}, nil
}

// TestLookupIgnoringItsContextIsAbandoned: a Go lookup that ignores its
// context used to stall the whole pass, and every other uncertain
// operation behind it, for ever. Once its timeout and a short grace have
// passed it is abandoned: a failed lookup (backoff, then held), logged
// once without the key, counted while its goroutine runs, and no second
// lookup of that operation is started until it has returned.
func TestLookupIgnoringItsContextIsAbandoned(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &deafLookup{release: make(chan struct{})}
		released := false
		t.Cleanup(func() {
			if !released {
				close(d.release)
			}
		})
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Extra = []destination.Destination{d}
			o.Reconciler.Concurrency = 1
			o.Reconciler.LookupTimeout = 50 * time.Millisecond
			o.Reconciler.LookupBackoff = 10 * time.Second
			o.Reconciler.MaxLookupFailures = 5
		})
		r.Record("lookup:D1", "deaf", `{}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(time.Second)
		r.Record("intake:C1:create", "crm", payload)
		r.Server.Fail(fakedest.LoseResponse)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		r.Clock.Advance(31 * time.Second) // the crm's visibility delay

		// The pass ends, bounded here so that a stall fails the test.
		type ended struct {
			pass reconciler.Pass
			err  error
		}
		pass := make(chan ended, 1)
		go func() {
			p, err := r.Rec.RunOnce(r.Ctx)
			pass <- ended{p, err}
		}()
		var p reconciler.Pass
		select {
		case e := <-pass:
			require.NoError(t, e.err)
			require.Zero(t, e.pass.Errors)
			p = e.pass
		case <-time.After(20 * time.Second):
			require.FailNow(t, "the pass is still waiting for a lookup that ignores its context")
		}
		require.Equal(t, 1, p.Decisions[reconciler.Wait], "the deaf lookup failed")
		require.Equal(t, 1, p.Decisions[reconciler.Succeeded], "the operation behind it was looked up")
		require.Equal(t, 1, p.LookupsAbandoned)
		require.Equal(t, 1, r.Rec.AbandonedLookups(), "its goroutine still runs")
		op := r.Get("lookup:D1")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, 10*time.Second, op.NotBefore.Sub(op.UpdatedAt), "backing off")
		require.Contains(t, r.Evidence("lookup:D1", "reconcile deferred"), "lookup failed: the lookup did not return within its timeout of 50ms and 2s of grace")
		require.Contains(t, r.Evidence("lookup:D1", "reconcile deferred"), "(failure 1 of 5)")
		require.Equal(t, 1, strings.Count(r.Logs(), `msg="lookup abandoned`), r.Logs())

		// Due again while the abandoned lookup runs: no second lookup, a
		// failed one counted.
		r.Clock.Advance(11 * time.Second)
		p = r.Reconcile()
		require.Equal(t, 1, p.Decisions[reconciler.Wait])
		require.Zero(t, p.LookupsAbandoned)
		require.Equal(t, int32(1), d.lookups.Load(), "no second lookup while the first runs")
		require.Contains(t, r.Evidence("lookup:D1", "reconcile deferred"), "(failure 2 of 5)")
		require.Contains(t, r.Evidence("lookup:D1", "reconcile deferred"), "still running")
		require.Equal(t, 1, strings.Count(r.Logs(), `msg="lookup abandoned`), "logged once")

		// Once it has returned, the next lookup is made, and settles it.
		close(d.release)
		released = true
		require.Eventually(t, func() bool { return r.Rec.AbandonedLookups() == 0 }, time.Minute, 5*time.Millisecond)
		r.Clock.Advance(21 * time.Second)
		p = r.Reconcile()
		require.Equal(t, 1, p.Decisions[reconciler.Succeeded])
		require.Equal(t, int32(2), d.lookups.Load())
		require.Equal(t, opledger.StateSucceeded, r.Get("lookup:D1").State)
	})
}
