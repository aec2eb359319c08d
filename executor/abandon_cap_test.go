package executor_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testrig"
)

// TestAbandonedCallsOfADestinationAreBounded: a destination whose calls
// ignore their context and never return used to have a call abandoned,
// and the next one of its operations claimed and called, every call
// limit and grace, per worker, without end: each abandoned call a
// goroutine, whatever the call holds, a claim whose lease the executor
// extends every third of the lease, and an entry in the list every claim
// passes to the store to skip. Once a destination has as many abandoned
// calls still running as the executor allows (here 1), its operations
// are no longer claimed; other destinations' are, and its own again once
// a call returns.
func TestAbandonedCallsOfADestinationAreBounded(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 2), release: make(chan struct{})}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		r.Exec.SetMaxAbandoned(1)
		ended := make(chan struct{}, 2)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		r.Record("stuck:1", "stuck", `{}`)
		r.Record("stuck:2", "stuck", `{}`)
		r.Record("fast:1", "fast", `{}`)

		op := r.Step()
		require.Equal(t, "stuck:1", op.Key)
		require.Equal(t, 1, r.Exec.AbandonedCalls())

		op = r.Step()
		require.NotNil(t, op, "other destinations are claimed for")
		require.Equal(t, "fast:1", op.Key, "stuck:2, due longer, is not claimed")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Nil(t, r.Step(), "nothing else is claimed")
		require.EqualValues(t, 1, s.n.Load(), "no second call of the stuck destination was started")
		require.Equal(t, opledger.StatePending, r.Get("stuck:2").State)
		require.Contains(t, r.Logs(), "none of its operations is claimed until one of them returns")

		close(s.release)
		released = true
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		op = r.Step()
		require.Equal(t, "stuck:2", op.Key, "claimed again once the abandoned call returned")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, opledger.StateSucceeded, r.Get("stuck:1").State)
	})
}
