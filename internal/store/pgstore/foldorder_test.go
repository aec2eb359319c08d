package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// TestForgetEventsLocksCountsInOrder: forgetting events adds their
// counts to the rows of compacted_events (one per tenant and status) in
// the order of tenants and statuses, so that two processes forgetting
// events at once never wait for each other's rows in a circle. A
// connection holds the first row (the deliveries' status ""); the
// statement waits for it, and the connection then gets every other row
// at once. Before, the rows were written in the order the aggregate
// produced them (a hash order here): the statement held other rows
// while it waited, and two runs deadlocked until deadlock_timeout broke
// it.
func TestForgetEventsLocksCountsInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	s, err := Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx, nil))

	long := time.Now().UTC().Add(-time.Hour).Truncate(time.Microsecond)
	statuses := []string{"applied", "conflict", "out_of_order", "unmapped"}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, st := range statuses {
			if err := tx.InsertEvent(ctx, &store.Event{Tenant: "t", Source: "s", EventID: st, Type: "x", Status: st, ReceivedAt: long}); err != nil {
				return err
			}
			if err := tx.InsertDelivery(ctx, &store.Delivery{Tenant: "t", Source: "s", EventID: st, ReceivedAt: long}); err != nil {
				return err
			}
		}
		return nil
	}))
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO compacted_events (tenant, status, events, deliveries, duplicate_deliveries)
		SELECT 't', unnest($1::text[]), 0, 0, 0`, append([]string{""}, statuses...))
	require.NoError(t, err)
	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	var one int
	require.NoError(t, holder.QueryRow(ctx, `SELECT 1 FROM compacted_events WHERE tenant = 't' AND status = '' FOR UPDATE`).Scan(&one))

	done := make(chan error, 1)
	var n int
	go func() {
		done <- s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			var err error
			n, err = tx.ForgetEventsBefore(ctx, time.Now(), 1000)
			return err
		})
	}()
	testdb.WaitBlockedBy(t, conn, "forgetting events")
	_, err = holder.Exec(ctx, `SELECT 1 FROM compacted_events WHERE tenant = 't' AND status <> '' FOR UPDATE NOWAIT`)
	require.NoError(t, err, "the other rows were free: the statement writes the first row first")
	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-done)
	require.Equal(t, len(statuses), n)
}
