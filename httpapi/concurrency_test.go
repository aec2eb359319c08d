package httpapi_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/testdb"
)

// TestConcurrentClaimsOverHTTP: 32 clients claim the same 250 keys over
// a real listener, each in its own order, so every key is raced by all 32.
// Per key and round exactly one gets 201; the others get 409 (in
// progress) or 200 (already succeeded, the saved result). (It used 1,000
// keys: the same race four times as often, and half of CI's time.)
func TestConcurrentClaimsOverHTTP(t *testing.T) {
	t.Parallel()
	const clients, keys = 32, 250
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			names := make([]string, keys)
			for i := range names {
				names[i] = fmt.Sprintf("http-race:%04d", i)
				_, _, err := b.acme.Record(ctx, names[i], intent(1))
				require.NoError(t, err)
			}
			// Round 1: winners report retryable; round 2, after the
			// backoff: winners succeed, and whoever comes after gets the
			// saved result.
			for round := 1; round <= 2; round++ {
				var created, conflicts, replays atomic.Int64
				wins := make([]atomic.Int32, keys)
				var wg sync.WaitGroup
				errs := make(chan error, clients)
				for w := range clients {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
						for _, i := range rng.Perm(keys) {
							c, err := b.acme.Claim(ctx, names[i], client.ClaimRequest{Worker: fmt.Sprintf("c%d", w), LeaseSeconds: 3600})
							var replay *client.ReplayError
							switch {
							case err == nil:
								created.Add(1)
								wins[i].Add(1)
								report := client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeRetryable, Error: "503", RetryAfterSeconds: 3600}
								if round == 2 {
									report = client.Report{FencingToken: c.FencingToken, Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-" + names[i]}
								}
								if _, err := b.acme.Report(ctx, names[i], c.AttemptID, report); err != nil {
									errs <- err
									return
								}
							case errors.As(err, &replay):
								replays.Add(1)
							case errors.Is(err, opledger.ErrInProgress), errors.Is(err, opledger.ErrNotDue):
								conflicts.Add(1)
							default:
								errs <- fmt.Errorf("claim %s: %w", names[i], err)
								return
							}
						}
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					require.NoError(t, err)
				}
				require.EqualValues(t, clients*keys, created.Load()+conflicts.Load()+replays.Load())
				for i := range wins {
					require.EqualValues(t, 1, wins[i].Load(), "round %d: one 201 for %s", round, names[i])
				}
				if round == 2 {
					require.Positive(t, replays.Load(), "claims after the success get the saved result")
				}
				t.Logf("round %d: %d created, %d conflicts, %d replays", round, created.Load(), conflicts.Load(), replays.Load())
				b.clock.advance(2 * time.Hour) // past the backoff
			}
		})
	}
}
