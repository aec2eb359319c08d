package opledger

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// tombstoneRefusingStore fails every tombstone of a key with prefix
// broken, as a store that cannot write one would.
type tombstoneRefusingStore struct {
	store.Store
	broken string
}

type tombstoneRefusingTx struct {
	store.Tx
	broken string
}

func (s tombstoneRefusingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, tombstoneRefusingTx{Tx: tx, broken: s.broken})
	})
}

func (t tombstoneRefusingTx) UpsertTombstone(ctx context.Context, ts *store.Tombstone) error {
	if strings.HasPrefix(ts.Key, t.broken) {
		return errors.New("injected: cannot write this tombstone")
	}
	return t.Tx.UpsertTombstone(ctx, ts)
}

// TestCompactPastFailures: operations Compact cannot compact, more than a
// page of them and the oldest, stop neither the operations after them
// nor the later steps of retention; the error counts them without a key,
// and they are tried again on the next run.
func TestCompactPastFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var offset atomic.Int64
	l, err := Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"), Options{
		Retention: time.Hour, TombstoneRetention: 24 * time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	advance := func(d time.Duration) { offset.Add(int64(d)) }
	succeed := func(key string) {
		t.Helper()
		c, err := l.Claim(ctx, key, ClaimOptions{Intent: &Intent{Key: key, Action: "a", Destination: "d"}})
		require.NoError(t, err)
		_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "ref"})
		require.NoError(t, err)
	}
	succeed("old")
	advance(2 * time.Hour)
	_, err = l.Compact(ctx) // "old" is a tombstone, forgotten below
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "console")
	require.NoError(t, err)
	_, _, err = l.OpenSession(ctx, token, time.Minute)
	require.NoError(t, err)
	const broken = 201 // a page is 200
	for i := range broken {
		succeed(fmt.Sprintf("broken:alice%03d", i))
	}
	advance(time.Second)
	succeed("good")
	advance(25 * time.Hour)

	l.store = tombstoneRefusingStore{Store: l.store, broken: "broken:"}
	res, err := l.Compact(ctx)
	require.ErrorContains(t, err, fmt.Sprintf("compact: %d could not be compacted and are tried again on the next run", broken))
	require.NotContains(t, err.Error(), "alice", "the error is for a log: no key")
	require.Equal(t, 1, res.Tombstoned, "the operation after the failing ones")
	require.Equal(t, 1, res.Forgotten, "tombstones are still forgotten")
	require.Equal(t, 1, res.SessionsExpired, "expired sessions are still deleted")
	good, err := l.Get(ctx, "good")
	require.NoError(t, err)
	require.True(t, good.Tombstoned)

	res, err = l.Compact(ctx)
	require.ErrorContains(t, err, fmt.Sprintf("%d could not be compacted", broken), "tried again")
	require.Zero(t, res.Tombstoned)
}
