package sqlitestore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration023DatesStates migrates a version-22 database to 023: an
// operation not succeeded takes its state_since from the latest timeline
// entry into its state (a revision counts, awaiting approval), or, with
// no such entry left, from its last change; a succeeded one keeps 0, as
// the migration writes no succeeded row.
func TestMigration023DatesStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 22)
	for _, op := range []struct {
		id      int
		key     string
		state   string
		updated int64
	}{{1, "awaiting", "awaiting_approval", 5000}, {2, "held", "held", 600}, {3, "bare", "pending", 700}, {4, "done", "succeeded", 800}} {
		exec(`INSERT INTO operations (id, tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES (?, 't', ?, 'act', 'dest', 1, 'fp', X'7B7D', ?, 1, 100, ?)`, op.id, op.key, op.state, op.updated)
	}
	for _, e := range []struct {
		op, seq  int
		at       int64
		event    string
		from, to string
	}{
		{1, 1, 1000, "recorded", "", "awaiting_approval"},
		{1, 2, 2000, "revised", "awaiting_approval", "awaiting_approval"},
		{1, 3, 3000, "approval required", "awaiting_approval", "awaiting_approval"}, // no move, no revision
		{2, 1, 100, "recorded", "", "pending"},
		{2, 2, 200, "claimed", "pending", "in_progress"},
		{2, 3, 300, "uncertain", "in_progress", "uncertain"},
		{2, 4, 400, "held", "uncertain", "held"},
		{2, 5, 500, "owner named", "", ""},
		{4, 1, 750, "succeeded", "in_progress", "succeeded"},
	} {
		exec(`INSERT INTO timeline (operation_id, seq, tenant, key, at, actor, event, from_state, to_state)
			SELECT id, ?, tenant, key, ?, 'system', ?, ?, ? FROM operations WHERE id = ?`, e.seq, e.at, e.event, e.from, e.to, e.op)
	}
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 22, "023_state_since.sql")
	want := map[string]int64{"awaiting": 2000, "held": 400, "bare": 700, "done": 0}
	for key, since := range want {
		var op *store.Operation
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			op, err = r.GetOperation(ctx, "t", key)
			return err
		}))
		require.Equal(t, since, toMicros(op.StateSince), key)
	}
}
