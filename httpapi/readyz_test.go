package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestReadyzUnavailable: when the store stops answering, /readyz says 503
// with a problem body, while /healthz (the process is alive) stays 200.
func TestReadyzUnavailable(t *testing.T) {
	t.Parallel()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	defer srv.Close()

	var header http.Header
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		header = resp.Header
		return resp.StatusCode, string(body)
	}
	status, _ := get("/readyz")
	require.Equal(t, http.StatusOK, status)
	require.NoError(t, l.Close())
	status, body := get("/readyz")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, httpapi.ProblemTypeBase+"unavailable")
	require.NotEmpty(t, header.Get("X-Request-Id"))
	require.Empty(t, header.Get("Retry-After"), "the OpenAPI document declares none for /readyz (TestResponseHeadersDocumented)")
	status, _ = get("/healthz")
	require.Equal(t, http.StatusOK, status)
}

// TestReadyzRefusesWrites: a store that answers reads but cannot commit a
// write is not ready. On SQLite another process holds the file's write
// lock past the busy timeout; on PostgreSQL the server's sessions are
// read-only, as on a standby after a failover. /readyz says 503 and why,
// and 200 again once writes go through.
func TestReadyzRefusesWrites(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 100 * time.Millisecond})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			readyz := func(l *opledger.Ledger) (int, string) {
				h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
				require.NoError(t, err)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
				return rec.Code, rec.Body.String()
			}
			code, body := readyz(l)
			require.Equal(t, http.StatusOK, code, body)

			refusing, want, release := l, "", func() {}
			switch st.Name {
			case "sqlite":
				release = testdb.HoldLock(t, dsn, "default", "any")
				want = "another process holds its write lock"
			case "postgres":
				// pgx passes an unknown DSN parameter on as a run-time
				// setting of every session.
				refusing, err = opledger.Open(ctx, dsn+"&default_transaction_read_only=on", opledger.Options{ExistingOnly: true})
				require.NoError(t, err)
				t.Cleanup(func() { refusing.Close() })
				require.NoError(t, refusing.Ping(ctx), "reads still answer")
				want = "does not accept writes"
			}
			code, body = readyz(refusing)
			require.Equal(t, http.StatusServiceUnavailable, code, body)
			require.Contains(t, body, httpapi.ProblemTypeBase+"unavailable")
			require.Contains(t, body, want)
			require.Error(t, refusing.Ready(ctx))

			release()
			code, body = readyz(l) // the lock let go; on PostgreSQL, sessions that may write
			require.Equal(t, http.StatusOK, code, body)
		})
	}
}

// TestReadyzWaitsForLock: with SQLite's default busy timeout (10 s), a
// write lock held elsewhere outlasts the probe's 5 s wait, and the detail
// names that cause.
func TestReadyzWaitsForLock(t *testing.T) {
	t.Parallel()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(context.Background(), dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	release := testdb.HoldLock(t, dsn, "default", "any")
	defer release()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.Contains(t, rec.Body.String(), "a write did not commit within 5 s (another process holding its write lock, or a commit that hangs)")
}
