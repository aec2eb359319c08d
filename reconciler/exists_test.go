package reconciler_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/reconciler"
)

// takenError matches destination.ErrExists through its Is method, in a
// client library's own words: its text never says "already exists".
type takenError struct{ detail string }

func (e takenError) Error() string      { return "crm: 409 external_ref taken" + e.detail }
func (takenError) Is(target error) bool { return target == destination.ErrExists }

// uniqueCRM refuses every create as a duplicate, and its authoritative
// lookup cannot see the record.
type uniqueCRM struct {
	calls  atomic.Int32
	detail string
}

func (*uniqueCRM) Name() string { return "uniq" }
func (*uniqueCRM) Capabilities() destination.Capabilities {
	return destination.Capabilities{UniqueReference: &destination.UniqueReference{},
		Lookup: &destination.Lookup{Authoritative: true, VisibilityDelay: time.Second}}
}
func (c *uniqueCRM) Call(context.Context, opledger.Call) (opledger.Result, error) {
	c.calls.Add(1)
	return opledger.Result{}, opledger.Uncertain(takenError{detail: c.detail})
}
func (*uniqueCRM) Lookup(context.Context, *opledger.Operation, []string) (destination.LookupResult, error) {
	return destination.LookupResult{Evidence: "search: no record"}, nil
}

// TestExistsMatchedNotWorded: a Go destination's error that matches
// destination.ErrExists is taken for one whatever its text, and however
// long (stored errors are cut to 1000 bytes): a lookup that cannot find
// the record proves nothing then, and the create is not sent again.
func TestExistsMatchedNotWorded(t *testing.T) {
	t.Parallel()
	for name, detail := range map[string]string{"worded": "", "long": ": " + strings.Repeat("x", 2000)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			crm := &uniqueCRM{detail: detail}
			r := testrig.New(t, testdb.SQLiteDSN, func(o *testrig.Options) { o.Extra = []destination.Destination{crm} })
			r.Record("intake:X1:create", "uniq", `{"units": 2}`)
			require.Equal(t, opledger.StateUncertain, r.Step().State)
			require.True(t, errors.Is(opledger.Uncertain(takenError{}), destination.ErrExists))
			r.Clock.Advance(time.Minute)
			pass := r.Reconcile()
			require.Zero(t, pass.Decisions[reconciler.Retry], "last error %q", r.Get("intake:X1:create").LastError)
			require.Equal(t, 1, pass.Decisions[reconciler.Held])
			require.Equal(t, int32(1), crm.calls.Load(), "sent once")
		})
	}
}
