package pgstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
)

// openMigrated opens a store on a fresh schema, migrated, closed when the
// test ends.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, testdb.PostgresDSN(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	require.NoError(t, s.Migrate(ctx, nil))
	return s
}

// newOp is a pending operation row for the group writer tests.
func newOp(key string, now time.Time) *store.Operation {
	return &store.Operation{Tenant: "t", Key: key, Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
		State: "pending", Revision: 1, CreatedAt: now, UpdatedAt: now}
}

// request builds a queued request whose decision inserts key with a
// timeline entry carrying evidence, or updates it from revision prev when
// prev > 0.
func request(key, evidence string, prev int64) *condRequest {
	r := &condRequest{done: make(chan struct{})}
	r.decide = func(now time.Time) ([]store.Write, error) {
		op := newOp(key, now)
		w := store.Write{InsertOperation: op}
		if prev > 0 {
			op.Revision = prev + 1
			w = store.Write{UpdateOperation: op, PrevRevision: prev}
		}
		e := &store.TimelineEntry{Tenant: "t", Key: key, At: now, Actor: "w", Event: "e", Evidence: evidence}
		return []store.Write{w, {AppendTimeline: e}}, nil
	}
	r.state.Store(requestTaken)
	return r
}

// writeInTime is WriteConditional as the ledger calls it: a decision that
// lost is made again, a few times. On a loaded machine a decision may not
// be committed within groupDecisionAge of its clock reading (then
// ErrConflict), which the ledger answers by deciding again; tests that
// need the write done do the same.
func writeInTime(ctx context.Context, s *Store, decide func(time.Time) ([]store.Write, error)) error {
	var err error
	for range 5 {
		if err = s.WriteConditional(ctx, decide); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return err
}

// TestGroupIsolatesCallers writes one group in which one caller's condition
// fails and another's statement fails outright (a NUL byte, which
// PostgreSQL's text refuses), aborting the shared transaction: every other
// caller must still be written, each caller must get its own outcome, and
// nothing of the failing callers may remain.
func TestGroupIsolatesCallers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)

	group := []*condRequest{
		request("k1", "fine", 0),
		request("k2", "bad \x00 byte", 0),
		request("missing", "conflict", 1),
		request("k4", "fine", 0),
	}
	s.group.write(group)
	for _, r := range group {
		<-r.done
	}
	require.NoError(t, group[0].err)
	require.Error(t, group[1].err)
	require.False(t, errors.Is(group[1].err, store.ErrConflict), "a failing statement is not a lost race: %v", group[1].err)
	require.ErrorIs(t, group[2].err, store.ErrConflict)
	require.NoError(t, group[3].err)

	err := s.View(ctx, func(ctx context.Context, r store.Reader) error {
		for key, want := range map[string]int{"k1": 1, "k2": 0, "missing": 0, "k4": 1} {
			_, err := r.GetOperation(ctx, "t", key)
			if want == 0 {
				require.ErrorIs(t, err, store.ErrNotFound, key)
			} else {
				require.NoError(t, err, key)
			}
			tl, err := r.ListTimeline(ctx, "t", key)
			require.NoError(t, err)
			require.Len(t, tl, want, key)
		}
		return nil
	})
	require.NoError(t, err)

	// A second insert of k1 is a lost race and writes nothing; an update
	// from the right revision goes through.
	again := []*condRequest{request("k1", "again", 0), request("k4", "updated", 1)}
	s.group.write(again)
	require.ErrorIs(t, again[0].err, store.ErrConflict)
	require.NoError(t, again[1].err)
	err = s.View(ctx, func(ctx context.Context, r store.Reader) error {
		tl, err := r.ListTimeline(ctx, "t", "k1")
		require.NoError(t, err)
		require.Len(t, tl, 1)
		op, err := r.GetOperation(ctx, "t", "k4")
		require.NoError(t, err)
		require.Equal(t, int64(2), op.Revision)
		return nil
	})
	require.NoError(t, err)
}

// TestTombstoneBlocksConditionalInsert: a key with a tombstone is not new.
func TestTombstoneBlocksConditionalInsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)
	now := time.Now().UTC()
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.UpsertTombstone(ctx, &store.Tombstone{Tenant: "t", Key: "gone", Fingerprint: "f", State: "succeeded",
			CreatedAt: now, FinishedAt: now, CompactedAt: now})
	}))
	err := s.WriteConditional(ctx, request("gone", "x", 0).decide)
	require.ErrorIs(t, err, store.ErrConflict)
	err = s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "gone")
		require.ErrorIs(t, err, store.ErrNotFound)
		return nil
	})
	require.NoError(t, err)
}

// TestDecisionTooOldNotWritten: a shared transaction whose decisions
// would commit more than groupDecisionAge after the clock they were made
// at (here the decision itself takes longer; lock waits do the same)
// writes nothing, and its caller gets store.ErrConflict: the ledger then
// decides again on the row read under its lock.
func TestDecisionTooOldNotWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)
	slow := request("late", "x", 0)
	decide := slow.decide
	err := s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
		time.Sleep(groupDecisionAge + 50*time.Millisecond) // the time under test, not a wait for another goroutine
		return decide(now)
	})
	require.ErrorIs(t, err, store.ErrConflict)
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		_, err := r.GetOperation(ctx, "t", "late")
		require.ErrorIs(t, err, store.ErrNotFound, "nothing written")
		return nil
	}))
	require.NoError(t, writeInTime(ctx, s, request("prompt", "x", 0).decide), "a decision in time is written")
}

// TestLoneCallerWritesItself: a caller alone in WriteConditional runs its
// decision in its own goroutine, not a committer's; while it writes, the
// next caller is queued and written by a committer without waiting for it;
// a decision that panics in a committer panics in its caller's goroutine;
// a lone caller whose ctx has ended writes nothing.
func TestLoneCallerWritesItself(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)
	inCommitter := func() bool {
		buf := make([]byte, 64<<10)
		return strings.Contains(string(buf[:runtime.Stack(buf, false)]), "(*groupWriter).commit")
	}

	alone := request("alone", "fine", 0)
	entered, release := make(chan bool), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before Close, which waits for the committers, when the test fails early
	aloneDone := make(chan error, 1)
	go func() {
		err := s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
			entered <- inCommitter()
			<-release
			return alone.decide(now)
		})
		if errors.Is(err, store.ErrConflict) {
			// Held past groupDecisionAge (a loaded machine): decided again.
			err = writeInTime(ctx, s, alone.decide)
		}
		aloneDone <- err
	}()
	require.False(t, <-entered, "a lone caller's decision runs in its own goroutine")

	queued := request("queued", "fine", 0)
	var queuedInCommitter, queuedRan bool
	require.NoError(t, writeInTime(ctx, s, func(now time.Time) ([]store.Write, error) {
		if !queuedRan { // the first decision, made while the lone caller writes
			queuedInCommitter, queuedRan = inCommitter(), true
		}
		return queued.decide(now)
	}))
	require.True(t, queuedInCommitter, "a caller that is not alone is written by a committer")
	require.PanicsWithValue(t, "queued boom", func() {
		_ = s.WriteConditional(ctx, func(time.Time) ([]store.Write, error) { panic("queued boom") })
	})
	unblock()
	require.NoError(t, <-aloneDone)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, s.WriteConditional(cancelled, request("cancelled", "x", 0).decide), context.Canceled)

	err := s.View(ctx, func(ctx context.Context, r store.Reader) error {
		for key, want := range map[string]bool{"alone": true, "queued": true, "cancelled": false} {
			_, err := r.GetOperation(ctx, "t", key)
			if want {
				require.NoError(t, err, key)
			} else {
				require.ErrorIs(t, err, store.ErrNotFound, key)
			}
		}
		return nil
	})
	require.NoError(t, err)
}

// TestDecisionPanicReachesCaller: a decision that panics panics in its
// caller's goroutine, as in an ordinary transaction (here a lone caller's;
// TestLoneCallerWritesItself panics in a committer), and the store goes on
// writing; after Close, callers get an error at once.
func TestDecisionPanicReachesCaller(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)
	require.PanicsWithValue(t, "boom", func() {
		_ = s.WriteConditional(ctx, func(time.Time) ([]store.Write, error) { panic("boom") })
	})
	require.NoError(t, writeInTime(ctx, s, request("after", "fine", 0).decide))
	require.NoError(t, s.Close())
	err := s.WriteConditional(ctx, request("closed", "x", 0).decide)
	require.ErrorIs(t, err, store.ErrClosed)
}

// TestFirstAnalyze: a new ledger's tables are analyzed by the store once
// it has committed analyzeAfter writes, and not before; the catalog shows
// it (ANALYZE sets pg_class.reltuples, -1 until then).
func TestFirstAnalyze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openMigrated(t)
	// Autovacuum must not analyze the table during the test.
	_, err := s.pool.Exec(ctx, `ALTER TABLE operations SET (autovacuum_enabled = false)`)
	require.NoError(t, err)
	tuples := func() float64 {
		var n float64
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'operations'::regclass`).Scan(&n))
		return n
	}
	for i := range analyzeAfter - 1 {
		require.NoError(t, writeInTime(ctx, s, request(fmt.Sprintf("a%04d", i), "x", 0).decide))
	}
	require.Less(t, tuples(), 0.0, "not analyzed before analyzeAfter writes")
	require.NoError(t, writeInTime(ctx, s, request("last", "x", 0).decide))
	s.analyze.close() // waits for the check the last write started
	require.EqualValues(t, analyzeAfter, tuples())
}
