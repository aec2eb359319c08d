package executor_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// fillDisk makes every new attempt of the PostgreSQL ledger at dsn fail
// as a full disk does, with SQLSTATE 53100 (disk_full), until the
// returned free: a trigger on the attempts table raises it, as the
// server does when it cannot extend a file. (A test cannot fill a real
// disk; the error, its code and the ledger's handling of it are the
// real ones.)
func fillDisk(t *testing.T, dsn string) (free func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE FUNCTION disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'could not extend file: No space left on device' USING ERRCODE = 'disk_full';
END $$`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `CREATE TRIGGER disk_full BEFORE INSERT ON attempts FOR EACH ROW EXECUTE FUNCTION disk_full()`)
	require.NoError(t, err)
	return func() {
		_, err := conn.Exec(ctx, `DROP TRIGGER disk_full ON attempts`)
		require.NoError(t, err)
		require.NoError(t, conn.Close(ctx))
	}
}

// TestFullDiskBacksOff: a claim the store refused for a full disk
// (opledger.ErrStoreFull) was logged at ERROR ("attempt failed") at every
// poll of every worker, and tried again after the poll interval, however
// long the disk stayed full: writes fail until space is freed, so each
// worker hammered the store and flooded the log. A full disk is now a
// store outage like an unavailable or busy store: the worker's pause
// doubles at each failure, the log says so at WARN (problem=store_full)
// as the count doubles, and at INFO once the store takes a claim again.
func TestFullDiskBacksOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	sink := testrig.NewRecordSink("")
	ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 1, PollInterval: time.Second,
		SweepInterval: -1, Logger: slog.New(sink)})
	require.NoError(t, err)
	pauses, next := gatePauses(ex)
	// An operation is due: each claim writes its attempt.
	_, _, err = l.Record(ctx, opledger.Intent{Key: "full:1", Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)

	var freeOnce, stop sync.Once
	free := fillDisk(t, dsn)
	defer freeOnce.Do(free)
	require.NoError(t, ex.Start(ctx))
	defer stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })
	// 1 s, doubled at each failure; jitter takes up to a quarter off.
	for i, want := range []time.Duration{1, 2, 4} {
		want *= time.Second
		got := <-pauses
		require.LessOrEqual(t, got, want, "pause %d", i+1)
		require.Greater(t, got, want*3/4, "pause %d", i+1)
		if i < 2 {
			next <- struct{}{}
		}
	}
	freeOnce.Do(free)
	next <- struct{}{}
	require.Equal(t, time.Second, <-pauses, "the store took the claim: the poll interval again")
	stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })

	var warned []int64
	reachable := 0
	for _, rec := range sink.Drain() {
		require.Less(t, rec.Level, slog.LevelError, "%s", rec.Message)
		switch rec.Message {
		case "store unavailable, backing off":
			if rec.Level < slog.LevelWarn {
				continue
			}
			n, ok := attrOf(rec, "failures")
			require.True(t, ok)
			warned = append(warned, n.Int64())
			p, ok := attrOf(rec, "problem")
			require.True(t, ok)
			require.Equal(t, "store_full", p.String())
			e, ok := attrOf(rec, "error")
			require.True(t, ok)
			err, _ := e.Any().(error)
			require.ErrorIs(t, err, opledger.ErrStoreFull)
		case "store reachable again":
			reachable++
		}
	}
	require.Equal(t, []int64{1, 2}, warned, "at the first failure, then as the count doubles")
	require.Equal(t, 1, reachable)
	got, err := l.Get(ctx, "full:1")
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, got.State, "claimed and sent once space was freed")
}
