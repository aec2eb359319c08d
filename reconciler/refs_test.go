package reconciler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// twoStepCRM makes a record, then fails the call's second step with a
// retryable error, returning the record's id with it. Its search by
// external reference never sees a record (an index that lags, or none at
// all); fetched by id, a record is found at once.
type twoStepCRM struct {
	mu      sync.Mutex
	calls   int
	records map[string]json.RawMessage // by id
	lookups [][]string                 // the refs each lookup was given
}

func newTwoStepCRM() *twoStepCRM { return &twoStepCRM{records: map[string]json.RawMessage{}} }

func (*twoStepCRM) Name() string { return "twostep" }
func (*twoStepCRM) Capabilities() destination.Capabilities {
	return destination.Capabilities{Lookup: &destination.Lookup{Authoritative: true, VisibilityDelay: time.Second}}
}

func (c *twoStepCRM) Call(_ context.Context, call opledger.Call) (opledger.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	id := fmt.Sprintf("R-%d", c.calls)
	c.records[id] = call.Operation.Payload
	return opledger.Result{Ref: id}, opledger.Retryable(errors.New("twostep: attach the document: 503"), 0)
}

func (c *twoStepCRM) Lookup(_ context.Context, op *opledger.Operation, refs []string) (destination.LookupResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lookups = append(c.lookups, refs)
	for _, id := range refs {
		if p, ok := c.records[id]; ok {
			return destination.LookupResult{Found: true, Matches: string(p) == string(op.Payload), Ref: id,
				Evidence: "twostep: record " + id + " fetched"}, nil
		}
	}
	return destination.LookupResult{Evidence: "twostep: no record"}, nil
}

// forget loses every record, as a destination that rolled the create back
// after it reported the id.
func (c *twoStepCRM) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.records)
}

func (c *twoStepCRM) seen() (calls int, lookups [][]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls, append([][]string(nil), c.lookups...)
}

// TestLookupByReportedRef: a call that made a record and failed after it,
// returning the record's id with a retryable error, leaves the operation
// uncertain with the id on its attempt. The reconciler hands the id to the
// lookup, which fetches the record by it and settles the operation with
// it; nothing is sent again.
func TestLookupByReportedRef(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		crm := newTwoStepCRM()
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{crm} })
		r.Record("intake:R1:create", "twostep", `{"units": 2}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		require.Equal(t, "R-1", r.Attempts("intake:R1:create")[0].DestinationRef)

		pass := r.Reconcile()
		require.Equal(t, 1, pass.Decisions[reconciler.Succeeded], "last error %q", r.Get("intake:R1:create").LastError)
		op := r.Get("intake:R1:create")
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "R-1", op.DestinationRef)
		calls, lookups := crm.seen()
		require.Equal(t, 1, calls, "sent once")
		require.Equal(t, [][]string{{"R-1"}}, lookups)
	})
}

// TestReportedRefNotFoundIsHeld: the destination reported a record's id,
// so a lookup that cannot find it proves nothing, however authoritative:
// after the visibility delay the operation is held, not sent again, and
// the timeline names the reference.
func TestReportedRefNotFoundIsHeld(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		crm := newTwoStepCRM()
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{crm} })
		r.Record("intake:R2:create", "twostep", `{"units": 2}`)
		require.Equal(t, opledger.StateUncertain, r.Step().State)
		crm.forget()

		r.Clock.Advance(time.Minute) // past the visibility delay
		pass := r.Reconcile()
		require.Zero(t, pass.Decisions[reconciler.Retry])
		require.Equal(t, 1, pass.Decisions[reconciler.Held])
		require.Equal(t, opledger.StateHeld, r.Get("intake:R2:create").State)
		require.Contains(t, r.Evidence("intake:R2:create", "cannot be decided automatically"),
			`an attempt had reported reference "R-1" without a success, so the record's absence proves nothing`)
		calls, _ := crm.seen()
		require.Equal(t, 1, calls, "sent once")
	})
}
