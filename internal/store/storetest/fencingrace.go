package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testFencingRace races, on every one of many keys whose claim's lease has
// run out, the stale worker's report (rejected) against another worker's
// claim (marking its dispatch) and a lease sweep, all at once. Exactly one
// worker holds the operation afterwards: either the report came before
// anything settled the lease and is the attempt's own (the operation
// failed, the other claim refused), or the other claim won and the report
// is only evidence (the operation in progress under the new claim, the
// old attempt abandoned with the report as its late outcome). A stale
// report never moves the state, and no two claims ever win.
func testFencingRace(t *testing.T, h Harness) {
	const keys = 60
	b := setup(t, h)
	old := make([]*opledger.Claim, keys)
	name := func(i int) string { return fmt.Sprintf("fence-race:%02d", i) }
	for i := range keys {
		old[i] = b.claimed(t, name(i))
	}
	b.clock.Advance(11 * time.Second) // past every claim's 10 s lease

	type result struct {
		reportErr error
		claim     *opledger.Claim
		claimErr  error
		sweepErr  error
	}
	results := make([]result, keys)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range keys {
		key, r := name(i), &results[i]
		calls := []func(){
			func() {
				if i%2 == 0 {
					// A stale worker that reads first, as a claim by key
					// does: the report lands later on these keys.
					_, _ = b.ledger.Get(b.ctx, key)
				}
				_, r.reportErr = b.ledger.Report(b.ctx, key, old[i].AttemptID, old[i].FencingToken,
					opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422 from the stale worker"})
			},
			func() {
				r.claim, r.claimErr = b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{Worker: "w2", Dispatch: true})
			},
			func() { _, r.sweepErr = b.ledger.ExpireLeases(b.ctx) },
		}
		// Each key starts its three calls in another order, so that
		// each of them comes first on some keys.
		for j := range calls {
			call := calls[(i+j)%len(calls)]
			wg.Go(func() {
				<-start
				call()
			})
		}
	}
	close(start)
	wg.Wait()

	reportsTaken, claimsWon := 0, 0
	for i := range keys {
		key, r := name(i), results[i]
		require.NoError(t, r.sweepErr, key)
		op, err := b.ledger.Get(b.ctx, key)
		require.NoError(t, err)
		attempts, err := b.ledger.Attempts(b.ctx, key)
		require.NoError(t, err)
		var stale *opledger.StaleError
		switch {
		case r.reportErr == nil:
			reportsTaken++
			require.Nil(t, r.claim, "%s: the stale worker's report was taken and another claim won too", key)
			require.ErrorIs(t, r.claimErr, opledger.ErrInvalidState, key)
			require.Equal(t, opledger.StateFailed, op.State, key)
			require.Equal(t, opledger.FailureRejected, op.FailureKind, key)
			require.Len(t, attempts, 1, key)
			require.Equal(t, string(opledger.OutcomeRejected), attempts[0].Outcome, key)
		case errors.As(r.reportErr, &stale):
			claimsWon++
			require.NoError(t, r.claimErr, "%s: the report was refused as stale, so the operation was free to claim", key)
			require.True(t, stale.Recorded, "%s: the stale report is kept as evidence", key)
			require.Equal(t, opledger.StateInProgress, op.State, "%s: a stale report does not move the state", key)
			require.True(t, op.Dispatched, key)
			require.Equal(t, r.claim.AttemptID, op.CurrentAttemptID, key)
			require.Greater(t, r.claim.FencingToken, old[i].FencingToken, key)
			require.Len(t, attempts, 2, key)
			require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome, key)
			require.Equal(t, string(opledger.OutcomeRejected), attempts[0].LateOutcome, key)
			require.Empty(t, attempts[1].Outcome, key)
			// The stale worker cannot start a call either.
			_, err := b.ledger.Dispatch(b.ctx, key, old[i].AttemptID, old[i].FencingToken)
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken, key)
		default:
			t.Fatalf("%s: report: %v", key, r.reportErr)
		}
	}
	t.Logf("%d stale reports taken before the lease was settled, %d claims won", reportsTaken, claimsWon)
}
