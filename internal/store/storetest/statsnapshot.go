package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testStatsDuringCompact reads Stats while Compact turns succeeded
// operations into tombstones, one transaction each. Every read must count
// each effect and attempt exactly once, whether live or compacted: figures
// read in several statements without one snapshot counted an operation
// compacted between them twice, then went down.
func testStatsDuringCompact(t *testing.T, h Harness) {
	b := setup(t, h, func(o *opledger.Options) { o.Retention = time.Hour })
	const n = 150
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		in := intent(key)
		c, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
		require.NoError(t, err)
		b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-" + key})
	}
	b.clock.Advance(2 * time.Hour)

	type reading struct{ confirmed, attempts int }
	readings := make(chan reading, 1<<16)
	errs := make(chan error, 1)
	first := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(readings)
		for i := 0; ; i++ {
			st, err := b.ledger.Stats(b.ctx, false)
			if err != nil {
				errs <- err
				if i == 0 {
					close(first)
				}
				return
			}
			r := reading{confirmed: st.ConfirmedEffects}
			for _, a := range st.Attempts {
				r.attempts += a.Count
			}
			readings <- r
			if i == 0 {
				close(first)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	<-first
	res, err := b.ledger.Compact(b.ctx)
	close(stop)
	require.NoError(t, err)
	require.Equal(t, n, res.Tombstoned)
	count := 0
	for r := range readings {
		count++
		require.Equal(t, reading{confirmed: n, attempts: n}, r, "reading %d during compaction", count)
	}
	select {
	case err := <-errs:
		require.NoError(t, err)
	default:
	}
	require.Greater(t, count, 1)
}
