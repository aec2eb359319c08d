package cli_test

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestOpsListAgeByServerClock: ops list's AGE is measured against the
// ledger's clock (the list answer's now), not the clock of the machine
// the command runs on. The server's ledger clock here is six hours
// behind this machine's: one operation recorded two hours before the
// other is 2h old and the other 0s, through the API as on the store;
// by this machine's clock they would read 8h and 6h.
func TestOpsListAgeByServerClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "age.db")
	var offset atomic.Int64
	offset.Store(int64(-8 * time.Hour))
	l, err := opledger.Open(ctx, dsn, opledger.Options{
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:old", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	offset.Store(int64(-6 * time.Hour))
	_, _, err = l.Record(ctx, opledger.Intent{Key: "order:new", Action: "create", Destination: "crm"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "cli-test", opledger.ReadOnly)
	require.NoError(t, err)
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour})

	out, errOut, code := run(t, "ops", "list", "--server", srv.URL(), "--token", token)
	require.Equal(t, 0, code, errOut)
	// Seconds at most: the command runs well within a minute of the
	// second record.
	require.Regexp(t, regexp.MustCompile(`(?m)^order:new\s+pending\s+crm\s+0\s+-\s+-\s+[0-9]+s\s+-$`), out)
	require.Regexp(t, regexp.MustCompile(`(?m)^order:old\s+pending\s+crm\s+0\s+-\s+-\s+2h\s+-$`), out)
}
