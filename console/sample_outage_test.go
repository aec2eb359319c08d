package console_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestSampleStoreProblemEndsSample: a sample whose tenants' counters the
// store could not read (here store_busy: the operations table locked
// elsewhere past the DSN's lock_timeout) logged an ERROR per tenant, at
// every sample for as long as the outage lasted, and returned nil, so
// that the sample loop's outage rule never saw it. The first store
// problem now ends the sample with its error, which the loop logs by the
// outage rule (periodic.Run: WARN as the failures double, DEBUG between,
// INFO when the store answers again); the sample logs nothing itself.
func TestSampleStoreProblemEndsSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn+"&lock_timeout=50ms", opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	for _, tenant := range []string{"acme", "globex", "initech"} {
		tl, err := l.WithTenant(tenant)
		require.NoError(t, err)
		_, _, err = tl.CreateToken(ctx, "console", opledger.ReadOnly)
		require.NoError(t, err)
	}
	sink := testrig.NewRecordSink("")
	c, err := console.New(l, console.Options{Logger: slog.New(sink)})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })

	_, release := testdb.HoldTableLock(t, dsn, "operations")
	err = c.Sample(ctx)
	release()
	require.ErrorIs(t, err, opledger.ErrStoreBusy, "the store problem is the sample's, for its loop's outage rule")
	for _, rec := range sink.Drain() {
		require.NotEqual(t, slog.LevelError, rec.Level, "no ERROR of the sample itself: %s", rec.Message)
	}
	require.NoError(t, c.Sample(ctx), "the store answers again")
}
