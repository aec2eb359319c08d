package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestWritesStopOnceANewerReleaseMigrated: a ledger that was open when a
// newer release migrated its store (a rolling upgrade, or a serve of the
// new release started beside an old one) stops writing: each write it
// would have made in its own schema's terms is refused with
// ErrSchemaNewer, naming both versions, and nothing of it is recorded;
// Ping, which /readyz reads, fails the same way. Releases before this
// check went on writing (an attempt of a release before migration 006,
// written after it, was counted under no destination for good). The
// check is made by every write transaction, not remembered: with the
// newer version gone again, writes go on.
func TestWritesStopOnceANewerReleaseMigrated(t *testing.T) {
	t.Parallel()
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	newest := versions[len(versions)-1]
	for _, s := range testdb.Stores() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			if s.Name == "postgres" {
				testdb.RequirePostgres(t)
			}
			ctx := context.Background()
			dsn := s.NewDSN(t)
			l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			intent := func(key string) opledger.Intent {
				return opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
			}
			_, _, err = l.Record(ctx, intent("before"))
			require.NoError(t, err)
			c, err := l.Claim(ctx, "before", opledger.ClaimOptions{Worker: "w"})
			require.NoError(t, err)
			require.NoError(t, l.Ping(ctx))

			// A newer release migrates the store while l is open.
			execLedgerSQL(t, dsn, fmt.Sprintf(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (%d, '%03d_from_the_future.sql', %s)`,
				newest+1, newest+1, map[string]string{"sqlite": "0", "postgres": "now()"}[s.Name]))
			refusal := fmt.Sprintf("the store's schema is at version %d, newer than this opledger knows (%d): a newer release migrated it", newest+1, newest)

			_, _, err = l.Record(ctx, intent("after"))
			require.ErrorIs(t, err, opledger.ErrSchemaNewer, "a new operation")
			require.ErrorContains(t, err, refusal)
			_, err = l.Dispatch(ctx, "before", c.AttemptID, c.FencingToken)
			require.ErrorIs(t, err, opledger.ErrSchemaNewer, "a transition")
			_, err = l.Report(ctx, "before", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-1"})
			require.ErrorIs(t, err, opledger.ErrSchemaNewer, "a report")
			_, _, err = l.CreateToken(ctx, "n8n", opledger.ReadWrite)
			require.ErrorIs(t, err, opledger.ErrSchemaNewer, "a token")
			err = l.Ping(ctx)
			require.ErrorIs(t, err, opledger.ErrSchemaNewer, "not ready")
			require.ErrorContains(t, err, refusal)

			// Nothing of it was recorded.
			execLedgerSQL(t, dsn, fmt.Sprintf(`DELETE FROM schema_migrations WHERE version = %d`, newest+1))
			_, err = l.Get(ctx, "after")
			require.ErrorIs(t, err, opledger.ErrNotFound)
			op, err := l.Get(ctx, "before")
			require.NoError(t, err)
			require.Equal(t, opledger.StateInProgress, op.State)
			require.False(t, op.Dispatched)
			tokens, err := l.Tokens(ctx, true)
			require.NoError(t, err)
			require.Empty(t, tokens)

			require.NoError(t, l.Ping(ctx))
			_, _, err = l.Record(ctx, intent("after"))
			require.NoError(t, err)
		})
	}
}
