package opledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// brokenLeases claims keys with a lease of a second, deletes behind the
// ledger's back the attempts SQL's LIKE pattern broken matches (so that
// their leases cannot be settled), and reopens the ledger an hour later,
// every lease expired.
func brokenLeases(t *testing.T, keys []string, broken string) *opledger.Ledger {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{})
	require.NoError(t, err)
	for _, k := range keys {
		in := opledger.Intent{Key: k, Action: "crm.create", Destination: "crm"}
		_, err := l.Claim(ctx, k, opledger.ClaimOptions{Intent: &in, Lease: time.Second})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())
	db, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	_, err = db.Exec(`DELETE FROM attempts WHERE key LIKE ?`, broken)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	l, err = opledger.Open(ctx, "sqlite:"+path, opledger.Options{Clock: func(n time.Time) time.Time { return n.Add(time.Hour) }})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l
}

// TestExpireLeasesPastAFailure: a lease that cannot be settled (here its
// attempt row was deleted behind the ledger's back) does not stop the
// sweep: the leases after it are settled, and the error counts the
// failure without its key.
func TestExpireLeasesPastAFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	keys := []string{"intake:alice.smith", "intake:bob", "intake:carol"}
	l := brokenLeases(t, keys, "intake:alice.smith")
	n, err := l.ExpireLeases(ctx)
	require.Equal(t, 2, n, "the leases after the failing one are settled")
	require.ErrorContains(t, err, "expire leases: 1 could not be settled")
	require.NotContains(t, err.Error(), "alice", "the error is for a log: no key")
	for _, k := range keys[1:] {
		op, err := l.Get(ctx, k)
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, op.State, k)
	}
	n, err = l.ExpireLeases(ctx)
	require.Zero(t, n)
	require.ErrorContains(t, err, "1 could not be settled", "tried again on the next run")
}

// TestExpireLeasesPastAPageOfFailures: more unsettlable leases than one
// page of the sweep do not hide the leases after them; before the sweep
// paged by key, a first page that failed whole ended every run.
func TestExpireLeasesPastAPageOfFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const broken = 201 // the sweep reads 200 a page
	keys := []string{"intake:z"}
	for i := range broken {
		keys = append(keys, fmt.Sprintf("intake:a%03d", i))
	}
	l := brokenLeases(t, keys, "intake:a%")
	n, err := l.ExpireLeases(ctx)
	require.Equal(t, 1, n, "the lease after the failing ones is settled")
	require.ErrorContains(t, err, fmt.Sprintf("expire leases: %d could not be settled", broken))
	op, err := l.Get(ctx, "intake:z")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
}

// TestLateReportExtendsTheCall: a report that arrives after its lease
// was found expired shows that its call lasted until then: a lookup's
// "nothing" proves absence only once the visibility delay has passed
// since that report, not since the lease ran out.
func TestLateReportExtendsTheCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newManualClock()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "l.db"), opledger.Options{Lease: 10 * time.Second, Clock: clock.Map})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	in := opledger.Intent{Key: "k1", Action: "crm.create", Destination: "crm"}
	c, err := l.Claim(ctx, "k1", opledger.ClaimOptions{Intent: &in, Dispatch: true})
	require.NoError(t, err)
	clock.Advance(11 * time.Second)
	n, err := l.ExpireLeases(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	clock.Advance(20 * time.Second) // 31 s in: the caller gives up and reports
	_, err = l.Report(ctx, "k1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after 31s"})
	var stale *opledger.StaleError
	require.ErrorAs(t, err, &stale)
	require.True(t, stale.Recorded)

	clock.Advance(15 * time.Second) // 46 s in: 35 s after the lease, 15 s after the call
	op, _, err := l.Reconcile(ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: 30 * time.Second, AttemptCount: 1})
	require.NoError(t, err)
	require.Equal(t, opledger.StateUncertain, op.State, "absence counts only 30 s after the call ended")
	clock.Advance(16 * time.Second) // 62 s in
	op, _, err = l.Reconcile(ctx, "k1", opledger.Finding{Authoritative: true, VisibilityDelay: 30 * time.Second, AttemptCount: 1})
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, op.State)
}
