package httpapi_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestNewerSchemaStopsTheServer: once a newer release has migrated the
// store under a running server (a rolling upgrade), the server records
// nothing more: a write answers 503 schema_newer, saying why, and
// /readyz answers the same, so that a load balancer sends the requests
// to the newer release's servers.
func TestNewerSchemaStopsTheServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	do := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, err := io.ReadAll(rec.Result().Body)
		require.NoError(t, err)
		return rec.Code, string(b)
	}
	put := `{"action":"crm.create","destination":"crm","payload":{"n":1}}`
	code, body := do(http.MethodPut, "/v1/operations/k-1", put)
	require.Equal(t, http.StatusCreated, code, body)

	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	newest := versions[len(versions)-1]
	path, _ := sqlitestore.DSNPath(dsn)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, newest+1)
	require.NoError(t, err)

	want := fmt.Sprintf("the store's schema is at version %d, newer than this opledger knows (%d)", newest+1, newest)
	code, body = do(http.MethodPut, "/v1/operations/k-2", put)
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`)
	require.Contains(t, body, want)
	code, body = do(http.MethodGet, "/readyz", "")
	require.Equal(t, http.StatusServiceUnavailable, code, body)
	require.Contains(t, body, `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`)
	require.Contains(t, body, want)
	code, body = do(http.MethodGet, "/v1/operations/k-2", "")
	require.Equal(t, http.StatusNotFound, code, "nothing recorded: %s", body)
}
