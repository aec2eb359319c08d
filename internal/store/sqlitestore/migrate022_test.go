package sqlitestore

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
)

// TestMigration022KeepsTokenAccess migrates a version-21 database holding
// a read-write and a read-only token to 022: each keeps its access, now
// in words, and the column takes no other words than the three. 021's
// read_only stays, for the processes of the release before: set for a
// worker token inserted after, so that none of them takes it for a
// read-write one.
func TestMigration022KeepsTokenAccess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path, db, exec := atVersion(t, 21)
	exec(`INSERT INTO tokens (id, tenant, name, hash, created_at, read_only) VALUES ('tok_rw', 't', 'n8n', 'h1', 1, 0), ('tok_ro', 't', 'wall', 'h2', 2, 1)`)
	require.NoError(t, db.Close())

	s := openMigrated(t, path, 21, "022_token_worker_access.sql")
	var tokens []*store.Token
	require.NoError(t, s.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		tokens, err = r.ListTokens(ctx, "t")
		return err
	}))
	require.Len(t, tokens, 2)
	require.Equal(t, [2]string{"tok_rw", "tok_ro"}, [2]string{tokens[0].ID, tokens[1].ID})
	require.Equal(t, [2]string{"read-write", "read-only"}, [2]string{tokens[0].Access, tokens[1].Access})
	_, err := s.wconn.ExecContext(ctx, `INSERT INTO tokens (id, tenant, name, hash, created_at, access) VALUES ('tok_x', 't', 'x', 'h3', 3, 'admin')`)
	require.ErrorContains(t, err, "CHECK constraint failed")
	require.NoError(t, s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return tx.InsertToken(ctx, &store.Token{ID: "tok_w", Tenant: "t", Name: "zapier", Hash: "h4", Access: "worker", CreatedAt: time.Now()})
	}))
	var readOnly bool
	require.NoError(t, s.reader.QueryRowContext(ctx, `SELECT read_only FROM tokens WHERE id = 'tok_w'`).Scan(&readOnly))
	require.True(t, readOnly, "the release before reads a worker token as read-only")
}
