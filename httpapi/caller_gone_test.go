package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestCallerGoneIsNoInternalError: a caller that went away while its
// request waited on the store (here a table lock of another session)
// ended the request with the store's "context canceled", which was taken
// for a failure of the server: a 500 and an ERROR "request failed" line,
// which an operator would chase. It is now an INFO line saying the caller
// went away, and the request line's status is 499, as proxies log it.
func TestCallerGoneIsNoInternalError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	sink := testrig.NewRecordSink("request")
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(sink), SweepInterval: time.Hour})

	holder, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { holder.Close(ctx) })
	tx, err := holder.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE operations IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	reqCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, srv.URL()+"/v1/operations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		answered <- err
	}()
	testdb.WaitBlockedBy(t, holder, "the list of operations")
	cancel()
	require.ErrorIs(t, <-answered, context.Canceled)
	line := sink.Waited(t)
	require.NoError(t, tx.Rollback(ctx))

	var status int64
	line.Attrs(func(a slog.Attr) bool {
		if a.Key == "status" {
			status = a.Value.Int64()
		}
		return true
	})
	require.EqualValues(t, 499, status)
	var gone bool
	for _, r := range sink.Drain() {
		require.Less(t, r.Level, slog.LevelError, "%s", r.Message)
		require.NotEqual(t, "request failed", r.Message)
		gone = gone || r.Message == "request ended: the caller went away before its answer"
	}
	require.True(t, gone, "no line says the caller went away")
}
