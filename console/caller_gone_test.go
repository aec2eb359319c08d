package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestBrowserGoneIsNoError: a browser that left a page while it waited
// on the store (here a table lock of another session; in use, a slow
// page the operator navigated away from) had its page end with the
// store's "context canceled", logged as an ERROR the operator would
// chase. It is now an INFO line saying the browser went away.
func TestBrowserGoneIsNoError(t *testing.T) {
	t.Parallel()
	dsn := testdb.PostgresDSN(t)
	sink := testrig.NewRecordSink("page ended: the browser went away before it")
	_, token, srv, _ := storeConsoleOptions(t, dsn, opledger.Options{}, console.Options{Logger: slog.New(sink)})
	s := signIn(t, srv.URL, token)

	release, err := testdb.GoneWhileLocked(t, dsn, "operations", func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/", nil)
		if err != nil {
			return err
		}
		resp, err := s.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	})
	require.ErrorIs(t, err, context.Canceled)
	sink.Waited(t)
	release()
	for _, r := range sink.Drain() {
		require.Less(t, r.Level, slog.LevelError, "%s", r.Message)
	}
}
