package sim

import (
	"context"
	"errors"
	"fmt"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/lab"
)

// workerState is where a simulated worker is in its attempt.
type workerState int

const (
	idle       workerState = iota // holds nothing
	claimed                       // holds a claim, not dispatched
	dispatched                    // dispatch mark recorded, call not made
	called                        // call made, outcome not reported
)

// worker is a simulated worker: the executor's attempt (claim, dispatch,
// call, report), one step at a time, with a crash point.
type worker struct {
	name        string
	incarnation int
	state       workerState
	claim       *opledger.Claim
	crash       lab.CrashPoint
	res         opledger.Result
	callErr     error
	// didWork: the last step moved something.
	didWork bool
}

// id names the worker's current incarnation: a crashed worker comes back
// as a new process.
func (wk *worker) id() string {
	if wk.incarnation == 0 {
		return wk.name
	}
	return fmt.Sprintf("%s.%d", wk.name, wk.incarnation)
}

// step moves wk one step. With faults, the worker may crash and the call
// may get a fault.
func (w *world) step(ctx context.Context, wk *worker, faults bool) error {
	wk.didWork = false
	switch wk.state {
	case idle:
		wk.crash = lab.CrashNone
		if faults && w.rng.Float64() < w.cfg.CrashRate {
			wk.crash = lab.CrashPoints[w.rng.IntN(len(lab.CrashPoints))]
		}
		if wk.crash == lab.CrashBeforeClaim {
			w.crashed(wk)
			return nil
		}
		c, err := w.ledger.ClaimNext(ctx, opledger.ClaimNextOptions{Worker: wk.id(), Lease: Lease})
		if errors.Is(err, opledger.ErrNothingDue) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: claim: %w", wk.id(), err)
		}
		wk.claim, wk.state, wk.didWork = c, claimed, true
		w.log("%s claimed %s attempt %d protected=%t", wk.id(), c.Operation.Key, c.Operation.AttemptCount, c.Protected)
	case claimed:
		if wk.crash == lab.CrashAfterClaim {
			w.crashed(wk)
			return nil
		}
		c := wk.claim
		_, err := w.ledger.Dispatch(ctx, c.Operation.Key, c.AttemptID, c.FencingToken)
		if errors.Is(err, opledger.ErrStaleFencingToken) {
			w.log("%s dispatch of %s refused: claim lost; nothing sent", wk.id(), c.Operation.Key)
			wk.reset()
			return nil
		}
		if se := (*opledger.StateError)(nil); errors.As(err, &se) {
			w.log("%s dispatch of %s refused: %s; nothing sent", wk.id(), c.Operation.Key, se.State)
			wk.reset()
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: dispatch %s: %w", wk.id(), c.Operation.Key, err)
		}
		wk.state, wk.didWork = dispatched, true
		w.log("%s dispatched %s", wk.id(), c.Operation.Key)
	case dispatched:
		if wk.crash == lab.CrashAfterDispatch {
			w.report.DispatchedNotCalled++
			w.crashed(wk)
			return nil
		}
		c := wk.claim
		if c.Protected && !c.ProtectedUntil.IsZero() && !w.now.Before(c.ProtectedUntil) {
			// What every worker must do: a protected call is not started
			// once the destination may have forgotten the key.
			w.report.DispatchedNotCalled++
			wk.res, wk.callErr = opledger.Result{}, opledger.Retryable(errors.New("the protection window closed before the call; nothing was sent"), 0)
			w.log("%s skipped the call of %s: protection window closed", wk.id(), c.Operation.Key)
			wk.state, wk.didWork = called, true
			return nil
		}
		d := w.dests[c.Operation.Destination]
		fault := lab.FaultNone
		if faults && w.rng.Float64() < w.cfg.FaultRate {
			fault = lab.CallFaults[w.rng.IntN(len(lab.CallFaults))]
			// A validation error is about the content, which every
			// attempt carries unchanged: a destination that may have
			// accepted it once does not refuse it later.
			if fault == lab.FaultValidation && c.Operation.AttemptCount > 1 {
				fault = lab.FaultNone
			}
		}
		if fault != lab.FaultNone {
			if err := d.Inject(fault); err != nil {
				return fmt.Errorf("%s: inject %s: %w", wk.id(), fault, err)
			}
			w.report.Faults[fault.String()]++
		}
		before := d.EffectsFor(c.Operation.Key)
		wk.res, wk.callErr = d.Call(ctx, opledger.Call{Operation: c.Operation, AttemptID: c.AttemptID,
			IdempotencyKey: c.IdempotencyKey, Protected: c.Protected})
		w.report.Calls++
		if w.now.After(c.LeaseExpiresAt) {
			w.report.LateCalls++
		}
		w.callAt[c.AttemptID] = w.now
		w.log("%s called %s: fault=%s effect=%t outcome=%s", wk.id(), c.Operation.Key, fault,
			d.EffectsFor(c.Operation.Key) > before, outcomeOf(wk.callErr))
		wk.state, wk.didWork = called, true
		if wk.crash == lab.CrashAfterEffect {
			w.crashed(wk)
		}
	case called:
		c := wk.claim
		op, err := w.ledger.Report(ctx, c.Operation.Key, c.AttemptID, c.FencingToken, opledger.ReportOf(wk.res, wk.callErr))
		var stale *opledger.StaleError
		switch {
		case errors.As(err, &stale):
			w.report.StaleReports++
			w.log("%s report of %s stale: kept as evidence; operation %s", wk.id(), c.Operation.Key, stale.Operation.State)
		case err != nil:
			return fmt.Errorf("%s: report %s: %w", wk.id(), c.Operation.Key, err)
		default:
			w.log("%s reported %s: operation %s", wk.id(), c.Operation.Key, op.State)
		}
		crash := wk.crash
		wk.reset()
		wk.didWork = true
		if crash == lab.CrashAfterReport {
			wk.crash = crash
			w.crashed(wk)
		}
	}
	return nil
}

// crashed ends the worker's process where it stands: whatever it holds is
// abandoned to lease expiry.
func (w *world) crashed(wk *worker) {
	w.report.Crashes[wk.crash.String()]++
	held := ""
	if wk.claim != nil {
		held = " holding " + wk.claim.Operation.Key
	}
	w.log("%s crashed %s%s", wk.id(), wk.crash, held)
	wk.reset()
	wk.incarnation++
	wk.didWork = true
}

func (wk *worker) reset() {
	wk.state = idle
	wk.claim = nil
	wk.crash = lab.CrashNone
	wk.res = opledger.Result{}
	wk.callErr = nil
}

func outcomeOf(err error) opledger.Outcome {
	if err == nil {
		return opledger.OutcomeSucceeded
	}
	o, _ := opledger.OutcomeOf(err)
	return o
}
