package console_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	sink := testrig.NewRecordSink("page ended: the browser went away before it")
	c, err := console.New(l, console.Options{Logger: slog.New(sink)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	srv := httptest.NewServer(c)
	defer srv.Close()
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
