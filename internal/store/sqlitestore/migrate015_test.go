package sqlitestore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/storecheck"
)

// TestMigration015CarriesEffects migrates a version-14 database holding
// tombstones to 015 (storecheck.CompactedEffects), and checks that Stats
// reads the tombstones not yet counted through their partial index.
func TestMigration015CarriesEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 14)
	storecheck.SeedEffects(func(tenant, key, state string, duplicates int) {
		exec(oldTombstone, tenant, key, state, duplicates)
	})
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 14, "015_compacted_effects.sql")
	storecheck.CompactedEffects(t, s, func(tenant, key, state string, duplicates int) {
		_, err := s.wconn.ExecContext(ctx, oldTombstone, tenant, key, state, duplicates)
		require.NoError(t, err)
	}, func() (n int) {
		require.NoError(t, s.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM tombstones WHERE counted = 0`).Scan(&n))
		return n
	})

	cond, args := tenantFilter("tenant", "t")
	require.Contains(t, queryPlan(t, s.reader, statsCompactedSQL(cond), append(args, args...)...),
		"SEARCH tombstones USING INDEX tombstones_uncounted (tenant=?)")
}

// oldTombstone writes a tombstone as a release before 015 did.
const oldTombstone = `INSERT INTO tombstones (tenant, key, fingerprint, state, duplicate_effects, created_at, finished_at, compacted_at)
	VALUES (?, ?, 'fp', ?, ?, 1, 1, 1)`
