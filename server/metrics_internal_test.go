package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
)

// TestAbandonedLookupsServed: a server that reconciles serves on /metrics
// how many of its reconciler's abandoned lookups still run
// (opledger_reconciler_abandoned_lookups); one without destinations has no such
// series.
func TestAbandonedLookupsServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	crm := fakedest.New(t, fakedest.Options{})
	path := filepath.Join(t.TempDir(), "destinations.yaml")
	require.NoError(t, os.WriteFile(path, []byte("destinations:\n  - name: crm\n    url: "+crm.URL()+"/records\n    ref: /id\n"), 0o644))
	set, err := destination.LoadFile(path, destination.LoadOptions{})
	require.NoError(t, err)
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, tc := range []struct {
		set  *destination.Set
		want bool
	}{{set, true}, {nil, false}} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { ln.Close() })
		srv, err := New(l, Config{Listener: ln, Destinations: tc.set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		require.NoError(t, err)
		t.Cleanup(func() { srv.console.Close() })
		rec := httptest.NewRecorder()
		srv.http.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		if tc.want {
			require.Contains(t, rec.Body.String(), "\nopledger_reconciler_abandoned_lookups 0\n")
		} else {
			require.NotContains(t, rec.Body.String(), "opledger_reconciler_abandoned_lookups")
		}
	}
}
