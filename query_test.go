package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestHistoryOfUnknownKey: Attempts and Timeline of a key the ledger does
// not hold (a typo, another tenant's) fail with ErrNotFound, as Get does,
// instead of looking like an operation without history; an operation not
// yet claimed has no attempts and no error.
func TestHistoryOfUnknownKey(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			_, _, err = l.Record(ctx, opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)

			attempts, err := l.Attempts(ctx, "k:1")
			require.NoError(t, err)
			require.Empty(t, attempts, "recorded, never claimed")
			timeline, err := l.Timeline(ctx, "k:1")
			require.NoError(t, err)
			require.NotEmpty(t, timeline)

			acme, err := l.WithTenant("acme")
			require.NoError(t, err)
			for name, ledger := range map[string]*opledger.Ledger{"a typo": l, "another tenant's": acme} {
				key := "k:1"
				if ledger == l {
					key = "k:2"
				}
				_, err = ledger.Attempts(ctx, key)
				require.ErrorIs(t, err, opledger.ErrNotFound, name)
				_, err = ledger.Timeline(ctx, key)
				require.ErrorIs(t, err, opledger.ErrNotFound, name)
			}
		})
	}
}

// TestWrongTokenSaysSo: a dispatch with a token the attempt was never
// issued says that, not that the attempt no longer holds the operation
// (it does).
func TestWrongTokenSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	c, err := l.Claim(ctx, "k:1", opledger.ClaimOptions{Intent: &opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "k:1", c.AttemptID, c.FencingToken+7)
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	require.ErrorContains(t, err, "is not attempt "+c.AttemptID+"'s (it was issued token")
	require.NotContains(t, err.Error(), "no longer holds")
	op, err := l.Dispatch(ctx, "k:1", c.AttemptID, c.FencingToken)
	require.NoError(t, err, "the claim still holds")
	require.True(t, op.Dispatched)
}

// TestListExceptCancelled: a list can leave out the failed operations an
// operator cancelled, page by page, with a cursor of its own; the failed
// ones are counted by kind.
func TestListExceptCancelled(t *testing.T) {
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			for _, key := range []string{"c:1", "r:1", "p:1", "c:2", "r:2"} {
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
				switch key[0] {
				case 'c':
					_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
				case 'r':
					var c *opledger.Claim
					c, err = l.Claim(ctx, key, opledger.ClaimOptions{})
					require.NoError(t, err)
					_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"})
				}
				require.NoError(t, err)
			}
			keys := func(o opledger.ListOptions) []string {
				var out []string
				for {
					page, err := l.List(ctx, o)
					require.NoError(t, err)
					for _, op := range page.Items {
						out = append(out, op.Key)
					}
					if page.NextCursor == "" {
						return out
					}
					o.Cursor = page.NextCursor
				}
			}
			failed := []opledger.State{opledger.StateFailed}
			require.Equal(t, []string{"r:2", "r:1"}, keys(opledger.ListOptions{States: failed, ExceptCancelled: true, Limit: 1}))
			require.Equal(t, []string{"r:2", "p:1", "r:1"}, keys(opledger.ListOptions{ExceptCancelled: true, Limit: 2}))
			require.Equal(t, []string{"r:2", "c:2", "r:1", "c:1"}, keys(opledger.ListOptions{States: failed, Limit: 3}))

			page, err := l.List(ctx, opledger.ListOptions{States: failed, ExceptCancelled: true, Limit: 1})
			require.NoError(t, err)
			_, err = l.List(ctx, opledger.ListOptions{States: failed, Limit: 1, Cursor: page.NextCursor})
			require.ErrorIs(t, err, opledger.ErrInvalidInput, "a cursor continues only its own list")

			kinds, err := l.CountFailedByKind(ctx)
			require.NoError(t, err)
			require.Equal(t, map[opledger.FailureKind]int{opledger.FailureRejected: 2, opledger.FailureCancelled: 2}, kinds)
		})
	}
}

// TestStaleReportSaysWhy: a late report says whether a newer claim holds
// the operation or the attempt's lease just ended, and that the report
// was kept, rather than a "current token" equal to the caller's.
func TestStaleReportSaysWhy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newManualClock()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Clock: clock.Map, Lease: time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	c, err := l.Claim(ctx, "k:1", opledger.ClaimOptions{Dispatch: true, Intent: &opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	clock.Advance(time.Minute)
	_, err = l.ExpireLeases(ctx)
	require.NoError(t, err)
	_, err = l.Report(ctx, "k:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	require.ErrorContains(t, err, "no longer holds the operation (its lease ended); its report was kept as evidence (state succeeded)")
}

// TestStaleCallSaysHowTheAttemptEnded: a dispatch or lease extension
// from an attempt that ended otherwise than by its lease (it reported, or
// gave the claim back) says so, not that its lease ended. (An attempt
// given back and one whose lease ran out before its dispatch are both
// recorded abandoned: the error names both.)
func TestStaleCallSaysHowTheAttemptEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	in := func(key string) *opledger.Intent {
		return &opledger.Intent{Key: key, Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)}
	}
	reported, err := l.Claim(ctx, "k:reported", opledger.ClaimOptions{Dispatch: true, Intent: in("k:reported")})
	require.NoError(t, err)
	_, err = l.Report(ctx, "k:reported", reported.AttemptID, reported.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	_, err = l.ExtendLease(ctx, "k:reported", reported.AttemptID, reported.FencingToken, time.Minute)
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	require.ErrorContains(t, err, "no longer holds the operation (it had reported succeeded already)")

	released, err := l.Claim(ctx, "k:released", opledger.ClaimOptions{Intent: in("k:released")})
	require.NoError(t, err)
	_, err = l.Release(ctx, "k:released", released.AttemptID, released.FencingToken, "stopping")
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, "k:released", released.AttemptID, released.FencingToken)
	require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
	require.ErrorContains(t, err, "no longer holds the operation (it ended before its dispatch: it gave the claim back, or its lease ran out)")
}
