package storecheck

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// OldestDue checks the store's OldestDue on s, a migrated, empty store,
// on both of its paths: the scan of the oldest pending operations
// (store.OldestDueScan), and the read of the due ones by their index when
// more than store.OldestDueScanRows older ones all wait for their retry.
// Another tenant's operation never counts for a tenant; it does for all.
func OldestDue(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	// Every operation was written just now (a repeat that named an
	// owner, say): the wait is counted from when it became pending.
	op := func(tenant, key string, created, notBefore, pendingSince time.Time) *store.Operation {
		return &store.Operation{Tenant: tenant, Key: key, Action: "a", Destination: "crm", Version: 1, Fingerprint: "fp",
			State: "pending", Revision: 1, CreatedAt: created, NotBefore: notBefore, StateSince: pendingSince, UpdatedAt: now}
	}
	insert := func(ops ...*store.Operation) {
		t.Helper()
		require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			for _, o := range ops {
				if err := tx.InsertOperation(ctx, o); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	oldest := func(tenant string) (store.OperationID, time.Time) {
		t.Helper()
		var id store.OperationID
		var since time.Time
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			id, since, err = r.OldestDue(ctx, tenant, now)
			return err
		}))
		return id, since
	}

	id, since := oldest("t")
	require.True(t, since.IsZero(), "nothing pending")
	require.Equal(t, store.OperationID{}, id)

	// The scan: an old operation waiting for its retry is passed over;
	// one approved (pending) later than another was created loses to it.
	insert(op("t", "backoff", now.Add(-time.Hour), now.Add(time.Hour), now.Add(-time.Hour)),
		op("t", "approved", now.Add(-50*time.Minute), time.Time{}, now.Add(-5*time.Minute)),
		op("t", "plain", now.Add(-40*time.Minute), time.Time{}, now.Add(-40*time.Minute)),
		op("u", "other", now.Add(-2*time.Hour), time.Time{}, now.Add(-2*time.Hour)))
	id, since = oldest("t")
	require.Equal(t, store.OperationID{Tenant: "t", Key: "plain"}, id)
	require.True(t, since.Equal(now.Add(-40*time.Minute)), "%s", since)
	id, _ = oldest("")
	require.Equal(t, store.OperationID{Tenant: "u", Key: "other"}, id, "all tenants")

	// More old operations waiting for their retry than the scan reads:
	// the due ones are read by their index instead.
	var waiting []*store.Operation
	for i := range store.OldestDueScanRows + 1 {
		at := now.Add(-3 * time.Hour).Add(time.Duration(i) * time.Millisecond)
		waiting = append(waiting, op("v", fmt.Sprintf("wait:%04d", i), at, now.Add(time.Hour), at))
	}
	insert(waiting...)
	insert(op("v", "due:2", now.Add(-time.Minute), time.Time{}, now.Add(-time.Minute)),
		op("v", "due:1", now.Add(-2*time.Minute), now.Add(-90*time.Second), now.Add(-2*time.Minute)))
	id, since = oldest("v")
	require.Equal(t, store.OperationID{Tenant: "v", Key: "due:1"}, id, "due again since its retry time, before due:2 was made")
	require.True(t, since.Equal(now.Add(-90*time.Second)), "%s", since)
}
