package httpapi_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"
	"time"

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

	release, err := testdb.GoneWhileLocked(t, dsn, "operations", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL()+"/v1/operations", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	require.ErrorIs(t, err, context.Canceled)
	line := sink.Waited(t)
	release()

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
