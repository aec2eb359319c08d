package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration023DatesStates migrates a version-22 schema to 023: an
// operation not succeeded takes its state_since from the latest timeline
// entry into its state (a revision counts, awaiting approval), or, with
// no such entry left, from its last change; a succeeded one keeps NULL,
// as the migration writes no succeeded row.
func TestMigration023DatesStates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, _, exec := schemaAtVersion(t, 22)
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return base.Add(time.Duration(s) * time.Second) }
	for _, op := range []struct {
		key, state string
		updated    int
	}{{"awaiting", "awaiting_approval", 5000}, {"held", "held", 600}, {"bare", "pending", 700}, {"done", "succeeded", 800}} {
		exec(`INSERT INTO operations (tenant, key, action, destination, version, fingerprint, payload, state,
			revision, created_at, updated_at) VALUES ('t', $1, 'act', 'dest', 1, 'fp', '\x7b7d', $2, 1, $3, $4)`,
			op.key, op.state, at(100), at(op.updated))
	}
	for _, e := range []struct {
		key      string
		at       int
		event    string
		from, to string
	}{
		{"awaiting", 1000, "recorded", "", "awaiting_approval"},
		{"awaiting", 2000, "revised", "awaiting_approval", "awaiting_approval"},
		{"awaiting", 3000, "approval required", "awaiting_approval", "awaiting_approval"}, // no move, no revision
		{"held", 100, "recorded", "", "pending"},
		{"held", 200, "claimed", "pending", "in_progress"},
		{"held", 300, "uncertain", "in_progress", "uncertain"},
		{"held", 400, "held", "uncertain", "held"},
		{"held", 500, "owner named", "", ""},
		{"done", 750, "succeeded", "in_progress", "succeeded"},
	} {
		exec(`INSERT INTO timeline (tenant, key, at, actor, event, from_state, to_state) VALUES ('t', $1, $2, 'system', $3, $4, $5)`,
			e.key, at(e.at), e.event, e.from, e.to)
	}

	s := migrateFrom(t, dsn, 22, "023_state_since.sql")
	want := map[string]time.Time{"awaiting": at(2000), "held": at(400), "bare": at(700), "done": {}}
	for key, since := range want {
		var op *store.Operation
		require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
			var err error
			op, err = r.GetOperation(ctx, "t", key)
			return err
		}))
		require.True(t, since.Equal(op.StateSince), "%s: %s, want %s", key, op.StateSince, since)
	}
}
