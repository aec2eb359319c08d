package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testProtectedOperations runs whole protected operations (Claim with the
// intent inline, then Report) from many goroutines at once, as opledger
// bench does: on SQLite their transactions share commits (group commit),
// on PostgreSQL their writes are pipelined. Some keys are raced by every
// worker, so that refusals land in the same shared transactions as
// successes. Every caller must get exactly its own outcome, and what the
// store holds afterwards must be exactly what was acknowledged.
func testProtectedOperations(t *testing.T, h Harness) {
	const (
		workers = 16
		own     = 25 // keys of each worker alone
		shared  = 20 // keys every worker races for
	)
	b := setup(t, h)
	outcomes := []opledger.Outcome{opledger.OutcomeSucceeded, opledger.OutcomeRejected, opledger.OutcomeUncertain}
	type ack struct {
		outcome opledger.Outcome
		ref     string
	}
	var (
		mu    sync.Mutex
		acked = map[string]ack{}
		wins  = map[string]int{}
	)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var keys []string
			for i := range own {
				keys = append(keys, fmt.Sprintf("own:%02d:%02d", w, i))
			}
			for i := range shared {
				keys = append(keys, fmt.Sprintf("shared:%02d", (i+w)%shared))
			}
			for i, key := range keys {
				in := intent(key)
				c, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{Worker: fmt.Sprintf("w%02d", w), Intent: &in})
				if err != nil {
					if key[:6] == "shared" && (errors.Is(err, opledger.ErrInProgress) || errors.Is(err, opledger.ErrAlreadySucceeded)) {
						continue
					}
					errs <- fmt.Errorf("claim %s: %w", key, err)
					return
				}
				r := opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: fmt.Sprintf("ref-w%02d-%s", w, key)}
				if key[:3] == "own" {
					r.Outcome = outcomes[i%len(outcomes)]
					if r.Outcome != opledger.OutcomeSucceeded {
						r.DestinationRef = ""
						r.Error = "refused by " + key
					}
				}
				op, err := b.ledger.Report(b.ctx, key, c.AttemptID, c.FencingToken, r)
				if err != nil {
					errs <- fmt.Errorf("report %s: %w", key, err)
					return
				}
				if op.Key != key || op.DestinationRef != r.DestinationRef {
					errs <- fmt.Errorf("report %s returned operation %s with ref %q, want ref %q", key, op.Key, op.DestinationRef, r.DestinationRef)
					return
				}
				mu.Lock()
				acked[key] = ack{r.Outcome, r.DestinationRef}
				wins[key]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, acked, workers*own+shared, "every own key and every shared key has one acknowledged operation")
	wantState := map[opledger.Outcome]opledger.State{
		opledger.OutcomeSucceeded: opledger.StateSucceeded,
		opledger.OutcomeRejected:  opledger.StateFailed,
		opledger.OutcomeUncertain: opledger.StateUncertain,
	}
	for key, a := range acked {
		require.Equal(t, 1, wins[key], "%s won more than once", key)
		op, err := b.ledger.Get(b.ctx, key)
		require.NoError(t, err)
		require.Equal(t, wantState[a.outcome], op.State, key)
		require.Equal(t, a.ref, op.DestinationRef, key)
		require.Equal(t, 1, op.AttemptCount, key)
		attempts, err := b.ledger.Attempts(b.ctx, key)
		require.NoError(t, err)
		require.Len(t, attempts, 1, key)
		require.Equal(t, string(a.outcome), attempts[0].Outcome, key)
		tl, err := b.ledger.Timeline(b.ctx, key)
		require.NoError(t, err)
		require.Len(t, tl, 3, "%s: recorded, claimed, outcome", key)
	}
}
