package sqlitestore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// condOp is an in-progress operation row for the conditional-write tests.
func condOp(key string, rev int64, at time.Time) *store.Operation {
	return &store.Operation{Tenant: "t", Key: key, Action: "a", Destination: "d", Version: 1, Fingerprint: "f",
		Payload: []byte(`{"x":1}`), SensitiveFields: []string{}, State: "in_progress", AttemptCount: 1, FencingToken: 1,
		CurrentAttemptID: key + "/1", LeaseExpiresAt: at.Add(time.Minute), Revision: rev, CreatedAt: at, UpdatedAt: at}
}

func condAttempt(key, id string, at time.Time) *store.Attempt {
	return &store.Attempt{ID: id, Tenant: "t", Key: key, Number: 1, FencingToken: 1, Worker: "w",
		ClaimedAt: at, LeaseExpiresAt: at.Add(time.Minute), Destination: "d"}
}

func condEntry(key, event string, at time.Time) *store.TimelineEntry {
	return &store.TimelineEntry{Tenant: "t", Key: key, At: at, Actor: "w", Event: event}
}

// TestConditionalWritesShareBatch queues conditional writes (inserts of
// new keys, updates on a kept row) and ordinary ones behind the writer, so
// that they share transactions, and checks each caller's outcome and what
// was stored. Conditional writes run without savepoints: a failed
// condition must leave nothing behind, and one that fails after its
// operation's write (here, the same attempt inserted twice) must make
// the batch run again with savepoints, so that only its own writes are
// lost. Updates carry the stored row (Write.Previous) and set only the
// columns that differ from it; the row read back must still be whole.
func TestConditionalWritesShareBatch(t *testing.T) {
	t.Parallel()
	for _, withBrokenWrite := range []bool{false, true} {
		t.Run(fmt.Sprintf("broken=%v", withBrokenWrite), func(t *testing.T) {
			t.Parallel()
			testConditionalWritesShareBatch(t, withBrokenWrite)
		})
	}
}

func testConditionalWritesShareBatch(t *testing.T, withBrokenWrite bool) {
	s := openTestStore(t)
	ctx := context.Background()
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	// Kept rows for the updates, and a taken key with its attempt.
	const n = 40
	kept := map[string]*store.Operation{}
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for i := range n {
			if i%5 == 2 || i%5 == 3 {
				op := condOp(fmt.Sprintf("old-%02d", i), 1, at)
				kept[op.Key] = op
				if err := tx.InsertOperation(ctx, op); err != nil {
					return err
				}
			}
		}
		if err := tx.InsertOperation(ctx, condOp("taken", 1, at)); err != nil {
			return err
		}
		return tx.InsertAttempt(ctx, condAttempt("taken", "taken/1", at))
	}))

	before := s.group.commits.Load()
	s.wlock <- struct{}{} // hold the writer: every caller queues
	errs := make([]error, n)
	decides := make([]atomic.Int64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("new-%02d", i)
			switch i % 5 {
			case 0: // a new key: record, attempt, two timeline entries
				errs[i] = s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
					decides[i].Add(1)
					return []store.Write{{InsertAttempt: condAttempt(key, key+"/1", now)},
						{InsertOperation: condOp(key, 1, now)},
						{AppendTimeline: condEntry(key, "recorded", now)}, {AppendTimeline: condEntry(key, "claimed", now)}}, nil
				})
			case 1: // a key that is taken: conflict, nothing of it written
				errs[i] = s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
					decides[i].Add(1)
					if i == 1 && withBrokenWrite {
						// A new key, but its attempt twice: fails after the
						// operation's insert.
						return []store.Write{{InsertOperation: condOp(key, 1, now)},
							{InsertAttempt: condAttempt(key, key+"/1", now)}, {InsertAttempt: condAttempt(key, key+"/1", now)},
							{AppendTimeline: condEntry(key, "claimed", now)}}, nil
					}
					return []store.Write{{InsertAttempt: condAttempt("taken", key+"/1", now)},
						{InsertOperation: condOp("taken", 1, now)}, {AppendTimeline: condEntry("taken", "claimed", now)}}, nil
				})
			case 2: // an update on the kept row: only what differs is set
				old := fmt.Sprintf("old-%02d", i)
				errs[i] = s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
					decides[i].Add(1)
					op := *kept[old]
					op.State, op.LeaseExpiresAt, op.DestinationRef, op.Response = "succeeded", time.Time{}, "ref-"+old, []byte(`{"ok":true}`)
					op.Revision, op.UpdatedAt = 2, now
					return []store.Write{{UpdateOperation: &op, PrevRevision: 1, Previous: kept[old]},
						{AppendTimeline: condEntry(old, "succeeded", now)}}, nil
				})
			case 3: // an update on a stale revision: conflict
				old := fmt.Sprintf("old-%02d", i)
				errs[i] = s.WriteConditional(ctx, func(now time.Time) ([]store.Write, error) {
					decides[i].Add(1)
					op := *kept[old]
					op.State, op.Revision = "failed", 8
					return []store.Write{{UpdateOperation: &op, PrevRevision: 7},
						{AppendTimeline: condEntry(old, "failed", now)}}, nil
				})
			default: // an ordinary write function in the same batch
				errs[i] = s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
					return insertToken(ctx, tx, key, "h-"+key)
				})
			}
		}()
	}
	waitQueued(t, s, n)
	<-s.wlock
	wg.Wait()

	if withBrokenWrite {
		require.Equal(t, int64(2), s.group.commits.Load()-before, "the batch ran again, with savepoints")
		require.Equal(t, int64(2), decides[1].Load(), "the broken write was decided again")
	} else {
		require.Equal(t, int64(1), s.group.commits.Load()-before, "one shared transaction")
	}
	for i := range n {
		if i%5 != 4 {
			// Decided once, or twice when the batch ran again.
			require.Contains(t, []int64{1, int64(s.group.commits.Load() - before)}, decides[i].Load(), "decisions of write %d", i)
		}
	}
	toks := tokenIDs(t, s)
	for i := range n {
		key := fmt.Sprintf("new-%02d", i)
		old := fmt.Sprintf("old-%02d", i)
		var op *store.Operation
		var attempts []*store.Attempt
		var timeline []*store.TimelineEntry
		read := func(k string) {
			op, attempts, timeline = nil, nil, nil
			require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
				var err error
				if op, err = r.GetOperation(ctx, "t", k); err != nil && err != store.ErrNotFound {
					return err
				}
				if attempts, err = r.ListAttempts(ctx, "t", k); err != nil {
					return err
				}
				timeline, err = r.ListTimeline(ctx, "t", k)
				return err
			}))
		}
		switch i % 5 {
		case 0:
			require.NoError(t, errs[i], key)
			read(key)
			require.NotNil(t, op, key)
			require.Len(t, attempts, 1, key)
			require.Len(t, timeline, 2, key)
			require.Equal(t, "recorded", timeline[0].Event)
			require.Equal(t, "claimed", timeline[1].Event)
		case 1:
			require.ErrorIs(t, errs[i], store.ErrConflict, key)
			read(key)
			require.Nil(t, op, key)
			require.Empty(t, attempts, key)
			require.Empty(t, timeline, key)
		case 2:
			require.NoError(t, errs[i], old)
			read(old)
			want := *kept[old]
			want.State, want.LeaseExpiresAt, want.DestinationRef, want.Response = "succeeded", time.Time{}, "ref-"+old, []byte(`{"ok":true}`)
			want.Revision = 2
			require.NotNil(t, op, old)
			want.UpdatedAt = op.UpdatedAt
			require.Equal(t, &want, op, old)
			require.Len(t, timeline, 1, old)
		case 3:
			require.ErrorIs(t, errs[i], store.ErrConflict, old)
			read(old)
			require.Equal(t, int64(1), op.Revision, old)
			require.Empty(t, timeline, old)
		default:
			require.NoError(t, errs[i], key)
			require.True(t, toks[key], key)
		}
	}
	read := func() (attempts []*store.Attempt) {
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			attempts, err = r.ListAttempts(ctx, "t", "taken")
			return err
		}))
		return attempts
	}
	require.Len(t, read(), 1, "the taken key keeps its one attempt")
}
