package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration008KeysHistoryByOperation migrates a version-7 database to
// 008: attempts and timeline entries, recorded with the histories of
// several operations interleaved, are stored keyed by their operation
// without a separate index; every row survives with every column, each
// operation's entries keep their order and ids, orphans (operation_id 0)
// are kept, and new entries continue from their operation's largest id.
func TestMigration008KeysHistoryByOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 7)
	for i, k := range []string{"a", "b"} {
		exec(`INSERT INTO operations (id, tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES (?, 't', ?, 'act', 'dest', 1, 'fp', X'7B7D', 'in_progress', 1, 1, 1)`, i+1, k)
	}
	// Interleaved: a's entries have ids 1, 3, 6 and b's 2, 5; an orphan 4.
	for _, e := range []struct {
		id, op int64
		key    string
	}{{1, 1, "a"}, {2, 2, "b"}, {3, 1, "a"}, {4, 0, "gone"}, {5, 2, "b"}, {6, 1, "a"}} {
		exec(`INSERT INTO timeline (id, operation_id, tenant, key, at, actor, attempt_id, event, from_state, to_state, evidence)
			VALUES (?, ?, 't', ?, ?, 'x', 'att', ?, 'pending', 'in_progress', 'ev')`, e.id, e.op, e.key, 100+e.id, "e"+string(rune('0'+e.id)))
	}
	for _, a := range []struct {
		id  string
		op  int64
		key string
		n   int
	}{{"att-b1", 2, "b", 1}, {"att-a1", 1, "a", 1}, {"att-a2", 1, "a", 2}, {"att-gone", 0, "gone", 1}} {
		exec(`INSERT INTO attempts (operation_id, id, tenant, key, number, fencing_token, worker, protected, claimed_at,
			lease_expires_at, dispatched_at, finished_at, outcome, destination_ref, response, error, stale, destination)
			VALUES (?, ?, 't', ?, ?, ?, 'w', 1, 10, 20, 30, 40, 'succeeded', 'ref', X'01', 'err', 1, 'dest')`, a.op, a.id, a.key, a.n, a.n)
	}
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 7, "008_history_by_operation.sql")

	var attempts []*store.Attempt
	var tl []*store.TimelineEntry
	read := func(key string) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			if attempts, err = r.ListAttempts(ctx, "t", key); err != nil {
				return err
			}
			tl, err = r.ListTimeline(ctx, "t", key)
			return err
		}))
	}
	ids := func() (out []int64) {
		for _, e := range tl {
			out = append(out, e.ID)
		}
		return out
	}
	read("a")
	require.Equal(t, []int64{1, 3, 6}, ids())
	require.Equal(t, &store.TimelineEntry{ID: 3, Tenant: "t", Key: "a", At: fromMicros(103), Actor: "x", AttemptID: "att",
		Event: "e3", FromState: "pending", ToState: "in_progress", Evidence: "ev"}, tl[1])
	require.Len(t, attempts, 2)
	require.Equal(t, &store.Attempt{ID: "att-a2", Tenant: "t", Key: "a", Number: 2, FencingToken: 2, Worker: "w", Protected: true,
		ClaimedAt: fromMicros(10), LeaseExpiresAt: fromMicros(20), DispatchedAt: fromMicros(30), FinishedAt: fromMicros(40),
		Outcome: "succeeded", DestinationRef: "ref", Response: []byte{1}, Error: "err", Stale: true, Destination: "dest"}, attempts[1])
	require.Equal(t, "att-a1", attempts[0].ID)
	read("b")
	require.Equal(t, []int64{2, 5}, ids())
	require.Len(t, attempts, 1)

	schema := func(q string) int {
		t.Helper()
		var n int
		require.NoError(t, s.reader.QueryRowContext(ctx, q).Scan(&n))
		return n
	}
	require.Equal(t, 1, schema(`SELECT COUNT(*) FROM timeline WHERE operation_id = 0 AND seq = 4`), "the orphan entry")
	require.Equal(t, 1, schema(`SELECT COUNT(*) FROM attempts WHERE operation_id = 0 AND id = 'att-gone'`), "the orphan attempt")
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE name IN ('timeline_new', 'attempts_new', 'timeline_operation', 'attempts_operation')`))
	require.Zero(t, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('timeline', 'attempts') AND sql IS NOT NULL`),
		"no index beside the tables' own keys")
	require.Equal(t, 2, schema(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN ('timeline', 'attempts')
		AND sql LIKE '%PRIMARY KEY (operation_id, %) WITHOUT ROWID'`))
	var check string
	require.NoError(t, s.reader.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&check))
	require.Equal(t, "ok", check)

	// New entries continue from their operation's largest id, looked up:
	// this transaction did not write either operation.
	now := time.Now().UTC().Truncate(time.Microsecond)
	var got []int64
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		for _, key := range []string{"b", "a", "b"} {
			e := &store.TimelineEntry{Tenant: "t", Key: key, At: now, Actor: "x", Event: "new " + key}
			if err := tx.AppendTimeline(ctx, e); err != nil {
				return err
			}
			got = append(got, e.ID)
		}
		return nil
	}))
	require.Equal(t, []int64{6, 7, 7}, got, "b: 5+1, then 6+1; a: 6+1")
	read("b")
	require.Equal(t, []int64{2, 5, 6, 7}, ids())
}

// TestTimelineSeqs checks how entries are numbered within an operation:
// from 1 for an operation this transaction inserted, after the largest
// one when the transaction updated the operation (its UPDATE returns it),
// and, for an operation the transaction has not written, by a lookup in
// the INSERT itself, where several entries of one operation in one
// statement still get distinct, increasing seqs.
func TestTimelineSeqs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openTestStore(t)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	entries := func(key string, events ...string) (out []*store.TimelineEntry) {
		for _, ev := range events {
			out = append(out, condEntry(key, ev, at))
		}
		return out
	}
	list := func(key string) (seqs []int64, events []string) {
		t.Helper()
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			tl, err := r.ListTimeline(ctx, "t", key)
			for _, e := range tl {
				seqs, events = append(seqs, e.ID), append(events, e.Event)
			}
			return err
		}))
		return seqs, events
	}

	op := condOp("k", 1, at)
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		if err := tx.InsertOperation(ctx, op); err != nil {
			return err
		}
		return tx.(*sqlTx).appendTimelines(ctx, entries("k", "recorded", "claimed"))
	}))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		next := *op
		next.State, next.Revision = "succeeded", 2
		if err := tx.UpdateOperation(ctx, &next, 1); err != nil {
			return err
		}
		e := condEntry("k", "succeeded", at)
		if err := tx.AppendTimeline(ctx, e); err != nil {
			return err
		}
		require.Equal(t, int64(3), e.ID, "after the largest seq the UPDATE returned")
		return nil
	}))
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.(*sqlTx).appendTimelines(ctx, entries("k", "note 1", "note 2", "note 3"))
	}))
	seqs, events := list("k")
	require.Equal(t, []string{"recorded", "claimed", "succeeded", "note 1", "note 2", "note 3"}, events)
	require.Equal(t, []int64{1, 2, 3}, seqs[:3])
	require.IsIncreasing(t, seqs)
}

// TestMigration009AscendingListIndexes migrates a version-8 database to
// 009: the two list indexes are ascending, and listing still goes newest
// first, page after page, with ties on created_at broken by key.
func TestMigration009AscendingListIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 8)
	// created_at 1, 2, 2, 2, 3 (keys b, c, d of the tie), two states.
	for i, k := range []string{"a", "b", "c", "d", "e"} {
		created := []int{1, 2, 2, 2, 3}[i]
		state := []string{"held", "succeeded", "held", "succeeded", "held"}[i]
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES ('t', ?, 'act', 'dest', 1, 'fp', X'7B7D', ?, 1, ?, ?)`, k, state, created, created)
	}
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 8, "009_ascending_list_indexes.sql")

	// Migration 010 replaces the list index by state; the lists by state
	// below still page newest first.
	var n int
	require.NoError(t, s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master
		WHERE name = 'operations_tenant_created' AND sql NOT LIKE '%DESC%'`).Scan(&n))
	require.Equal(t, 1, n)

	list := func(states []string) (keys []string) {
		t.Helper()
		p := store.ListParams{Tenant: "t", States: states, Limit: 2}
		for {
			var page []*store.Operation
			require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
				var err error
				page, err = r.ListOperations(ctx, p)
				return err
			}))
			for _, op := range page {
				keys = append(keys, op.Key)
			}
			if len(page) < p.Limit {
				return keys
			}
			last := page[len(page)-1]
			p.AfterAt, p.AfterKey = last.CreatedAt, last.Key
		}
	}
	require.Equal(t, []string{"e", "d", "c", "b", "a"}, list(nil))
	require.Equal(t, []string{"e", "c", "a"}, list([]string{"held"}))
	require.Equal(t, []string{"d", "b"}, list([]string{"succeeded"}))
}
