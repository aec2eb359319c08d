package storecheck

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// Exists checks the plain existence reads of a write transaction on s, a
// migrated, empty store: OperationExists, WorkflowExists and
// EventObjectExists answer false for a row that is not there (another
// tenant's, a tombstone) and true once it is, in the transaction that
// wrote it and in later ones.
func Exists(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	type answers struct{ operation, tombstone, workflow, object, otherTenant bool }
	read := func(tx store.Tx) (a answers, err error) {
		if a.operation, err = tx.OperationExists(ctx, "t", "op"); err != nil {
			return a, err
		}
		if a.tombstone, err = tx.OperationExists(ctx, "t", "gone"); err != nil {
			return a, err
		}
		if a.workflow, err = tx.WorkflowExists(ctx, "t", "wf"); err != nil {
			return a, err
		}
		if a.object, err = tx.EventObjectExists(ctx, "t", "shop", "order:1"); err != nil {
			return a, err
		}
		var other [3]bool
		if other[0], err = tx.OperationExists(ctx, "u", "op"); err != nil {
			return a, err
		}
		if other[1], err = tx.WorkflowExists(ctx, "u", "wf"); err != nil {
			return a, err
		}
		if other[2], err = tx.EventObjectExists(ctx, "t", "desk", "order:1"); err != nil {
			return a, err
		}
		a.otherTenant = other != [3]bool{}
		return a, nil
	}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		a, err := read(tx)
		require.NoError(t, err)
		require.Equal(t, answers{}, a, "an empty store")
		if err := tx.UpsertTombstone(ctx, &store.Tombstone{Tenant: "t", Key: "gone", Fingerprint: "fp", State: "succeeded",
			CreatedAt: at, FinishedAt: at, CompactedAt: at}); err != nil {
			return err
		}
		if err := tx.InsertOperation(ctx, &store.Operation{Tenant: "t", Key: "op", Action: "a", Destination: "crm",
			Version: 1, Fingerprint: "fp", State: "pending", Revision: 1, CreatedAt: at, UpdatedAt: at}); err != nil {
			return err
		}
		if err := tx.InsertWorkflow(ctx, &store.Workflow{Tenant: "t", Key: "wf", Fingerprint: "fp", Definition: []byte(`{"steps":[]}`),
			Revision: 1, CreatedAt: at, UpdatedAt: at}); err != nil {
			return err
		}
		if err := tx.InsertEventObject(ctx, &store.EventObject{Tenant: "t", Source: "shop", ObjectKey: "order:1",
			OrderValue: "1", EventID: "e1", Revision: 1, UpdatedAt: at}); err != nil {
			return err
		}
		a, err = read(tx)
		require.NoError(t, err)
		require.Equal(t, answers{operation: true, workflow: true, object: true}, a, "what this transaction wrote")
		return nil
	}))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		a, err := read(tx)
		require.NoError(t, err)
		require.Equal(t, answers{operation: true, workflow: true, object: true}, a, "committed")
		return nil
	}))
}
