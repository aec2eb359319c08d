package executor_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestAbandonedCallReportNotHeldByHungStore: the store calls that keep
// the claim of an abandoned call (the timeline's note, the lease
// extensions) had no deadline. When the store stopped answering them
// (here another session holds the operation's row lock, and the DSN sets
// no lock_timeout: the note waits for ever), the call's outcome, once it
// returned, was not reported until they did: its report waited behind
// them, however long. Each is now bounded, and cancelled when the call
// returns, so the report goes to the store at once (where it waits for
// the lock like any write, and lands once the lock is gone).
func TestAbandonedCallReportNotHeldByHungStore(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := &stuck{started: make(chan struct{}, 1), release: make(chan struct{})}
		var dsn string
		r := abandonRig(t, newDSN, s, &dsn)
		stopped := make(chan struct{}, 1)
		r.Exec.SetKeepStopped(func() { stopped <- struct{}{} })
		ended := make(chan struct{}, 1)
		r.Exec.SetAbandonedEnded(func() { ended <- struct{}{} })
		var releaseCall sync.Once
		defer releaseCall.Do(func() { close(s.release) })
		op := r.Record("stuck:1", "stuck", `{}`)

		// The store stops answering the operation's writes while the call
		// runs: the claim's note and extensions, once it is abandoned,
		// wait for the lock.
		stepped := runOnceAside(r.Ctx, r.Exec)
		<-s.started
		unlock := testdb.HoldLock(t, dsn, op.Tenant, "stuck:1")
		defer unlock()
		require.NoError(t, (<-stepped).err)
		require.Equal(t, 1, r.Exec.AbandonedCalls())

		releaseCall.Do(func() { close(s.release) })
		select {
		case <-stopped:
		case <-time.After(time.Minute):
			// A failure guard only: with the fix this comes within the
			// renewal interval, without it never.
			t.Fatal("the call returned, and its report still waits behind a store call keeping its claim")
		}
		unlock()
		<-ended
		require.Zero(t, r.Exec.AbandonedCalls())
		got := r.Get("stuck:1")
		require.Equal(t, opledger.StateSucceeded, got.State, r.Logs())
		require.Equal(t, "late-1", got.DestinationRef)
		require.NotContains(t, r.Logs(), "context canceled",
			"a store call cancelled because the call returned is no failure to log")
	})
}
