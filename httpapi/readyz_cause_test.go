package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestReadyzPermissionDenied: a PostgreSQL role that may read but not
// take the schema guard's lock (no UPDATE on schema_migrations, on
// PostgreSQL 15 and older) fails the write probe with permission denied;
// /readyz says a privilege is missing, not a read-only file system or an
// I/O error, and quotes nothing of the driver.
func TestReadyzPermissionDenied(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(bg, dsn, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	roleDSN, role, _, version := testdb.RoleWithoutGuardLock(t, dsn, "ro")
	if version > 15 {
		t.Skip("from PostgreSQL 16, INSERT also allows the guard's lock")
	}
	ro, err := opledger.Open(bg, roleDSN, opledger.Options{ExistingOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { ro.Close() })
	require.NoError(t, ro.Ping(bg), "reads answer")

	h, err := httpapi.New(ro, httpapi.Options{Auth: ro, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	body := rec.Body.String()
	require.Contains(t, body, httpapi.ProblemTypeBase+"unavailable")
	require.Contains(t, body, "permission")
	require.NotContains(t, body, "read-only file system")
	require.NotContains(t, body, "42501")
	require.NotContains(t, body, role)
}
