package executor_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testrig"
)

// upgrader is a destination whose call succeeds while a newer release
// migrates the ledger under the executor (a rolling upgrade): the
// call's outcome is the first write the store refuses.
type upgrader struct{ migrate func() }

func (upgrader) Name() string                           { return "upgrader" }
func (upgrader) Capabilities() destination.Capabilities { return destination.Capabilities{} }
func (u upgrader) Call(context.Context, opledger.Call) (opledger.Result, error) {
	u.migrate()
	return opledger.Result{Ref: "U1"}, nil
}

// migrateUnder records a migration newer than this build knows in the
// store of dsn, as a newer release's first process does.
func migrateUnder(t *testing.T, dsn string) {
	t.Helper()
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	next := versions[len(versions)-1] + 1
	ctx := context.Background()
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
		require.NoError(t, err)
		defer db.Close()
		_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, next)
		require.NoError(t, err)
		return
	}
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `INSERT INTO schema_migrations (version, name) VALUES ($1, 'from_the_future.sql')`, next)
	require.NoError(t, err)
}

// TestSchemaNewerReportNotRetried: once a newer release has migrated the
// ledger, the store refuses this process's writes for good, the outcome
// of a call in flight included. The executor gives that report up at
// once (it used to try again for two minutes, as after a dropped
// connection) and says once, at ERROR, that this process's release is
// older than the ledger's schema and must be stopped; later refusals
// (here the next claim) do not repeat it.
func TestSchemaNewerReportNotRetried(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		var dsn string
		u := upgrader{}
		r := testrig.New(t, func(tb testing.TB) string { dsn = newDSN(tb); return dsn },
			func(o *testrig.Options) { o.Extra = []destination.Destination{&u} })
		u.migrate = func() { migrateUnder(t, dsn) }
		r.Record("upgrade:1", "upgrader", `{}`)

		done := runOnceAside(r.Ctx, r.Exec)
		var res stepResult
		select {
		case res = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the refused report is still being tried again after 30 s")
		}
		require.ErrorIs(t, res.err, opledger.ErrSchemaNewer)
		require.Nil(t, res.op)
		_, err := r.Exec.RunOnce(r.Ctx)
		require.ErrorIs(t, err, opledger.ErrSchemaNewer, "the next claim is refused too")

		logs := r.Logs()
		require.NotContains(t, logs, "trying again")
		require.Equal(t, 1, strings.Count(logs, "level=ERROR"), "one ERROR line, however many refusals:\n%s", logs)
		require.Contains(t, logs, "this process's release is older than the ledger's schema")
		require.Contains(t, logs, "stop this process and run the newer release")
		require.Contains(t, logs, "newer than this opledger knows")
	})
}
