package server_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestSampleBoundedOnHungStore: the server's sampling of the console's
// counters had no deadline. With the tokens table locked by another
// session (an operator's LOCK TABLE; the DSN sets no lock_timeout), a
// turn waited for the lock as long as it was held, and with it every
// later one, logging nothing. Each turn is bounded as Maintain's are
// (its interval, at least 5 s): one cut there is a store_busy failure,
// logged by the outage rule (WARN at the first), and once the lock is
// released sampling goes through again ("store reachable again").
func TestSampleBoundedOnHungStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	_, _, err = l.CreateToken(ctx, "console", opledger.ReadOnly)
	require.NoError(t, err)
	_, release := testdb.HoldTableLock(t, dsn, "tokens")
	defer release()

	var logs testrig.LogBuffer
	testrig.Serve(t, l, server.Config{SampleInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	const cut = `level=WARN msg="sample counters" problem=store_busy failures=1`
	// A minute is a guard against a turn that never ends (as before),
	// not a measure: a turn ends after its 5 s.
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), cut) }, time.Minute, 10*time.Millisecond,
		"a sample held by the lock is given up as store_busy:\n%s", logs.String())
	release()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), `msg="sample counters: store reachable again"`) },
		time.Minute, 10*time.Millisecond, "sampling goes through once the lock is released:\n%s", logs.String())
	require.NotContains(t, logs.String(), "level=ERROR")
}
