package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestKilledInsideTransaction kills (SIGKILL) a process in the middle of a
// write transaction on PostgreSQL: it holds an operation's row lock (the
// SELECT … FOR UPDATE every decision about an operation starts with) and
// has written in the transaction without committing. Another session
// waiting for that row gets it once the server finds the client gone;
// nothing the dead transaction wrote is there, the operation is as it
// was, and the ledger claims it.
func TestKilledInsideTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	defer l.Close()
	before, _, err := l.Record(ctx, opledger.Intent{Key: "k", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	kill := testdb.StartInside(t, "TestKilledInsideTransactionChild", "OPLEDGER_PG_TX_KILL_DSN="+dsn)

	waiter, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer waiter.Close(context.Background())
	tx, err := waiter.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.Background())
	got := make(chan error, 1)
	var revision int64
	go func() {
		got <- tx.QueryRow(ctx, `SELECT revision FROM operations WHERE tenant = 'default' AND key = 'k' FOR UPDATE`).Scan(&revision)
	}()
	testdb.WaitBlocked(t, waiter.PgConn().PID(), "the row the child holds")
	// The child's session has run its writes: it holds the locks they
	// take on both tables.
	probe, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer probe.Close(context.Background())
	rows, err := probe.Query(ctx, `SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE l.pid = ANY(pg_blocking_pids($1)) AND l.mode = 'RowExclusiveLock' AND l.granted
		AND c.relnamespace = current_schema()::regnamespace AND c.relname IN ('operations', 'tokens') ORDER BY 1`, waiter.PgConn().PID())
	require.NoError(t, err)
	written, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"operations", "tokens"}, written, "the child has written to both tables")

	kill()
	select {
	case err := <-got:
		require.NoError(t, err, "the row is free once the server finds the client gone")
	case <-time.After(time.Minute): // a guard, not a wait
		t.Fatal("the killed process's row lock was still held a minute later")
	}
	require.NoError(t, tx.Commit(ctx))

	var tokens int
	require.NoError(t, waiter.QueryRow(ctx, `SELECT count(*) FROM tokens WHERE id = 'uncommitted'`).Scan(&tokens))
	require.Zero(t, tokens, "the dead transaction's insert is not there")
	after, err := l.Get(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, after.State)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt, "the dead transaction's update is not there")
	tl, err := l.Timeline(ctx, "k")
	require.NoError(t, err)
	require.Len(t, tl, 1, "recorded, nothing else")
	_, err = l.Claim(ctx, "k", opledger.ClaimOptions{})
	require.NoError(t, err)
}

// TestKilledInsideTransactionChild locks the operation that
// TestKilledInsideTransaction recorded, writes inside its transaction,
// says so, and waits there until it is killed.
func TestKilledInsideTransactionChild(t *testing.T) {
	dsn := os.Getenv("OPLEDGER_PG_TX_KILL_DSN")
	if dsn == "" {
		t.Skip("run by TestKilledInsideTransaction")
	}
	ctx := context.Background()
	s, err := pgstore.Open(ctx, dsn)
	require.NoError(t, err)
	err = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		op, err := tx.GetOperation(ctx, "default", "k") // SELECT … FOR UPDATE
		if err != nil {
			return err
		}
		prev := op.Revision
		op.Revision++
		op.State = string(opledger.StateFailed)
		op.UpdatedAt = op.UpdatedAt.Add(time.Hour)
		if err := tx.UpdateOperation(ctx, op, prev); err != nil {
			return err
		}
		if err := tx.InsertToken(ctx, &store.Token{ID: "uncommitted", Tenant: "default", Name: "x", Hash: "h-uncommitted", Access: "read-write", CreatedAt: time.Now()}); err != nil {
			return err
		}
		// A read after the writes: whatever the store pipelines has
		// reached the server by now.
		if _, err := tx.GetOperation(ctx, "default", "k"); err != nil {
			return err
		}
		fmt.Println(testdb.InsideLine)
		_, _ = os.Stdin.Read(make([]byte, 1))
		return fmt.Errorf("the child was not killed")
	})
	t.Fatal(err)
}
