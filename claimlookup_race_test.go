package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestClaimLookupRace: reconcilers of several processes that read the
// same uncertain operations and take them for a lookup at the same moment
// (docs/scaling.md, "one process looks an operation up at a time"): of
// every operation, exactly one take succeeds, whichever process it is.
func TestClaimLookupRace(t *testing.T) {
	t.Parallel()
	const processes, keys = 5, 40
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			if st.Name == "postgres" {
				dsn += "&pool_max_conns=8" // the test server's connections are shared
			}
			ledgers := make([]*opledger.Ledger, processes)
			for i := range ledgers {
				l, err := opledger.Open(ctx, dsn, opledger.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				ledgers[i] = l
			}
			for k := range keys {
				key := fmt.Sprintf("lookup-race:%02d", k)
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
				c, err := ledgers[0].Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
				require.NoError(t, err)
				_, err = ledgers[0].Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
				require.NoError(t, err)
			}
			// Every process reads every operation first, as its
			// reconciler's queue does, then all take at once.
			seen := make([][]*opledger.Operation, processes)
			for p, l := range ledgers {
				for k := range keys {
					op, err := l.Get(ctx, fmt.Sprintf("lookup-race:%02d", k))
					require.NoError(t, err)
					seen[p] = append(seen[p], op)
				}
			}
			taken := make([]atomic.Int32, keys)
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, processes*keys)
			for p, l := range ledgers {
				for k := range keys {
					wg.Go(func() {
						<-start
						ok, err := l.ClaimLookup(ctx, seen[p][(k+p)%keys], time.Minute)
						if err != nil {
							errs <- err
							return
						}
						if ok {
							taken[(k+p)%keys].Add(1)
						}
					})
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			for k := range keys {
				require.EqualValues(t, 1, taken[k].Load(), "lookup-race:%02d taken by %d processes", k, taken[k].Load())
			}
		})
	}
}
