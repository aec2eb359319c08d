package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/store/storetest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// foundLookup is a Go destination whose calls end uncertain and whose
// lookup finds the intended record, R1. With gate set, its first lookup
// says it began (entered) and answers once released.
type foundLookup struct {
	gate             bool
	entered, release chan struct{}
	lookups          atomic.Int32
}

func (*foundLookup) Name() string { return "found" }
func (*foundLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true}}
}
func (*foundLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}
func (d *foundLookup) Lookup(ctx context.Context, _ *opledger.Operation, _ []string) (destination.LookupResult, error) {
	if d.lookups.Add(1) == 1 && d.gate {
		d.entered <- struct{}{}
		select {
		case <-d.release:
		case <-ctx.Done():
			return destination.LookupResult{}, ctx.Err()
		}
	}
	return destination.LookupResult{Found: true, Matches: true, Ref: "R1", Evidence: "record R1"}, nil
}

// hangCase is an uncertain operation of a foundLookup destination in a
// store whose writes wait for a lock as long as it is held (PostgreSQL
// without lock_timeout; SQLite with a busy timeout of an hour), and a
// reconciler of it whose lookup lease is short.
type hangCase struct {
	dsn    string
	ledger *opledger.Ledger
	clock  *storetest.Clock
	dest   *foundLookup
	rec    *reconciler.Reconciler
	sink   *testrig.RecordSink
	op     *opledger.Operation
	lease  time.Duration
}

const hangKey = "intake:H1:create"

func newHangCase(t *testing.T, newDSN func(testing.TB) string, gate bool) *hangCase {
	t.Helper()
	ctx := context.Background()
	c := &hangCase{dsn: newDSN(t), clock: &storetest.Clock{},
		dest: &foundLookup{gate: gate, entered: make(chan struct{}, 1), release: make(chan struct{})}}
	var err error
	c.ledger, err = opledger.Open(ctx, c.dsn, opledger.Options{Clock: c.clock.Func, SQLiteBusyTimeout: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.ledger.Close()) })
	set, err := destination.NewSet(c.dest)
	require.NoError(t, err)
	c.op, err = c.ledger.Do(ctx, opledger.Intent{Key: hangKey, Action: "create", Destination: "found", Payload: json.RawMessage(`{}`)}, c.dest.Call)
	require.Error(t, err)
	require.Equal(t, opledger.StateUncertain, c.op.State)
	c.sink = testrig.NewRecordSink("reconcile")
	const timeout = 3 * time.Second
	c.rec, err = reconciler.New(c.ledger, reconciler.Config{Destinations: set, LookupTimeout: timeout, Logger: slog.New(c.sink)})
	require.NoError(t, err)
	c.rec.SetLeaseMargin(time.Second)
	c.lease = timeout + time.Second
	return c
}

// turn runs one pass of the reconciler aside; its result comes on the
// channel returned.
func (c *hangCase) turn(ctx context.Context) <-chan passResult {
	done := make(chan passResult, 1)
	go func() {
		pass, err := c.rec.RunOnce(ctx)
		done <- passResult{pass, err}
	}()
	return done
}

type passResult struct {
	pass reconciler.Pass
	err  error
}

// ended waits for a pass run aside, failing t if it has not returned
// within a minute: a failure guard only, as the bounds are a few seconds.
func ended(t *testing.T, done <-chan passResult, what string) reconciler.Pass {
	t.Helper()
	select {
	case res := <-done:
		require.NoError(t, res.err, "the queue was read")
		return res.pass
	case <-time.After(time.Minute):
		t.Fatal(what)
		return reconciler.Pass{}
	}
}

// busyLogged checks that the pass's operation was logged by the outage
// rule: at WARN, its first failure, store_busy, its store call cut at its
// deadline.
func (c *hangCase) busyLogged(t *testing.T, what string) {
	t.Helper()
	rec := c.sink.Waited(t)
	require.Equal(t, slog.LevelWarn, rec.Level)
	require.Equal(t, "store_busy", testrig.Attr(t, rec, "problem").String())
	require.EqualValues(t, 1, testrig.Attr(t, rec, "failures").Int64())
	logged := testrig.Attr(t, rec, "error").Any().(error)
	require.ErrorIs(t, logged, opledger.ErrStoreBusy)
	require.ErrorIs(t, logged, context.DeadlineExceeded)
	require.ErrorContains(t, logged, what)
	require.NotContains(t, logged.Error(), hangKey, "no key in the logs")
}

// settled checks that the next pass, the store free, looks the operation
// up and settles it as before: succeeded with the record found, nothing
// sent again, and the outage's end said once.
func (c *hangCase) settled(t *testing.T, lookups int32) {
	t.Helper()
	ctx := context.Background()
	pass, err := c.rec.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, pass.Decisions[reconciler.Succeeded], "%+v", pass)
	require.Equal(t, lookups, c.dest.lookups.Load())
	got, err := c.ledger.Get(ctx, hangKey)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, got.State)
	require.Equal(t, "R1", got.DestinationRef)
	require.Equal(t, 1, got.AttemptCount, "nothing was sent again")
	back := 0
	for _, r := range c.sink.Drain() {
		require.NotEqual(t, slog.LevelError, r.Level, "%s: a store that hangs is no ERROR", r.Message)
		if r.Message == "reconcile: store reachable again" {
			back++
			require.Equal(t, slog.LevelInfo, r.Level)
		}
	}
	require.Equal(t, 1, back)
}

// TestLookupClaimBoundedOnHungStore: taking an operation for a lookup
// (Ledger.ClaimLookup) had no deadline of its own. With the operation's
// row locked by another session (PostgreSQL, the DSN setting no
// lock_timeout) or the SQLite file's write lock held (a busy timeout
// longer than the lock), the reconciler's pass waited for it for as long
// as the lock was held: no other operation of the pass was settled, the
// next pass never began, and nothing was logged. The claim is now
// bounded by the lookup's lease: the pass ends while the lock is still
// held, the operation logged by the outage rule (WARN "reconcile",
// problem=store_busy), and the pass after the lock goes settles it as
// before, nothing sent again.
func TestLookupClaimBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		c := newHangCase(t, newDSN, false)
		unlock := testdb.HoldLock(t, c.dsn, opledger.DefaultTenant, hangKey)
		defer unlock()

		pass := ended(t, c.turn(ctx), "the pass still waits for the lock to claim the lookup")
		require.Equal(t, 1, pass.Examined)
		require.Equal(t, 1, pass.Errors)
		require.Zero(t, c.dest.lookups.Load(), "no lookup without the claim")
		c.busyLogged(t, "claim the lookup")
		unlock()

		// The claim did not land: the operation is due at once.
		got, err := c.ledger.Get(ctx, hangKey)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, got.State)
		c.settled(t, 1)
	})
}

// TestFindingBoundedOnHungStore: recording what a lookup found
// (Ledger.Reconcile) had no deadline of its own either: a lock taken on
// the operation while its lookup ran held the pass until the lock went.
// The write is now bounded by the lookup's lease, after which the
// operation is no longer this reconciler's to decide: the pass ends, the
// operation logged by the outage rule, and it is left as it was —
// uncertain, its attempts and timeline untouched, taken for the lookup
// until the lease ends; once that has passed, the next pass looks it up
// again and settles it, nothing sent again.
func TestFindingBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		c := newHangCase(t, newDSN, true)
		before, err := c.ledger.Timeline(ctx, hangKey)
		require.NoError(t, err)

		done := c.turn(ctx)
		<-c.dest.entered // the lookup is taken and runs
		unlock := testdb.HoldLock(t, c.dsn, opledger.DefaultTenant, hangKey)
		defer unlock()
		close(c.dest.release) // it finds R1; recording that waits for the lock

		pass := ended(t, done, "the pass still waits for the lock to record the finding")
		require.Equal(t, 1, pass.Examined)
		require.Equal(t, 1, pass.Errors)
		c.busyLogged(t, "reconcile")
		unlock()

		got, err := c.ledger.Get(ctx, hangKey)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, got.State, "nothing decided")
		require.Equal(t, c.op.AttemptCount, got.AttemptCount)
		require.Empty(t, got.DestinationRef)
		require.NotNil(t, got.NotBefore)
		if c.op.NotBefore != nil {
			require.True(t, got.NotBefore.After(*c.op.NotBefore), "taken for the lookup: its next check moved a lease ahead")
		}
		after, err := c.ledger.Timeline(ctx, hangKey)
		require.NoError(t, err)
		require.Len(t, after, len(before), "no finding, no deferral on the timeline")
		for _, e := range after {
			require.False(t, strings.Contains(e.Evidence, "R1"), "the finding was not recorded: %+v", e)
		}

		// Once the lease has passed, the next pass looks again.
		c.clock.Advance(c.lease)
		c.settled(t, 2)
	})
}

// keyedNoLookup is a Go destination without a lookup whose idempotency
// key it keeps an hour; its calls end uncertain.
type keyedNoLookup struct{}

func (keyedNoLookup) Name() string { return "keyed" }
func (keyedNoLookup) Capabilities() destination.Capabilities {
	return destination.Capabilities{IdempotencyKey: &destination.IdempotencyKey{Header: "Idempotency-Key", Retention: time.Hour}}
}
func (keyedNoLookup) Call(context.Context, opledger.Call) (opledger.Result, error) {
	return opledger.Result{}, opledger.Uncertain(errors.New("timeout"))
}

// TestWritesWithoutLookupBoundedOnHungStore: an operation decided without
// a lookup (its destination's idempotency key still kept: a protected
// retry) and one of a destination this reconciler does not know (put off
// with a deferral) were written with no deadline either: a lock on the
// operation held the pass, or the Reconcile call, as long as it was held.
// Each write is now bounded by the time a lookup's lease gives to record
// a finding (30 s), logged by the outage rule as a store_busy failure,
// and the operation is left uncertain, decided at the next pass.
func TestWritesWithoutLookupBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		dsn := newDSN(t)
		l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: time.Hour})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		set, err := destination.NewSet(keyedNoLookup{})
		require.NoError(t, err)
		keyed, err := l.Do(ctx, opledger.Intent{Key: "intake:K1:create", Action: "create", Destination: "keyed", Payload: json.RawMessage(`{}`)},
			keyedNoLookup{}.Call)
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, keyed.State)
		unknown, err := l.Do(ctx, opledger.Intent{Key: "intake:U1:create", Action: "create", Destination: "elsewhere", Payload: json.RawMessage(`{}`)},
			keyedNoLookup{}.Call)
		require.Error(t, err)
		require.Equal(t, opledger.StateUncertain, unknown.State)
		sink := testrig.NewRecordSink("reconcile")
		rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: slog.New(sink)})
		require.NoError(t, err)
		rec.SetLeaseMargin(time.Second)

		// SQLite's write lock is the file's; PostgreSQL's, each row's.
		unlocks := []func(){testdb.HoldLock(t, dsn, opledger.DefaultTenant, keyed.Key)}
		if !strings.HasPrefix(dsn, "sqlite:") {
			unlocks = append(unlocks, testdb.HoldRowLock(t, dsn, "operations", opledger.DefaultTenant, unknown.Key))
		}
		unlock := func() {
			for _, u := range unlocks {
				u()
			}
		}
		defer unlock()

		done := make(chan passResult, 1)
		go func() {
			pass, err := rec.RunOnce(ctx)
			done <- passResult{pass, err}
		}()
		pass := ended(t, done, "the pass still waits for the lock to record the protected retry")
		require.Equal(t, 1, pass.Examined, "the queue holds this reconciler's destinations only")
		require.Equal(t, 1, pass.Errors)
		logged := sink.Waited(t)
		require.Equal(t, slog.LevelWarn, logged.Level)
		require.Equal(t, "store_busy", testrig.Attr(t, logged, "problem").String())

		decided := make(chan error, 1)
		go func() {
			_, err := rec.Reconcile(ctx, unknown)
			decided <- err
		}()
		select {
		case err = <-decided:
		case <-time.After(time.Minute):
			t.Fatal("Reconcile still waits for the lock to put the operation off")
		}
		require.ErrorIs(t, err, opledger.ErrStoreBusy)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "defer reconcile")
		unlock()

		// The store free, both are decided as before.
		pass, err = rec.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, pass.Decisions[reconciler.Retry], "%+v", pass)
		got, err := l.Get(ctx, keyed.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, got.State)
		require.True(t, got.Protected)
		d, err := rec.Reconcile(ctx, unknown)
		require.NoError(t, err)
		require.Equal(t, reconciler.Wait, d)
		got, err = l.Get(ctx, unknown.Key)
		require.NoError(t, err)
		require.Equal(t, opledger.StateUncertain, got.State)
	})
}

// TestAdvanceBoundedOnHungStore: recording a workflow's next step once a
// lookup settled its step had no deadline of its own. On PostgreSQL, with
// the workflows table locked by another session (a LOCK TABLE; the DSN
// sets no lock_timeout), the pass waited for it for as long as the lock
// was held, the step's success recorded. It is now bounded by the
// lookup's lease, as the executor's advance is by its own, and logged at
// WARN ("advance workflow"): the pass ends, the step succeeded, while the
// lock is still held, and the server's workflow sweep advances the
// workflow later.
func TestAdvanceBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	d := &foundLookup{gate: true, entered: make(chan struct{}, 1), release: make(chan struct{})}
	set, err := destination.NewSet(d)
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "wf:W1", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "one", Action: "create", Destination: "found", Payload: json.RawMessage(`{"n":1}`)},
		{Name: "two", Action: "create", Destination: "found", Payload: json.RawMessage(`{"n":2}`)},
	}})
	require.NoError(t, err)
	const step = "wf:W1/one"
	c, err := l.Claim(ctx, step, opledger.ClaimOptions{Lease: time.Minute})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, step, c.AttemptID, c.FencingToken)
	require.NoError(t, err)
	op, err := l.Report(ctx, step, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	sink := testrig.NewRecordSink("advance workflow")
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, LookupTimeout: 3 * time.Second, Logger: slog.New(sink)})
	require.NoError(t, err)
	rec.SetLeaseMargin(time.Second)

	done := make(chan passResult, 1)
	go func() {
		pass, err := rec.RunOnce(ctx)
		done <- passResult{pass, err}
	}()
	<-d.entered
	_, unlock := testdb.HoldTableLock(t, dsn, "workflows")
	defer unlock()
	close(d.release) // R1 found: the step succeeds; its workflow's next step waits for the table

	pass := ended(t, done, "the pass still waits for the workflows table")
	require.Equal(t, 1, pass.Decisions[reconciler.Succeeded], "%+v", pass)
	require.Zero(t, pass.Errors)
	logged := sink.Waited(t)
	require.Equal(t, slog.LevelWarn, logged.Level)
	require.ErrorIs(t, testrig.Attr(t, logged, "error").Any().(error), context.DeadlineExceeded)
	unlock()
	got, err := l.Get(ctx, step)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, got.State)
	require.Equal(t, "R1", got.DestinationRef)
}

// TestQueueReadBoundedOnHungStore: a pass's read of its queue
// (Ledger.ReconcileQueue) had no deadline of its own. On PostgreSQL, with
// the operations table locked by another session (a LOCK TABLE of an
// operator's migration or maintenance; the DSN sets no lock_timeout), Run
// waited for it for as long as the lock was held, logging nothing. The
// read is now bounded (30 s): the pass fails with a store_busy error,
// which Run logs by the outage rule ("reconcile pass"), and the next pass
// reads the queue again.
func TestQueueReadBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	d := &foundLookup{}
	set, err := destination.NewSet(d)
	require.NoError(t, err)
	op, err := l.Do(ctx, opledger.Intent{Key: hangKey, Action: "create", Destination: "found", Payload: json.RawMessage(`{}`)}, d.Call)
	require.Error(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: slog.New(testrig.NewRecordSink(""))})
	require.NoError(t, err)
	rec.SetLeaseMargin(time.Second)

	_, unlock := testdb.HoldTableLock(t, dsn, "operations")
	defer unlock()
	done := make(chan passResult, 1)
	go func() {
		pass, err := rec.RunOnce(ctx)
		done <- passResult{pass, err}
	}()
	var res passResult
	select {
	case res = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the pass still waits for the table lock to read its queue")
	}
	require.ErrorIs(t, res.err, opledger.ErrStoreBusy)
	require.ErrorIs(t, res.err, context.DeadlineExceeded)
	require.ErrorContains(t, res.err, "read reconcile queue")
	require.Zero(t, res.pass.Examined)
	unlock()

	pass, err := rec.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, pass.Decisions[reconciler.Succeeded])
}
