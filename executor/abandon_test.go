package executor_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testrig"
)

// stuck is a Go destination whose calls ignore their context: each waits
// until the test releases them, however long after its deadline.
type stuck struct {
	started chan struct{}
	release chan struct{}
	n       atomic.Int32
}

func (s *stuck) Name() string                           { return "stuck" }
func (s *stuck) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (s *stuck) Call(_ context.Context, _ opledger.Call) (opledger.Result, error) {
	n := s.n.Add(1)
	s.started <- struct{}{}
	<-s.release
	return opledger.Result{Ref: "late-" + strconv.Itoa(int(n))}, nil
}

// TestCallIgnoringItsContextIsAbandoned: a destination call that ignores
// its context no longer holds its worker for ever. Once its time limit
// and the grace after it have passed, the executor stops waiting: the
// attempt is recorded uncertain (it may have acted), the worker goes on
// with the next operation, the abandoned call is counted while it runs,
// and the operation is not sent again while it runs. When it returns at
// last, its outcome is kept as a late report. (The single worker used to
// wait for the first call for ever and dispatch nothing else.)
func TestCallIgnoringItsContextIsAbandoned(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 16), release: make(chan struct{})}
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Extra = []destination.Destination{s}
			// The rig's HTTP destinations bound their calls by 5 s: one
			// with a bound below this test's call limit stands for them.
			o.YAML = "destinations:\n  - name: fast\n    url: @URL@/records\n    ref: /id\n    timeout: 100ms\n"
			o.Executor.Lease = 3 * time.Second
			o.Executor.CallTimeout = 200 * time.Millisecond
			o.Executor.PollInterval = 10 * time.Millisecond
		})
		ended := make(chan struct{}, 4)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		r.Record("stuck:1", "stuck", `{}`)
		r.Record("stuck:2", "stuck", `{}`)
		require.NoError(t, r.Exec.Start(r.Ctx))
		for i := range 2 {
			select {
			case <-s.started:
			case <-time.After(20 * time.Second):
				t.Fatalf("call %d never started: the only worker still waits for a call that ignores its context", i+1)
			}
		}
		stopCtx, cancel := context.WithTimeout(r.Ctx, 20*time.Second)
		defer cancel()
		require.NoError(t, r.Exec.Stop(stopCtx), "Stop does not wait for abandoned calls")
		require.Equal(t, 2, r.Exec.AbandonedCalls(), "both calls still run")

		for _, key := range []string{"stuck:1", "stuck:2"} {
			op := r.Get(key)
			require.Equal(t, opledger.StateUncertain, op.State, "the call may have acted")
			require.Contains(t, op.LastError, "did not return within 200ms of its claim")
			require.Contains(t, op.LastError, "abandoned, still running")
		}
		require.Contains(t, r.Logs(), "destination call abandoned")
		require.Contains(t, r.Logs(), "abandoned_calls=2")

		// Not sent again while the abandoned call runs: an operator's
		// retry is claimed and given back, nothing sent.
		_, _, err := r.Ledger.Resolve(r.Ctx, "stuck:1", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again"})
		require.NoError(t, err)
		require.Nil(t, r.Step(), "the claim is given back")
		require.EqualValues(t, 2, s.n.Load(), "nothing was sent again")
		op := r.Get("stuck:1")
		require.Equal(t, opledger.StatePending, op.State)
		require.Contains(t, r.Evidence("stuck:1", "released before dispatch"), "still running")

		close(s.release)
		released = true
		<-ended
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		// Its late success settles the operation it left uncertain.
		op = r.Get("stuck:2")
		require.Equal(t, opledger.StateSucceeded, op.State, r.Logs())
		require.Equal(t, "late-2", op.DestinationRef)
		require.Contains(t, r.Logs(), "abandoned destination call returned")
	})
}
