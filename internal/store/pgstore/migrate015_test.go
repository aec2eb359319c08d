package pgstore

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store/storecheck"
)

// TestMigration015CarriesEffects migrates a version-14 schema holding
// tombstones to 015 (storecheck.CompactedEffects). A tombstone of an
// earlier release still running after the migration does not name the
// new column, whose default is then false.
func TestMigration015CarriesEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, conn, exec := schemaAtVersion(t, 14)
	old := func(tenant, key, state string, duplicates int) {
		exec(`INSERT INTO tombstones (tenant, key, fingerprint, state, duplicate_effects, created_at, finished_at, compacted_at)
			VALUES ($1, $2, 'fp', $3, $4, now(), now(), now() - interval '1 day')`, tenant, key, state, duplicates)
	}
	storecheck.SeedEffects(old)
	s := migrateFrom(t, dsn, 14, "015_compacted_effects.sql")
	storecheck.CompactedEffects(t, s, old, func() (n int) {
		require.NoError(t, conn.QueryRow(ctx, `SELECT COUNT(*) FROM tombstones WHERE NOT counted`).Scan(&n))
		return n
	})
}
