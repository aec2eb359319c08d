package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// panicking is a Go destination whose Call panics, with a value that
// names the operation's key (which must stay out of the logs). called, if
// set, is signalled first.
type panicking struct{ called chan struct{} }

func (*panicking) Name() string                           { return "panicky" }
func (*panicking) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (p *panicking) Call(_ context.Context, c opledger.Call) (opledger.Result, error) {
	if p.called != nil {
		p.called <- struct{}{}
	}
	panic(fmt.Sprintf("bad state for %s", c.Operation.Key))
}

// TestDestinationPanicIsUncertain: a destination whose Call panics does
// not panic RunOnce (it used to let the panic through): the attempt is
// recorded uncertain at once, with the panic's value as its error (the
// dispatch mark preceded the call: the request may have gone out), and
// logged at ERROR with a stack, without the operation's key.
func TestDestinationPanicIsUncertain(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{&panicking{}} })
		r.Record("panic:1", "panicky", `{}`)
		var op *opledger.Operation
		var err error
		require.NotPanics(t, func() { op, err = r.Exec.RunOnce(r.Ctx) })
		require.NoError(t, err)
		require.NotNil(t, op)
		require.Equal(t, opledger.StateUncertain, op.State, "the request may have gone out")
		require.True(t, op.Dispatched)
		require.Equal(t, "destination panicked: bad state for <key>", op.LastError)
		require.Nil(t, op.LeaseExpiresAt, "settled at once, not left to its lease")

		attempts := r.Attempts("panic:1")
		require.Len(t, attempts, 1)
		require.Equal(t, string(opledger.OutcomeUncertain), attempts[0].Outcome)
		require.Equal(t, "destination panicked: bad state for <key>", attempts[0].Error)

		logs := r.Logs()
		require.Contains(t, logs, `level=ERROR msg="destination panicked; the attempt is recorded uncertain"`)
		require.Contains(t, logs, "destination=panicky")
		require.Contains(t, logs, "stack=", "with the stack")
		require.Contains(t, logs, "panic_test.go", "the stack shows where it panicked")
		// The rig fails the test if the key reached the logs.
	})
}

// leaky panics with the whole payload it was given, as a careless
// destination's panic may.
type leaky struct{}

func (leaky) Name() string                           { return "leaky" }
func (leaky) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (leaky) Call(_ context.Context, c opledger.Call) (opledger.Result, error) {
	panic(fmt.Sprintf("cannot send %s", c.Operation.Payload))
}

// TestDestinationPanicMasksSensitiveValues: a panic whose value repeats
// a sensitive payload value is masked in the log line, as in the stored
// error.
func TestDestinationPanicMasksSensitiveValues(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{leaky{}} })
		_, _, err := r.Ledger.Record(r.Ctx, opledger.Intent{Key: "leak:1", Action: "mail.send", Destination: "leaky",
			Payload: json.RawMessage(`{"to":"ana.SECRET@example.invalid","n":1}`), SensitiveFields: []string{"to"}})
		require.NoError(t, err)
		op, err := r.Exec.RunOnce(r.Ctx)
		require.NoError(t, err)
		require.Equal(t, `destination panicked: cannot send {"to":"***","n":1}`, op.LastError)
		require.Contains(t, r.Logs(), `cannot send {\"to\":\"***\",\"n\":1}`)
		require.NotContains(t, r.Logs(), "SECRET")
	})
}

// TestDestinationPanicKeepsPoolWorking: with Start, a panicking
// destination used to kill the whole process; the worker now records the
// attempt uncertain and goes on with the next operation.
func TestDestinationPanicKeepsPoolWorking(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		p := &panicking{called: make(chan struct{}, 1)}
		s := newSlow()
		close(s.release) // answers at once
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.Extra = []destination.Destination{p, s}
			o.Executor.Workers = 1
			o.Executor.PollInterval = 10 * time.Millisecond
		})
		r.Record("panic:2", "panicky", `{}`)
		require.NoError(t, r.Exec.Start(r.Ctx))
		<-p.called
		// Recorded only now, so that the one worker meets it after the
		// panic.
		r.Record("slow:after-panic", "slow", `{}`)
		select {
		case <-s.started:
		case <-time.After(time.Minute):
			t.Fatal("the worker did not go on after the panic")
		}
		require.NoError(t, r.Exec.Stop(context.Background()))

		op := r.Get("panic:2")
		require.Equal(t, opledger.StateUncertain, op.State)
		require.Equal(t, "destination panicked: bad state for <key>", op.LastError)
		next := r.Get("slow:after-panic")
		require.Equal(t, opledger.StateSucceeded, next.State)
		require.Equal(t, "S1", next.DestinationRef)
	})
}

// preparePanics is a destination whose Prepare panics.
type preparePanics struct{ calls int }

func (*preparePanics) Name() string                           { return "badprep" }
func (*preparePanics) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (*preparePanics) Prepare(opledger.Call) error            { panic("template index out of range") }
func (d *preparePanics) Call(context.Context, opledger.Call) (opledger.Result, error) {
	d.calls++
	return opledger.Result{Ref: "never"}, nil
}

// TestPreparePanicIsRejected: a Prepare that panics is recovered too;
// it runs before the dispatch mark, so the attempt ends rejected with
// nothing sent.
func TestPreparePanicIsRejected(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		d := &preparePanics{}
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{d} })
		r.Record("prep:1", "badprep", `{}`)
		var op *opledger.Operation
		var err error
		require.NotPanics(t, func() { op, err = r.Exec.RunOnce(r.Ctx) })
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, op.State)
		require.Equal(t, opledger.FailureRejected, op.FailureKind)
		require.False(t, op.Dispatched, "nothing was sent")
		require.Equal(t, "not sent: destination panicked in Prepare: template index out of range", op.LastError)
		require.Zero(t, d.calls)
		require.Contains(t, r.Logs(), `level=ERROR msg="destination panicked before the dispatch; nothing was sent"`)
	})
}

// TestStartAfterStopIsRefused: a Stop before Start used to do nothing,
// and a later Start started workers nobody would stop. Stop is final.
func TestStartAfterStopIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	ex, err := executor.New(l, executor.Config{Destinations: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	require.NoError(t, ex.Stop(ctx), "a Stop before Start is harmless")
	err = ex.Start(ctx)
	require.ErrorContains(t, err, "executor: stopped: an executor does not start after Stop")
	require.NoError(t, ex.Stop(ctx))
	// goleak (TestMain) finds any worker the refused Start left running.
}

// TestNewRefusesNilLedger: executor.New with a nil ledger is refused
// (it used to accept it and panic at the first attempt).
func TestNewRefusesNilLedger(t *testing.T) {
	t.Parallel()
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	_, err = executor.New(nil, executor.Config{Destinations: set})
	require.EqualError(t, err, "executor: a ledger is required: New was given a nil *opledger.Ledger")
	require.NoError(t, executor.CheckConfig(executor.Config{Destinations: set}), "CheckConfig needs no ledger")
}
