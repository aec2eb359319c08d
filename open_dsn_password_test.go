package opledger_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestOpenPostgresPasswordWithAt: a PostgreSQL URL whose password holds
// an '@' written as is (postgres://user:p@ss@host/db, as a password is
// often pasted) is refused as invalid input, naming the cause and
// repeating nothing of the password. The driver reads the userinfo up to
// the first '@', as libpq does, so it took the rest of the password for
// the host, tried to connect there, and printed it in its error
// ("lookup ss@127.0.0.1: no such host"), where DSN redaction, which
// reads the URL as Go's net/url does (up to the last '@'), could not see
// it. The same password written %40 opens the ledger.
func TestOpenPostgresPasswordWithAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	const secretTail = "s3cret-tail-w0rd"
	// As typed: the '@' of the password not escaped.
	raw := strings.Replace(dsn, "://"+u.User.Username()+"@", "://"+u.User.Username()+":p@"+secretTail+"@", 1)
	require.NotEqual(t, dsn, raw)
	for _, existing := range []bool{false, true} {
		_, err = opledger.Open(ctx, raw, opledger.Options{ExistingOnly: existing})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.NotContains(t, err.Error(), secretTail)
		require.NotContains(t, err.Error(), "w0rd")
		require.ErrorContains(t, err, "%40")
	}
	escaped := strings.Replace(dsn, "://"+u.User.Username()+"@", "://"+u.User.Username()+":p%40"+secretTail+"@", 1)
	l, err := opledger.Open(ctx, escaped, opledger.Options{})
	require.NoError(t, err, "the password escaped is taken (the test server trusts loopback)")
	require.NoError(t, l.Close())
	// An '@' after the path is the query's, which the driver reads as
	// such.
	l, err = opledger.Open(ctx, dsn+"&application_name=a@b", opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	// A query with no path before it whose value holds an '@': the URL
	// syntax ends the host at the '?', the driver reads on to the '@'
	// (user "127.0.0.1", then looks up the rest of the password).
	noPath := "postgres://" + u.Host + "?sslmode=disable&password=p@" + secretTail
	_, err = opledger.Open(ctx, noPath, opledger.Options{})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.NotContains(t, err.Error(), "w0rd")
	require.ErrorContains(t, err, "%40")
}
