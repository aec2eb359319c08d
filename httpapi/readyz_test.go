package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// TestReadyzAfterLockFreed: the probe that outlived its 5 s wait behind
// another session's lock (SQLite's write lock, a PostgreSQL lock on the
// readiness row) ends, once the lock is freed, with its own deadline's
// error. The answers that take its result must say that a write did not
// commit in time, as the one before did, not that the store refuses
// writes (a read-only file system or an I/O error), and the next probe is
// ready. Before, the answers given as the lock was freed named a
// read-only store.
func TestReadyzAfterLockFreed(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			dsn := st.NewDSN(t)
			l, err := opledger.Open(context.Background(), dsn, opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			get := func() *httptest.ResponseRecorder {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
				return rec
			}
			const timedOut = "a write did not commit within 5 s"
			release := holdReadinessLock(t, dsn)
			rec := get()
			require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), timedOut)
			release()

			deadline := time.Now().Add(15 * time.Second)
			answers := 0
			for {
				rec := get()
				if rec.Code == http.StatusOK {
					break
				}
				answers++
				require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
				require.Contains(t, rec.Body.String(), timedOut, "answer %d after the lock was freed", answers)
				require.True(t, time.Now().Before(deadline), "not ready 15 s after the lock was freed")
			}
		})
	}
}

// holdReadinessLock keeps the readiness probe's write waiting until
// release: SQLite's write lock, or on PostgreSQL a lock on the readiness
// table that its UPDATE waits for (reads go on).
func holdReadinessLock(t *testing.T, dsn string) (release func()) {
	t.Helper()
	if strings.HasPrefix(dsn, "sqlite:") {
		return testdb.HoldLock(t, dsn, "default", "any")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE readiness IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	return func() {
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, conn.Close(ctx))
	}
}
