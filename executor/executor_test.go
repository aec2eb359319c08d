package executor_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// stepResult is what one RunOnce returned.
type stepResult struct {
	op  *opledger.Operation
	err error
}

// runOnceAside runs ex.RunOnce(ctx) in a goroutine of its own, for a test
// that acts while the step runs; its result comes on the channel.
func runOnceAside(ctx context.Context, ex *executor.Executor) <-chan stepResult {
	stepped := make(chan stepResult, 1)
	go func() {
		op, err := ex.RunOnce(ctx)
		stepped <- stepResult{op, err}
	}()
	return stepped
}

// slow is a Go destination whose calls wait until released or cancelled.
type slow struct {
	started chan struct{}
	release chan struct{}
	n       atomic.Int32
	mu      sync.Mutex
	ctxErr  []error
	// cancelled, if set, is the error a cancelled call returns instead
	// of the context's cause.
	cancelled error
}

func newSlow() *slow {
	return &slow{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (s *slow) Name() string                           { return "slow" }
func (s *slow) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (s *slow) Call(ctx context.Context, _ opledger.Call) (opledger.Result, error) {
	n := s.n.Add(1)
	s.started <- struct{}{}
	select {
	case <-s.release:
		s.mu.Lock()
		s.ctxErr = append(s.ctxErr, ctx.Err())
		s.mu.Unlock()
		return opledger.Result{Ref: "S" + strconv.Itoa(int(n))}, nil
	case <-ctx.Done():
		if s.cancelled != nil {
			return opledger.Result{}, s.cancelled
		}
		return opledger.Result{}, context.Cause(ctx)
	}
}

func withSlow(s *slow) func(*testrig.Options) {
	return func(o *testrig.Options) { o.Extra = []destination.Destination{s} }
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	_, err := executor.New(nil, executor.Config{})
	require.ErrorContains(t, err, "no destinations")
	set, err := destination.NewSet(newSlow())
	require.NoError(t, err)
	_, err = executor.New(nil, executor.Config{Destinations: set, Lease: time.Second, CallTimeout: time.Second})
	require.ErrorContains(t, err, "must be shorter than the lease")
	_, err = executor.New(nil, executor.Config{Destinations: set, Lease: opledger.MaxLease + time.Hour})
	require.EqualError(t, err, "executor: the lease is 169h0m0s: it must be at most 168h0m0s (opledger.MaxLease)")

	// A negative limit is refused, never replaced by the default.
	for _, tc := range []struct {
		cfg  executor.Config
		want string
	}{
		{executor.Config{Workers: -1}, "Workers is -1: it must be positive (0 means the default, 4)"},
		{executor.Config{Lease: -time.Second}, "the lease is -1s: it must be positive"},
		{executor.Config{CallTimeout: -time.Second}, "the call timeout is -1s: it must be positive"},
		{executor.Config{PollInterval: -time.Second}, "the poll interval is -1s: it must be positive"},
		// Its workers are named Worker/1 … Worker/N, within the ledger's 200 bytes.
		{executor.Config{Worker: strings.Repeat("w", 199)}, "the Worker name is 199 bytes"},
		{executor.Config{Worker: strings.Repeat("w", 198), Workers: 10}, "so it must be at most 197"},
	} {
		tc.cfg.Destinations = set
		_, err := executor.New(nil, tc.cfg)
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, executor.CheckConfig(tc.cfg), tc.want)
	}
	require.NoError(t, executor.CheckConfig(executor.Config{Destinations: set, SweepInterval: -1}), "a negative sweep interval disables the sweep")
	require.NoError(t, executor.CheckConfig(executor.Config{Destinations: set, Worker: strings.Repeat("w", 198)}), "198 bytes and /4")
}

// TestDestinationTimeoutWithinCallLimit: a destination whose own timeout
// is not shorter than the executor's call limit (two thirds of the lease
// unless set) is refused by New and CheckConfig alike, with what to
// change: the executor's deadline would cut its calls short, and a call
// that may have had its effect would end uncertain.
func TestDestinationTimeoutWithinCallLimit(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	withTimeout := func(d time.Duration) *destination.Set {
		h, err := destination.NewHTTP(destination.HTTPConfig{Name: "crm", URL: "http://127.0.0.1:1/records", Ref: "/id",
			Timeout: destination.Duration(d)}, destination.LoadOptions{})
		require.NoError(t, err)
		set, err := destination.NewSet(h, newSlow()) // a Go destination declares no timeout
		require.NoError(t, err)
		t.Cleanup(func() { _ = set.Close() })
		return set
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		cfg     executor.Config
		want    string // empty: accepted
	}{
		{"default timeout, default lease", 0, executor.Config{}, ""},
		{"just below the limit", 19 * time.Second, executor.Config{}, ""},
		{"at the limit", 20 * time.Second, executor.Config{},
			"executor: destination crm: its timeout 20s is not shorter than the executor's call limit 20s (two thirds of the lease 30s)" +
				", which would cut its calls short and leave them uncertain: raise the lease (serve --lease) to 31s or more, or lower the destination's timeout below 20s"},
		{"above the limit", time.Minute, executor.Config{Lease: 10 * time.Second},
			"its timeout 1m0s is not shorter than the executor's call limit 6.667s (two thirds of the lease 10s)"},
		{"the suggested lease is enough", time.Minute, executor.Config{Lease: 91 * time.Second}, ""},
		{"explicit call timeout", 10 * time.Second, executor.Config{CallTimeout: 5 * time.Second},
			"its timeout 10s is not shorter than the executor's call limit 5s (CallTimeout; the lease is 30s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Destinations = withTimeout(tc.timeout)
			e, err := executor.New(l, cfg)
			if tc.want == "" {
				require.NoError(t, err)
				require.NotNil(t, e)
				require.NoError(t, executor.CheckConfig(cfg))
				return
			}
			require.ErrorContains(t, err, tc.want)
			require.EqualError(t, executor.CheckConfig(cfg), err.Error(), "CheckConfig refuses what New refuses")
		})
	}
}

// Stop lets a call in flight finish, uncancelled, and reports it.
func TestStopFinishesCallsInFlight(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := newSlow()
		r := testrig.New(t, newDSN, withSlow(s))
		r.Record("slow:1", "slow", `{}`)
		require.NoError(t, r.Exec.Start(r.Ctx))
		<-s.started

		stopped := make(chan error, 1)
		go func() { stopped <- r.Exec.Stop(context.Background()) }()
		<-r.Exec.StopBegun()
		select {
		case err := <-stopped:
			t.Fatalf("Stop returned (%v) while a call was in flight", err)
		default:
		}
		close(s.release)
		require.NoError(t, <-stopped)

		op := r.Get("slow:1")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "S1", op.DestinationRef)
		s.mu.Lock()
		require.Equal(t, []error{nil}, s.ctxErr, "the call was not cancelled")
		s.mu.Unlock()
		require.NoError(t, r.Exec.Stop(r.Ctx), "a second Stop is harmless")
		require.Error(t, r.Exec.Start(r.Ctx), "an executor starts once")
	})
}

// A claim that is not dispatched when shutdown begins is given back at
// once, not left for its lease.
func TestStopGivesBackUndispatchedClaim(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:S1:create", "crm", `{"units": 1}`)
		claimed := make(chan struct{})
		r.Exec.SetBeforeDispatch(func(stop context.Context) {
			close(claimed)
			<-stop.Done() // shutdown begins while the claim is held
		})
		require.NoError(t, r.Exec.Start(r.Ctx))
		<-claimed
		require.NoError(t, r.Exec.Stop(context.Background()))

		op := r.Get("intake:S1:create")
		require.Equal(t, opledger.StatePending, op.State, "due again at once")
		require.Nil(t, op.LeaseExpiresAt)
		require.False(t, op.Dispatched)
		attempts := r.Attempts("intake:S1:create")
		require.Len(t, attempts, 1)
		require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
		require.Contains(t, r.Evidence("intake:S1:create", "released before dispatch"), "executor stopping")
		require.Zero(t, r.Server.Creates(), "nothing was sent")

		r.Exec.SetBeforeDispatch(nil)
		require.Equal(t, opledger.StateSucceeded, r.Step().State)
		require.Equal(t, 1, r.Server.Effects())
	})
}

// When Stop's context ends first, calls in flight are cancelled with
// ErrStopping as the cause and reported: uncertain, never lost.
func TestStopDeadlineCancelsCalls(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		s := newSlow()
		r := testrig.New(t, newDSN, withSlow(s))
		r.Record("slow:2", "slow", `{}`)
		require.NoError(t, r.Exec.Start(r.Ctx))
		<-s.started
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := r.Exec.Stop(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "stop executor: at the deadline, 1 call in flight cancelled (recorded uncertain")
		require.NotContains(t, err.Error(), "writes to the store", "the store took the outcome")

		op := r.Get("slow:2")
		require.Equal(t, opledger.StateUncertain, op.State, "the call may have acted")
		require.Contains(t, op.LastError, executor.ErrStopping.Error())
	})
}

// The note that the executor cancelled a call survives a destination's
// error as long as the ledger keeps: the error is cut, not the note.
func TestStopDeadlineNoteSurvivesLongError(t *testing.T) {
	t.Parallel()
	s := newSlow()
	s.cancelled = opledger.Uncertain(errors.New(strings.Repeat("connection lost ", 100)))
	r := testrig.New(t, testdb.SQLiteDSN, withSlow(s))
	r.Record("slow:3", "slow", `{}`)
	require.NoError(t, r.Exec.Start(r.Ctx))
	<-s.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, r.Exec.Stop(ctx), context.Canceled)

	op := r.Get("slow:3")
	require.Equal(t, opledger.StateUncertain, op.State)
	require.True(t, strings.HasPrefix(op.LastError, "connection lost connection lost"), op.LastError)
	require.Contains(t, op.LastError, " (call cancelled: ")
	note := op.LastError[strings.LastIndex(op.LastError, " (call cancelled: "):]
	require.True(t, strings.HasPrefix(note, " (call cancelled: "+executor.ErrStopping.Error()), op.LastError)
	require.True(t, strings.HasSuffix(note, ")"), op.LastError)
	require.LessOrEqual(t, len(op.LastError), 1000)
}

// The pool runs many operations concurrently, each exactly once.
func TestPoolRunsEachOperationOnce(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Executor.Workers = 4 })
		const n = 40
		for i := range n {
			r.Record(fmt.Sprintf("bulk:%02d", i), "crm-key", `{"units": 1}`)
		}
		arrivals := r.Server.Arrivals()
		require.NoError(t, r.Exec.Start(r.Ctx))
		for range n {
			<-arrivals
		}
		require.NoError(t, r.Exec.Stop(context.Background()))
		require.Equal(t, n, r.Server.Creates())
		require.Equal(t, n, r.Server.Effects())
		for i := range n {
			op := r.Get(fmt.Sprintf("bulk:%02d", i))
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, 1, op.AttemptCount)
		}
	})
}

// The executor settles leases of workers that died: dispatched → uncertain.
func TestSweepSettlesExpiredLeases(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Executor.SweepInterval = time.Millisecond })
		r.Record("crash:1", "crm", `{"units": 1}`)
		c, err := r.Ledger.Claim(r.Ctx, "crash:1", opledger.ClaimOptions{Worker: "dead-worker"})
		require.NoError(t, err)
		_, err = r.Ledger.Dispatch(r.Ctx, "crash:1", c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		r.Clock.Advance(time.Minute)

		settled := make(chan int, 1)
		r.Exec.SetAfterSweep(func(n int, err error) {
			if err == nil && n > 0 {
				select {
				case settled <- n:
				default:
				}
			}
		})
		require.NoError(t, r.Exec.Start(r.Ctx))
		require.Equal(t, 1, <-settled)
		require.NoError(t, r.Exec.Stop(context.Background()))
		require.Equal(t, opledger.StateUncertain, r.Get("crash:1").State, "dispatched: never back to pending")
		require.Zero(t, r.Server.Creates())
	})
}

// RunOnce with a context that ends before dispatch gives the claim back.
func TestRunOnceCancelledBeforeDispatch(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:S2:create", "crm", `{"units": 1}`)
		ctx, cancel := context.WithCancel(context.Background())
		r.Exec.SetBeforeDispatch(func(context.Context) { cancel() })
		op, err := r.Exec.RunOnce(ctx)
		require.NoError(t, err)
		require.Nil(t, op)
		require.Equal(t, opledger.StatePending, r.Get("intake:S2:create").State)
		require.Zero(t, r.Server.Creates())
	})
}

// A lease that runs out before dispatch: nothing is sent.
func TestLeaseLostBeforeDispatch(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:S3:create", "crm", `{"units": 1}`)
		r.Exec.SetBeforeDispatch(func(context.Context) { r.Clock.Advance(time.Minute) })
		op, err := r.Exec.RunOnce(r.Ctx)
		require.NoError(t, err)
		require.Nil(t, op)
		require.Equal(t, opledger.StatePending, r.Get("intake:S3:create").State)
		require.Zero(t, r.Server.Creates())
	})
}

// lateDest succeeds, but only after its lease has expired and the
// operation became uncertain: the late success still settles it.
type lateDest struct{ r *testrig.Rig }

func (d *lateDest) Name() string                           { return "late" }
func (d *lateDest) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (d *lateDest) Call(ctx context.Context, c opledger.Call) (opledger.Result, error) {
	d.r.Clock.Advance(time.Minute)
	if _, err := d.r.Ledger.ExpireLeases(ctx); err != nil {
		return opledger.Result{}, err
	}
	return opledger.Result{Ref: "L1"}, nil
}

func TestLateSuccessAfterLeaseExpiry(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &lateDest{}
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
		d.r = r
		r.Record("late:1", "late", `{}`)
		op, err := r.Exec.RunOnce(r.Ctx)
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "L1", op.DestinationRef)
		require.Contains(t, r.Events("late:1"), "late success resolved")
	})
}

// Errors from the destination never carry the payload or the credential.
func TestErrorsCarryNoPayload(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		r.Record("intake:S4:create", "crm", `{"units": "secret-units-value"}`)
		op := r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		r.Record("intake:S5:create", "crm", `{"unitz": 1}`)
		op = r.Step()
		require.Equal(t, opledger.StateFailed, op.State, "the body template cannot be rendered: rejected before sending")
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
		require.Contains(t, op.LastError, `map has no entry for key "units"`)
		require.True(t, strings.HasPrefix(op.LastError, "not sent: "), op.LastError)
		require.False(t, op.Dispatched, "nothing was sent, and nothing says it may have been")
		require.NotContains(t, r.Logs(), "secret-units-value")
	})
}

// TestWorkflowAdvancesOnSuccess: the executor records a workflow's next
// step as soon as it reports the previous one succeeded, without the
// server's periodic sweep (which the rig does not run).
func TestWorkflowAdvancesOnSuccess(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN)
		_, _, err := r.Ledger.PutWorkflow(r.Ctx, "wf:W1", opledger.WorkflowSpec{Owner: "ops-team", Steps: []opledger.WorkflowStep{
			{Name: "one", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":1}`)},
			{Name: "two", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":2}`)},
		}})
		require.NoError(t, err)
		op := r.Step()
		require.NotNil(t, op)
		require.Equal(t, "wf:W1/one", op.Key)
		require.Equal(t, opledger.StateSucceeded, op.State)
		op = r.Step()
		require.NotNil(t, op, "the second step was recorded when the first succeeded")
		require.Equal(t, "wf:W1/two", op.Key)
		require.Equal(t, opledger.StateSucceeded, op.State)
	})
}

// connDropper is a destination whose call succeeds, after cutting every
// connection the ledger's PostgreSQL pool holds (its application_name):
// the report that follows meets a store that fails for a moment.
type connDropper struct{ app string }

func (d *connDropper) Name() string                           { return "dropper" }
func (d *connDropper) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (d *connDropper) Call(ctx context.Context, _ opledger.Call) (opledger.Result, error) {
	err := testdb.AdminExec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '"+d.app+"'")
	if err != nil {
		return opledger.Result{}, opledger.Rejected(err)
	}
	return opledger.Result{Ref: "D1"}, nil
}

// The call happened: an outcome the store failed to take for a moment
// (its connections cut) is recorded on a later try, not lost to the lease.
func TestReportRetriedAfterStoreFailure(t *testing.T) {
	t.Parallel()
	d := &connDropper{app: fmt.Sprintf("opledger_report_retry_%d", time.Now().UnixNano())}
	newDSN := func(tb testing.TB) string {
		u, err := url.Parse(testdb.PostgresDSN(tb))
		require.NoError(tb, err)
		q := u.Query()
		q.Set("application_name", d.app)
		u.RawQuery = q.Encode()
		return u.String()
	}
	r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
	r.Record("drop:1", "dropper", `{}`)
	op, err := r.Exec.RunOnce(r.Ctx)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "D1", op.DestinationRef)
	require.Contains(t, r.Logs(), "recording the outcome failed; trying again", "the first report met the cut connections")
}

// nulRef is a destination that answers success with a reference the
// ledger cannot store.
type nulRef struct{}

func (nulRef) Name() string                           { return "nulref" }
func (nulRef) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (nulRef) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{Ref: "R\x001"}, nil
}

// A reference with a NUL byte made the ledger refuse the whole report, and
// the outcome was lost to the lease; it is reported as uncertain, with why.
func TestUnstorableRefIsUncertain(t *testing.T) {
	t.Parallel()
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{nulRef{}} })
	r.Record("nul:1", "nulref", `{}`)
	op, err := r.Exec.RunOnce(r.Ctx)
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Contains(t, op.LastError, "not text the ledger can store")
}

// deadlineDest records when its call started and the deadline it got.
type deadlineDest struct {
	started  time.Time
	deadline time.Time
}

func (d *deadlineDest) Name() string                           { return "deadline" }
func (d *deadlineDest) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (d *deadlineDest) Call(ctx context.Context, _ opledger.Call) (opledger.Result, error) {
	d.started = time.Now()
	d.deadline, _ = ctx.Deadline()
	return opledger.Result{Ref: "D1"}, nil
}

// CallTimeout counts from the claim: time lost between claim and call (a
// slow dispatch) shortens the call instead of pushing its end past the
// lease.
func TestCallDeadlineCountsFromClaim(t *testing.T) {
	t.Parallel()
	d := &deadlineDest{}
	const callTimeout, slowDispatch = 2 * time.Second, 300 * time.Millisecond
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Extra = []destination.Destination{d}
		o.Executor.Lease, o.Executor.CallTimeout = 3*time.Second, callTimeout
		// The rig's HTTP destinations time out after 5 s, longer than this
		// call limit: New would refuse them. One that is not used instead.
		o.YAML = "destinations:\n  - name: unused\n    url: @URL@/records\n    ref: /id\n    timeout: 1s\n"
	})
	r.Exec.SetBeforeDispatch(func(context.Context) { time.Sleep(slowDispatch) }) // a slow store, not synchronisation
	r.Record("deadline:1", "deadline", `{}`)
	op, err := r.Exec.RunOnce(r.Ctx)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.False(t, d.deadline.IsZero())
	require.LessOrEqual(t, d.deadline.Sub(d.started), callTimeout-slowDispatch, "the call's time counts from the claim")
}

// refAndError is a Go destination that answers with a reference and an
// error at once: it says which record it made, and that the outcome is
// not a success (a follow-up step failed, say).
type refAndError struct {
	ref string
	err error
}

func (refAndError) Name() string                           { return "referr" }
func (refAndError) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (d refAndError) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{Ref: d.ref}, d.err
}

// A reference that comes back with an error is the destination's own
// evidence of what it made: it is kept on the attempt, beside the error's
// outcome, for the person who settles the operation. It is never the
// operation's reference: nothing is confirmed, and the outcome is the
// error's.
func TestRefWithErrorKeptOnAttempt(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		for _, tc := range []struct {
			name  string
			err   error
			state opledger.State
		}{
			{"uncertain", opledger.Uncertain(errors.New("record made, attachment upload timed out")), opledger.StateUncertain},
			{"unclassified", errors.New("record made, then the connection broke"), opledger.StateUncertain},
			{"rejected", opledger.Rejected(errors.New("record made, then refused")), opledger.StateFailed},
			// Retryable says nothing happened, the reference says
			// something did: a retry could make it twice.
			{"retryable", opledger.Retryable(errors.New("record made as a draft, try again"), 0), opledger.StateUncertain},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				r := testrig.New(t, newDSN, func(o *testrig.Options) {
					o.Extra = []destination.Destination{refAndError{ref: "CRM-77", err: tc.err}}
				})
				r.Record("referr:1", "referr", `{}`)
				op := r.Step()
				require.Equal(t, tc.state, op.State)
				require.Empty(t, op.DestinationRef, "not a confirmed effect")
				require.True(t, strings.HasPrefix(op.LastError, opledger.ErrorText(tc.err)), op.LastError)
				if tc.name == "retryable" {
					require.Contains(t, op.LastError, "not retried on its own: the destination reported a reference")
				}
				attempts := r.Attempts("referr:1")
				require.Len(t, attempts, 1)
				require.NotEqual(t, string(opledger.OutcomeSucceeded), attempts[0].Outcome)
				require.Equal(t, "CRM-77", attempts[0].DestinationRef, "the destination's reference is kept as evidence")
				stats, err := r.Ledger.Stats(r.Ctx, false)
				require.NoError(t, err)
				require.Zero(t, stats.ConfirmedEffects)

				if tc.state != opledger.StateUncertain {
					return
				}
				// Without a lookup or a key, the reconciler holds it for
				// a person: the reference still confirms nothing.
				r.Reconcile()
				op = r.Get("referr:1")
				require.Equal(t, opledger.StateHeld, op.State)
				require.Empty(t, op.DestinationRef)
				require.Equal(t, "CRM-77", r.Attempts("referr:1")[0].DestinationRef)
			})
		}
	})
}

// A reference the ledger cannot store, beside an error, is dropped (the
// report would be refused whole, and the outcome lost to the lease); the
// error says that there was one.
func TestUnstorableRefWithErrorDropped(t *testing.T) {
	t.Parallel()
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Extra = []destination.Destination{refAndError{ref: "R\x001", err: opledger.Uncertain(errors.New("record made, upload timed out"))}}
	})
	r.Record("referr:2", "referr", `{}`)
	op := r.Step()
	require.Equal(t, opledger.StateUncertain, op.State)
	require.Contains(t, op.LastError, "record made, upload timed out")
	require.Contains(t, op.LastError, "the destination also reported a reference, not text the ledger can store")
	require.Empty(t, r.Attempts("referr:2")[0].DestinationRef)
}

// A worker whose claim ends with no attempt to show (here the claim was
// lost before its dispatch mark: its lease was settled meanwhile) goes
// on with the next due operation at once. It used to pause a whole
// PollInterval, as when nothing was due (found by an audit).
func TestWorkerGoesOnAfterALostClaim(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Executor.Workers = 1
			o.Executor.PollInterval = time.Hour
		})
		arrived := r.Server.Arrivals()
		r.Record("intake:W1:create", "crm", `{"units": 1}`)
		var once sync.Once
		r.Exec.SetBeforeDispatch(func(context.Context) {
			once.Do(func() {
				// The lease runs out and is settled before the dispatch
				// mark: the claim is lost, nothing was sent.
				r.Clock.Advance(time.Minute)
				_, err := r.Ledger.ExpireLeases(r.Ctx)
				require.NoError(t, err)
			})
		})
		require.NoError(t, r.Exec.Start(r.Ctx))
		t.Cleanup(func() { require.NoError(t, r.Exec.Stop(context.Background())) })
		select {
		case <-arrived:
		case <-time.After(time.Minute):
			t.Fatal("the worker paused after the lost claim instead of taking the operation due again")
		}
		require.NoError(t, r.Exec.Stop(context.Background()))
		require.Equal(t, opledger.StateSucceeded, r.Get("intake:W1:create").State)
		require.Len(t, r.Attempts("intake:W1:create"), 2)
	})
}

// TestCallNotStartedOnceItsLimitPassed: a dispatch mark that took the
// whole call limit (a slow store; CallTimeout counts from the claim)
// leaves no time for the call: the executor does not start it, and
// records the attempt retryable with nothing sent, as Ledger.Do does for
// a context that ended before its action. (It used to start the call
// with a context already ended, and a destination answering with the
// context's error made the attempt uncertain, though nothing was sent.)
func TestCallNotStartedOnceItsLimitPassed(t *testing.T) {
	t.Parallel()
	s := newSlow()
	const callTimeout, slowDispatch = 200 * time.Millisecond, 300 * time.Millisecond
	r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) {
		o.Extra = []destination.Destination{s}
		o.Executor.Lease, o.Executor.CallTimeout = 3*time.Second, callTimeout
		o.YAML = "destinations:\n  - name: unused\n    url: @URL@/records\n    ref: /id\n    timeout: 100ms\n"
	})
	r.Exec.SetBeforeDispatch(func(context.Context) { time.Sleep(slowDispatch) }) // a slow store, not synchronisation
	r.Record("slow:late-dispatch", "slow", `{}`)
	op, err := r.Exec.RunOnce(r.Ctx)
	require.NoError(t, err)
	require.Zero(t, s.n.Load(), "the call was not started")
	require.Equal(t, opledger.StatePending, op.State, "nothing was sent: retried")
	require.Contains(t, op.LastError, "the call was not made")
	attempts := r.Attempts("slow:late-dispatch")
	require.Len(t, attempts, 1)
	require.Equal(t, string(opledger.OutcomeRetryable), attempts[0].Outcome)
}
