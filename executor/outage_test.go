package executor_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// gatePauses makes each pause of ex's workers a gate the test opens: the
// worker sends the pause it would take on pauses and goes on once the
// test sends on next (or the executor stops).
func gatePauses(ex *executor.Executor) (pauses <-chan time.Duration, next chan<- struct{}) {
	p, n := make(chan time.Duration), make(chan struct{})
	ex.SetPause(func(stop context.Context, d time.Duration) {
		select {
		case p <- d:
		case <-stop.Done():
			return
		}
		select {
		case <-n:
		case <-stop.Done():
		}
	})
	return p, n
}

// attrOf returns the value of rec's attribute key.
func attrOf(rec slog.Record, key string) (v slog.Value, ok bool) {
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v, ok = a.Value, true
			return false
		}
		return true
	})
	return v, ok
}

// TestStoreOutageBacksOff: while the store could not take a claim (busy:
// another process held its lock past the store's wait), each worker
// logged an ERROR "attempt failed" at every poll and polled again after
// the poll interval, however long the outage: a flood of lines, and a
// store hammered while it struggles. A worker now doubles its pause at
// each consecutive failure of the store, up to 30 s, with jitter; the
// log says so at the first failure and as the count doubles (a WARN,
// not an ERROR), and once, at INFO, when the store answers again, and
// the pause is the poll interval again from then on.
func TestStoreOutageBacksOff(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		ctx := context.Background()
		dsn := newDSN(t)
		if !strings.HasPrefix(dsn, "sqlite:") {
			dsn += "&lock_timeout=20ms"
		}
		l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 20 * time.Millisecond})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, l.Close()) })
		set, err := destination.NewSet(answeringDest{})
		require.NoError(t, err)
		sink := testrig.NewRecordSink("")
		ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 1, PollInterval: time.Second,
			SweepInterval: -1, Logger: slog.New(sink)})
		require.NoError(t, err)
		pauses, next := gatePauses(ex)

		var unlock, stop sync.Once
		release := testdb.HoldWrites(t, dsn)
		defer unlock.Do(release)
		require.NoError(t, ex.Start(ctx))
		defer stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })
		// 1 s, doubled at each failure, up to 30 s; jitter takes up to a
		// quarter off.
		backoff := []time.Duration{1, 2, 4, 8, 16, 30, 30}
		for i, want := range backoff {
			want *= time.Second
			got := <-pauses
			require.LessOrEqual(t, got, want)
			require.Greater(t, got, want*3/4)
			if i < len(backoff)-1 { // the lock goes while it waits in the last
				next <- struct{}{}
			}
		}
		unlock.Do(release)
		next <- struct{}{}
		require.Equal(t, time.Second, <-pauses, "the store answers: the pause is the poll interval again")
		next <- struct{}{}
		require.Equal(t, time.Second, <-pauses)
		stop.Do(func() { require.NoError(t, ex.Stop(ctx)) })

		var warned []int64
		reachable, debug := 0, 0
		for _, rec := range sink.Drain() {
			require.Less(t, rec.Level, slog.LevelError, "%s", rec.Message)
			switch rec.Message {
			case "store unavailable, backing off":
				if rec.Level < slog.LevelWarn {
					debug++
					continue // the failures between
				}
				require.Equal(t, slog.LevelWarn, rec.Level)
				n, ok := attrOf(rec, "failures")
				require.True(t, ok)
				warned = append(warned, n.Int64())
				e, ok := attrOf(rec, "error")
				require.True(t, ok)
				err, _ := e.Any().(error)
				require.ErrorIs(t, err, opledger.ErrStoreBusy)
				p, ok := attrOf(rec, "problem")
				require.True(t, ok)
				require.Equal(t, "store_busy", p.String())
			case "store reachable again":
				require.Equal(t, slog.LevelInfo, rec.Level)
				n, ok := attrOf(rec, "failures")
				require.True(t, ok)
				require.EqualValues(t, 7, n.Int64())
				reachable++
			}
		}
		require.Equal(t, []int64{1, 2, 4}, warned, "at the first failure, then as the count doubles")
		require.Equal(t, 1, reachable)
		require.Equal(t, 4, debug, "the failures between are logged at DEBUG")
	})
}

// TestStoreUnreachableBacksOffUntilStop: a PostgreSQL server that cannot
// be reached (it is down, or the network to it is gone) is a store
// outage too: a WARN, not an ERROR "attempt failed"; and a worker's pause,
// however long, ends at once when the executor stops.
func TestStoreUnreachableBacksOffUntilStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, cut := testdb.UnreachablePostgres(t, testdb.PostgresDSN(t), "relay-secret-pw")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	set, err := destination.NewSet(answeringDest{})
	require.NoError(t, err)
	sink := testrig.NewRecordSink("store unavailable, backing off")
	ex, err := executor.New(l, executor.Config{Destinations: set, Workers: 2, PollInterval: time.Hour,
		SweepInterval: -1, Logger: slog.New(sink)})
	require.NoError(t, err)
	cut()
	testdb.WaitUnreachable(t, l.Ping)

	require.NoError(t, ex.Start(ctx))
	rec := sink.Waited(t)
	require.Equal(t, slog.LevelWarn, rec.Level)
	e, ok := attrOf(rec, "error")
	require.True(t, ok)
	err, _ = e.Any().(error)
	require.ErrorIs(t, err, opledger.ErrStoreUnavailable)
	p, ok := attrOf(rec, "problem")
	require.True(t, ok)
	require.Equal(t, "unavailable", p.String())

	stopped := make(chan error, 1)
	go func() { stopped <- ex.Stop(ctx) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		// A failure guard only: the pause ends at once with the stop.
		t.Fatal("Stop waited for a worker's pause")
	}
	for _, rec := range sink.Drain() {
		require.Less(t, rec.Level, slog.LevelError, "%s", rec.Message)
		if rec.Message == "store unavailable, backing off" && rec.Level >= slog.LevelWarn {
			n, _ := attrOf(rec, "failures")
			require.EqualValues(t, 1, n.Int64(), "both workers failed once: one WARN line")
		}
	}
}
