package executor_test

import (
	"context"
	"errors"
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
// Its capabilities are caps; a call returns err if set, else a success.
type stuck struct {
	started chan struct{}
	release chan struct{}
	n       atomic.Int32
	caps    destination.Capabilities
	err     error
}

func (s *stuck) Name() string                           { return "stuck" }
func (s *stuck) Capabilities() destination.Capabilities { return s.caps }
func (s *stuck) Call(_ context.Context, _ opledger.Call) (opledger.Result, error) {
	n := s.n.Add(1)
	s.started <- struct{}{}
	<-s.release
	if s.err != nil {
		return opledger.Result{}, s.err
	}
	return opledger.Result{Ref: "late-" + strconv.Itoa(int(n))}, nil
}

// abandonRig is a rig whose only Go destination is s, with a call limit of
// 1s (a dispatch mark slowed by a busy machine must leave the call its
// time), and the DSN of its store in dsn.
func abandonRig(t *testing.T, newDSN func(testing.TB) string, s *stuck, dsn *string) *testrig.Rig {
	return testrig.New(t, func(tb testing.TB) string {
		*dsn = newDSN(tb)
		return *dsn
	}, func(o *testrig.Options) {
		o.Extra = []destination.Destination{s}
		// fast's timeout is as long as the call limit allows: on a loaded
		// machine a loopback answer can take longer than a tenth of a
		// second, and a timed-out call would end fast:1 uncertain.
		o.YAML = "destinations:\n  - name: fast\n    url: @URL@/records\n    ref: /id\n    timeout: 900ms\n"
		o.Executor.Lease = 30 * time.Second
		o.Executor.CallTimeout = time.Second
	})
}

// protectable is the capability that gives an uncertain operation of the
// stuck destination a protected retry at once, on reconciliation.
var protectable = destination.Capabilities{IdempotencyKey: &destination.IdempotencyKey{Header: "Idempotency-Key", Retention: 24 * time.Hour}}

// TestAbandonedCallKeepsItsClaim: while an abandoned call runs, no other
// process sharing the store may send its operation again. It used to be
// recorded uncertain at once, known to be running only to its own
// executor: another process's reconciler gave it a protected retry, and
// another process's worker claimed and sent it beside the call still
// running, a second effect. The executor now keeps the claim, extending
// its lease, until the call returns: a second ledger on the same store,
// long after the first lease would have run out, can neither settle the
// lease nor claim the operation; once the call returns, its outcome is
// reported under the claim and the operation is claimable again.
func TestAbandonedCallKeepsItsClaim(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{}), caps: protectable,
			err: opledger.Retryable(errors.New("busy"), time.Minute)}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		kept := make(chan struct{}, 1)
		r.Exec.SetLeaseKept(func() {
			select {
			case kept <- struct{}{}:
			default:
			}
		})
		r.Exec.SetLeaseRenewal(10 * time.Millisecond)
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		other, err := opledger.Open(r.Ctx, dsn, opledger.Options{Worker: "other", Lease: 10 * time.Second, Clock: r.Clock.Func})
		require.NoError(t, err)
		defer func() { require.NoError(t, other.Close()) }()

		r.Record("stuck:1", "stuck", `{}`)
		op := r.Step()
		require.Equal(t, 1, r.Exec.AbandonedCalls())
		require.Equal(t, opledger.StateInProgress, op.State, "the claim is kept while the call runs")
		require.Contains(t, r.Logs(), "destination call abandoned")

		// Twice two thirds of the lease pass by the ledger's clock, each
		// time until an extension has landed: the first lease has long
		// run out.
		for range 2 {
			r.Clock.Advance(20 * time.Second)
			now, err := r.Ledger.Now(r.Ctx)
			require.NoError(t, err)
			for r.Get("stuck:1").LeaseExpiresAt.Before(now.Add(30 * time.Second).Truncate(time.Microsecond)) {
				<-kept
			}
		}
		// Another process's sweep, reconciler and worker find nothing to do.
		settled, err := other.ExpireLeases(r.Ctx)
		require.NoError(t, err)
		require.Zero(t, settled, "the lease is kept")
		r.Reconcile()
		_, err = other.ClaimNext(r.Ctx, opledger.ClaimNextOptions{AllTenants: true})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "the operation is not claimed beside the call still running")
		require.EqualValues(t, 1, s.n.Load())
		require.Equal(t, opledger.StateInProgress, r.Get("stuck:1").State)

		close(s.release)
		released = true
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		op = r.Get("stuck:1")
		require.Equal(t, opledger.StatePending, op.State, "its retryable outcome is reported under the claim")
		require.Contains(t, op.LastError, "busy")
		require.Contains(t, r.Logs(), "abandoned destination call returned")

		r.Clock.Advance(time.Hour)
		c, err := other.ClaimNext(r.Ctx, opledger.ClaimNextOptions{AllTenants: true})
		require.NoError(t, err, "claimable again once the call has returned")
		require.Equal(t, 2, c.Operation.AttemptCount)
		_, err = other.Release(r.Ctx, c.Operation.Key, c.AttemptID, c.FencingToken, "test done")
		require.NoError(t, err)
	})
}

// TestAbandonedCallIsNotReclaimedEveryPoll: while an abandoned call runs,
// its executor used to claim the operation's due retry (a protected one,
// given at the reconciliation of the uncertain attempt) and give it back
// at every poll, each time with an abandoned attempt and two timeline
// entries. With the claim kept there is nothing due: the timeline and the
// attempts stay as they were.
func TestAbandonedCallIsNotReclaimedEveryPoll(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{}), caps: protectable}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		kept := make(chan struct{}, 1)
		r.Exec.SetLeaseKept(func() {
			select {
			case kept <- struct{}{}:
			default:
			}
		})
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		r.Record("stuck:1", "stuck", `{}`)
		r.Step()
		<-kept // the timeline's note of the abandoned call is made before
		events, attempts := r.Events("stuck:1"), len(r.Attempts("stuck:1"))
		for range 3 {
			r.Reconcile()
			require.Nil(t, r.Step(), "nothing is due")
		}
		require.Equal(t, events, r.Events("stuck:1"), "the timeline does not grow at each poll")
		require.Len(t, r.Attempts("stuck:1"), attempts)
		require.EqualValues(t, 1, s.n.Load())

		close(s.release)
		released = true
		<-ended
		op := r.Get("stuck:1")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "late-1", op.DestinationRef)
	})
}

// TestCallIgnoringItsContextIsAbandoned: a destination call that ignores
// its context no longer holds its worker for ever. Once its time limit
// and the grace after it have passed, the executor stops waiting: the
// claim is kept (the operation stays in progress), the worker goes on
// with the next operation, the abandoned call is counted while it runs,
// and the operation is not sent again while it runs. When it returns at
// last, its outcome is reported under the claim it kept meanwhile. (The
// single worker used to wait for the first call for ever and dispatch
// nothing else.)
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
			require.Equal(t, opledger.StateInProgress, op.State, "the claim is kept while the call runs")
			require.True(t, op.Dispatched)
		}
		require.Contains(t, r.Logs(), "destination call abandoned")
		require.Contains(t, r.Logs(), "abandoned_calls=2")

		// Not sent again while the abandoned call runs: nothing is due.
		require.Nil(t, r.Step())
		require.EqualValues(t, 2, s.n.Load(), "nothing was sent again")

		close(s.release)
		released = true
		<-ended
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		// What each returned at last is reported under its claim.
		for _, key := range []string{"stuck:1", "stuck:2"} {
			op := r.Get(key)
			require.Equal(t, opledger.StateSucceeded, op.State, r.Logs())
			require.Contains(t, []string{"late-1", "late-2"}, op.DestinationRef)
		}
		require.Contains(t, r.Logs(), "abandoned destination call returned")
	})
}

// TestAbandonedCallWhoseClaimWasLostIsNotReclaimed: a store that does
// not take the lease extensions of an abandoned call for a whole lease
// loses its claim; the lease sweep then makes the operation uncertain and
// the reconciliation gives it a protected retry. While the call still
// runs, its executor used to claim that retry at every poll, only to give
// it back: two timeline entries and an abandoned attempt each time. It
// no longer claims it: the timeline and the attempts stay as they were.
func TestAbandonedCallWhoseClaimWasLostIsNotReclaimed(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{}), caps: protectable}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		kept := make(chan struct{}, 1)
		r.Exec.SetLeaseKept(func() {
			select {
			case kept <- struct{}{}:
			default:
			}
		})
		// The first extension lands at once, the next only after an hour:
		// the lease runs out between them, as when the store refuses them.
		r.Exec.SetLeaseRenewal(time.Hour)
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		other, err := opledger.Open(r.Ctx, dsn, opledger.Options{Worker: "other", Lease: 10 * time.Second, Clock: r.Clock.Func})
		require.NoError(t, err)
		defer func() { require.NoError(t, other.Close()) }()

		r.Record("stuck:1", "stuck", `{}`)
		r.Step()
		<-kept
		r.Clock.Advance(31 * time.Second)
		settled, err := other.ExpireLeases(r.Ctx)
		require.NoError(t, err)
		require.Equal(t, 1, settled, "the claim is lost")
		r.Reconcile()
		require.Equal(t, opledger.StatePending, r.Get("stuck:1").State, "a protected retry is due")

		events, attempts := r.Events("stuck:1"), len(r.Attempts("stuck:1"))
		for range 3 {
			require.Nil(t, r.Step(), "nothing is claimed")
		}
		require.Equal(t, events, r.Events("stuck:1"), "the timeline does not grow at each poll")
		require.Len(t, r.Attempts("stuck:1"), attempts)
		require.EqualValues(t, 1, s.n.Load())

		close(s.release)
		released = true
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		op := r.Get("stuck:1")
		require.Equal(t, opledger.StateSucceeded, op.State, "the late success settles the operation")
		require.Equal(t, "late-1", op.DestinationRef)
	})
}

// TestAbandonedCallIsOnItsTimeline: an abandoned call that never returns
// keeps its operation in progress for as long as the process runs. That
// used to show only in the executor's log and its gauge: the operation's
// timeline, which the console and the API show, said it was dispatched
// and nothing more. The timeline now says, once, that the call was
// abandoned and still runs.
func TestAbandonedCallIsOnItsTimeline(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{})}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		kept := make(chan struct{}, 1)
		r.Exec.SetLeaseKept(func() {
			select {
			case kept <- struct{}{}:
			default:
			}
		})
		r.Exec.SetLeaseRenewal(time.Millisecond)
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		r.Record("stuck:1", "stuck", `{}`)
		r.Step()
		for range 3 { // three extensions: the note is made once
			<-kept
		}
		events := r.Events("stuck:1")
		require.Equal(t, []string{"recorded", "claimed", "dispatched", "call abandoned, still running"}, events)
		why := r.Evidence("stuck:1", "call abandoned, still running")
		require.Contains(t, why, "did not return")
		require.Contains(t, why, "the call limit is 1s")
		require.Equal(t, r.Attempts("stuck:1")[0].ID, timelineAttempt(t, r, "call abandoned, still running"))

		close(s.release)
		released = true
		<-ended
		op := r.Get("stuck:1")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, []string{"recorded", "claimed", "dispatched", "call abandoned, still running", "succeeded"}, r.Events("stuck:1"))
	})
}

// timelineAttempt is the attempt id of the last timeline entry of
// stuck:1 with event.
func timelineAttempt(t *testing.T, r *testrig.Rig, event string) string {
	t.Helper()
	tl, err := r.Ledger.Timeline(r.Ctx, "stuck:1")
	require.NoError(t, err)
	for i := len(tl) - 1; i >= 0; i-- {
		if tl[i].Event == event {
			return tl[i].AttemptID
		}
	}
	t.Fatalf("no %q in the timeline", event)
	return ""
}

// TestAbandonedCallAfterLedgerClose: once the ledger is closed, the
// claim of an abandoned call still running is no longer kept. The log
// used to say the claim was lost, as if the store had not taken the
// extensions, and the call's outcome, when it returned, was tried again
// for two minutes against a ledger that refuses everything. The log now
// says the ledger closed, and the outcome is given up at once.
func TestAbandonedCallAfterLedgerClose(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{})}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		r.Exec.SetLeaseRenewal(time.Millisecond)
		notKept := make(chan struct{}, 1)
		r.Exec.SetClaimNotKept(func() { notKept <- struct{}{} })
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		released := false
		defer func() {
			if !released {
				close(s.release)
			}
		}()
		r.Record("stuck:1", "stuck", `{}`)
		r.Step()
		require.NoError(t, r.Ledger.Close())
		<-notKept
		require.Contains(t, r.Logs(), "the ledger closed")
		require.NotContains(t, r.Logs(), "was lost")

		close(s.release)
		released = true
		<-ended
		require.Contains(t, r.Logs(), "returned after the ledger closed")
		require.NotContains(t, r.Logs(), "recording the outcome failed; trying again")
	})
}
