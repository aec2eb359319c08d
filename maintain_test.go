package opledger_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestMaintain: Maintain settles a lease that ended after dispatch,
// moves on a workflow whose step succeeded without anyone advancing it (as
// after an operator's mark_succeeded) and compacts an operation past
// retention, on both stores, logs what it did, and returns once its
// context ends.
func TestMaintain(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var offset atomic.Int64
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Lease: 10 * time.Second, Retention: time.Hour,
				Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			intent := func(key string) *opledger.Intent {
				return &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
			}
			lost, err := l.Claim(ctx, "k:lost", opledger.ClaimOptions{Intent: intent("k:lost"), Dispatch: true})
			require.NoError(t, err)
			done, err := l.Claim(ctx, "k:done", opledger.ClaimOptions{Intent: intent("k:done")})
			require.NoError(t, err)
			_, err = l.Report(ctx, "k:done", done.AttemptID, done.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
			require.NoError(t, err)
			_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "b", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}})
			require.NoError(t, err)
			step, err := l.Claim(ctx, "wf:1/a", opledger.ClaimOptions{})
			require.NoError(t, err)
			_, err = l.Report(ctx, "wf:1/a", step.AttemptID, step.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "S1"})
			require.NoError(t, err)
			offset.Add(int64(2 * time.Hour)) // k:lost's lease and k:done's retention are over

			var logs testrig.LogBuffer
			mctx, stop := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() {
				l.Maintain(mctx, opledger.MaintainOptions{LeaseSweep: time.Millisecond, CompactInterval: time.Millisecond,
					Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				close(stopped)
			}()
			// Stopped only once both jobs have logged what they did: the
			// ledger shows a job's work as soon as it commits, before the
			// job has counted it, and a job stopped in between (its last
			// COMMIT's answer cancelled) counts nothing.
			require.Eventually(t, func() bool {
				out := logs.String()
				return strings.Contains(out, "settled expired leases") && strings.Contains(out, "compacted.tombstoned=1") &&
					strings.Contains(out, "advanced workflows")
			}, 10*time.Second, time.Millisecond, "the lease settled, the workflow moved on and the old operation compacted")
			stop()
			<-stopped

			op, err := l.Get(ctx, "k:lost")
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			gone, err := l.Get(ctx, "k:done")
			require.NoError(t, err)
			require.True(t, gone.Tombstoned)
			attempts, err := l.Attempts(ctx, "k:lost")
			require.NoError(t, err)
			require.Equal(t, lost.AttemptID, attempts[0].ID)
			require.Equal(t, opledger.AttemptLeaseExpired, attempts[0].Outcome)
			w, err := l.GetWorkflow(ctx, "wf:1")
			require.NoError(t, err)
			require.Equal(t, opledger.StepState(opledger.StatePending), w.Steps[1].State, "step b recorded")
			require.NotContains(t, logs.String(), "level=ERROR")
		})
	}
}

// TestCloseStopsMaintain: Close ends Maintain (whose context never ends)
// and waits for it before closing the store, so that no job logs errors
// about a closed store for ever; Maintain after Close returns at once, and
// a second Close is a no-op on both stores.
func TestCloseStopsMaintain(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			acme, err := l.WithTenant("acme")
			require.NoError(t, err)
			var logs testrig.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			stopped := make(chan struct{})
			go func() {
				l.Maintain(ctx, opledger.MaintainOptions{LeaseSweep: time.Millisecond, WorkflowSweep: time.Millisecond, Logger: log})
				close(stopped)
			}()
			require.NoError(t, acme.Close(), "any tenant's view closes the ledger")
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				t.Fatal("Maintain still runs after Close")
			}
			require.NoError(t, l.Close(), "a second Close")
			l.Maintain(ctx, opledger.MaintainOptions{Logger: log}) // returns at once
			require.NotContains(t, logs.String(), "level=ERROR")
			_, err = l.Get(ctx, "k")
			require.ErrorIs(t, err, opledger.ErrClosed)
		})
	}
}

// TestMaintainSaysANegativeInterval: a negative interval, which Maintain
// cannot return as an error, is logged as one, naming the option, and the
// default is used.
func TestMaintainSaysANegativeInterval(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, l.Close()) }()
	var logs testrig.LogBuffer
	stopped := make(chan struct{})
	go func() {
		l.Maintain(ctx, opledger.MaintainOptions{WorkflowSweep: -time.Second, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		close(stopped)
	}()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "a negative interval is a mistake") },
		10*time.Second, time.Millisecond)
	cancel()
	<-stopped
	out := logs.String()
	require.Contains(t, out, "level=ERROR")
	require.Contains(t, out, "option=MaintainOptions.WorkflowSweep given=-1s used=5s")
	require.NotContains(t, out, "MaintainOptions.LeaseSweep", "zero is the default, not a mistake")
}

// TestMaintainSaysWhatIsClaimedAtStart: a process that starts after one
// that died says once, after its first lease sweep, how many operations
// are still claimed by leases not yet ended, of every tenant, and names
// none of them; those whose leases had ended are settled, not counted.
func TestMaintainSaysWhatIsClaimedAtStart(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			intent := func(key string) *opledger.Intent {
				return &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
			}
			// The process that dies: three claims, one of which ends
			// before the next process starts.
			dead, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			acme, err := dead.WithTenant("acme")
			require.NoError(t, err)
			_, err = dead.Claim(ctx, "k:short", opledger.ClaimOptions{Intent: intent("k:short"), Lease: time.Hour})
			require.NoError(t, err)
			_, err = dead.Claim(ctx, "k:long", opledger.ClaimOptions{Intent: intent("k:long"), Lease: 3 * time.Hour, Dispatch: true})
			require.NoError(t, err)
			_, err = acme.Claim(ctx, "k:long", opledger.ClaimOptions{Intent: intent("k:long"), Lease: 3 * time.Hour})
			require.NoError(t, err)
			require.NoError(t, dead.Close())

			l, err := opledger.Open(ctx, dsn, opledger.Options{
				Clock: func(now time.Time) time.Time { return now.Add(2 * time.Hour) }}) // k:short's lease is over
			require.NoError(t, err)
			defer func() { require.NoError(t, l.Close()) }()
			var logs testrig.LogBuffer
			mctx, stop := context.WithCancel(ctx)
			stopped := make(chan struct{})
			go func() {
				l.Maintain(mctx, opledger.MaintainOptions{LeaseSweep: time.Millisecond,
					Logger: slog.New(slog.NewTextHandler(&logs, nil))})
				close(stopped)
			}()
			const said = "operations claimed by leases not yet ended"
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), said) }, 10*time.Second, time.Millisecond)
			// A later sweep, which could say it again, settles a claim
			// of this process's whose lease ends at once.
			_, err = l.Claim(ctx, "k:later", opledger.ClaimOptions{Intent: intent("k:later"), Lease: time.Millisecond})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return strings.Count(logs.String(), `msg="settled expired leases" count=1`) == 2 },
				10*time.Second, time.Millisecond, "%s", &logs)
			stop()
			<-stopped

			var lines []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, said) {
					lines = append(lines, line)
				}
			}
			require.Len(t, lines, 1, "said once:\n%s", logs.String())
			require.Contains(t, lines[0], " count=2", "both tenants' running claims, not the one whose lease ended")
			require.NotContains(t, lines[0], "k:", "no key")
			require.NotContains(t, logs.String(), "level=ERROR")
		})
	}
}
