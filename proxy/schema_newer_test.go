package proxy_test

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/proxy"
)

// TestNewerSchemaLedger: a proxy whose ledger a newer release has
// migrated while it ran records nothing more: a request answers 503
// schema_newer and is not forwarded, rather than 500.
func TestNewerSchemaLedger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	up := fakedest.New(t, fakedest.Options{})
	u := proxy.Upstream{Name: "crm", URL: up.URL()}
	policies, err := proxy.RetryPolicies([]proxy.Upstream{u})
	require.NoError(t, err)
	l, err := opledger.Open(ctx, dsn, opledger.Options{DestinationRetryPolicies: policies})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	p, err := proxy.New(l, proxy.Config{Upstreams: []proxy.Upstream{u}, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)

	path, _ := sqlitestore.DSNPath(dsn)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (999, '999_from_the_future.sql', 0)`)
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/records", strings.NewReader(body1))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "key-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	problem, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, string(problem))
	require.Contains(t, string(problem), `"type":"`+httpapi.ProblemTypeBase+`schema_newer"`)
	require.Zero(t, up.Creates(), "nothing forwarded")
}
