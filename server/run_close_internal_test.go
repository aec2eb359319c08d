package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRunClosesListenerWhenExecutorFails: Run closes the listener it was
// handed (Config.Listener) on every return, also when the executor does
// not start; it left it open, accepting connections nobody served.
func TestRunClosesListenerWhenExecutorFails(t *testing.T) {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	srv, err := New(l, Config{Listener: ln, Destinations: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	// An executor already started is one Run cannot start.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.NoError(t, srv.executor.Start(runCtx))
	t.Cleanup(func() { require.NoError(t, srv.executor.Stop(ctx)) })

	require.ErrorContains(t, srv.Run(ctx), "already started")
	// Accept would wait for a connection on a listener left open.
	_ = ln.(*net.TCPListener).SetDeadline(time.Now()) // fails once closed
	_, err = ln.Accept()
	require.True(t, errors.Is(err, net.ErrClosed), "the listener is closed: %v", err)
}

// TestNewClosesListenerWhenRefused: New closes a handed-over listener when
// it fails after CheckConfig (here the API refuses a webhook source with
// no verifier), as it does when the executor cannot be made; it left it
// open then, so that no return path of New or Run but CheckConfig's
// refusal (documented: the listener is still the caller's) closed it.
func TestNewClosesListenerWhenRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	_, err = New(l, Config{Listener: ln, API: httpapi.Options{Webhooks: map[string]httpapi.WebhookSource{"stripe": {}}}})
	require.ErrorContains(t, err, "webhook source stripe has no Verify")
	_ = ln.(*net.TCPListener).SetDeadline(time.Now()) // fails once closed
	_, err = ln.Accept()
	require.True(t, errors.Is(err, net.ErrClosed), "the listener is closed: %v", err)
}
