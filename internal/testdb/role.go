package testdb

import (
	"context"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// RoleWithoutGuardLock makes a login role, named after dsn's schema and
// suffix, that may read and write the ledger's tables of that schema but
// only read schema_migrations, so that on PostgreSQL 15 and older it
// cannot take the schema guard's lock (from 16, INSERT allows it). It
// returns dsn as that role, an admin connection on dsn (to grant it
// more), and the server's major version; the role is dropped at the
// test's end.
func RoleWithoutGuardLock(t testing.TB, dsn, suffix string) (roleDSN, role string, admin *pgx.Conn, version int) {
	t.Helper()
	bg := context.Background()
	admin, err := pgx.Connect(bg, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(bg) })
	require.NoError(t, admin.QueryRow(bg, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&version))
	var schema string
	require.NoError(t, admin.QueryRow(bg, `SELECT current_schema()`).Scan(&schema))
	role = schema + "_" + suffix
	for _, q := range []string{
		`CREATE ROLE ` + role + ` LOGIN`,
		`GRANT USAGE ON SCHEMA ` + schema + ` TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ` + schema + ` TO ` + role,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA ` + schema + ` TO ` + role,
		`REVOKE INSERT, UPDATE, DELETE ON schema_migrations FROM ` + role,
	} {
		_, err := admin.Exec(bg, q)
		require.NoError(t, err, q)
	}
	t.Cleanup(func() {
		for _, q := range []string{`DROP OWNED BY ` + role, `DROP ROLE ` + role} {
			_, err := admin.Exec(bg, q)
			require.NoError(t, err, q)
		}
	})
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.User = url.User(role)
	return u.String(), role, admin, version
}
