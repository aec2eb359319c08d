package client_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestErrorIsStoreSentinels: a request the store could not take answers
// 503 store_busy (with Retry-After: send it again) or schema_newer, and
// the client's error matches the library's sentinel for it, as the
// ledger's own error does, so that one errors.Is decides the retry over
// the library and over the API alike. It matched none: a Go automation
// could not tell a busy store from any other failure. A release refused
// after the dispatch matches opledger.ErrAlreadyDispatched, as the
// library's does.
func TestErrorIsStoreSentinels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{SQLiteBusyTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	secret, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, secret, nil)
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}
	_, _, err = c.Record(ctx, "busy:1", in)
	require.NoError(t, err)

	// A release after the dispatch: its call may have gone out.
	cl, err := c.Claim(ctx, "busy:2", client.ClaimRequest{Worker: "w", Intent: &in, Dispatch: true})
	require.NoError(t, err)
	_, err = c.Release(ctx, "busy:2", cl.AttemptID, cl.FencingToken, "shutting down")
	require.ErrorIs(t, err, opledger.ErrAlreadyDispatched)
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	lc, err := l.Claim(ctx, "busy:1", opledger.ClaimOptions{Worker: "w", Dispatch: true})
	require.NoError(t, err)
	_, lerr := l.Release(ctx, "busy:1", lc.AttemptID, lc.FencingToken, "")
	require.ErrorIs(t, lerr, opledger.ErrAlreadyDispatched, "the library agrees")
	_, err = l.Report(ctx, "busy:1", lc.AttemptID, lc.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable})
	require.NoError(t, err)

	release := testdb.HoldLock(t, dsn, "default", "busy:1")
	_, _, err = c.Record(ctx, "busy:3", in)
	release()
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, http.StatusServiceUnavailable, e.Status)
	require.Equal(t, "store_busy", e.Kind())
	require.Equal(t, time.Second, e.RetryAfter)
	require.ErrorIs(t, err, opledger.ErrStoreBusy, "as the ledger's own error")
	require.False(t, errors.Is(err, opledger.ErrStoreFull))
	require.False(t, errors.Is(err, opledger.ErrInvalidInput))
	_, _, err = c.Record(ctx, "busy:3", in)
	require.NoError(t, err, "sent again once the lock is gone")

	// A newer release migrates the store under this server.
	versions, err := sqlitestore.MigrationVersions()
	require.NoError(t, err)
	path, _ := sqlitestore.DSNPath(dsn)
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, `INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, versions[len(versions)-1]+1)
	require.NoError(t, err)
	_, _, err = c.Record(ctx, "busy:4", in)
	require.ErrorAs(t, err, &e)
	require.Equal(t, "schema_newer", e.Kind())
	require.ErrorIs(t, err, opledger.ErrSchemaNewer)
	require.False(t, errors.Is(err, opledger.ErrStoreBusy))

	// store_full, which a test cannot bring about on a real disk, is
	// matched the same way.
	full := &client.Error{Status: 503, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "store_full"}}
	require.ErrorIs(t, full, opledger.ErrStoreFull)
	require.False(t, errors.Is(full, opledger.ErrStoreBusy))
}
