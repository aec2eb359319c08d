package opledger_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
)

// TestMaintainBoundedOnHungStore: Maintain's jobs had no deadline of
// their own. On PostgreSQL, with the operations table locked by another
// session (an operator's LOCK TABLE; the DSN sets no lock_timeout), and
// on SQLite, with the file's lock held by another process past a long
// SQLiteBusyTimeout (a VACUUM), a lease sweep or a compaction waited for
// the lock as long as it was held, and with it every later turn of the
// job, logging nothing. Each turn is now bounded (the lease sweep by its
// interval, compaction by twice its own, each by 5 s at least): a turn
// that ends at its deadline is a store_busy failure, logged by the outage
// rule (WARN at the first), and once the lock is released the job runs
// again and does its work, the store left clean by the turns given up
// (on SQLite, the writer has no transaction left open).
func TestMaintainBoundedOnHungStore(t *testing.T) {
	for _, st := range testdb.Stores() {
		for _, job := range []struct {
			name string
			// what is the job's name in the log; did the line its work
			// logs once the store answers again.
			what, did string
			opts      opledger.MaintainOptions
		}{
			{name: "lease sweep", what: "expire leases", did: `msg="settled expired leases" count=1`,
				opts: opledger.MaintainOptions{LeaseSweep: 200 * time.Millisecond}},
			{name: "compaction", what: "compact", did: "compacted.tombstoned=1",
				opts: opledger.MaintainOptions{CompactInterval: 200 * time.Millisecond}},
		} {
			t.Run(st.Name+"/"+job.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				dsn := st.NewDSN(t)
				var offset atomic.Int64
				l, err := opledger.Open(ctx, dsn, opledger.Options{Lease: time.Minute, Retention: time.Hour,
					SQLiteBusyTimeout: time.Hour, // a write waits for the lock as long as it is held
					Clock:             func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
				require.NoError(t, err)
				defer func() { require.NoError(t, l.Close()) }()
				intent := func(key string) *opledger.Intent {
					return &opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
				}
				lost, err := l.Claim(ctx, "k:lost", opledger.ClaimOptions{Intent: intent("k:lost")})
				require.NoError(t, err)
				done, err := l.Claim(ctx, "k:done", opledger.ClaimOptions{Intent: intent("k:done")})
				require.NoError(t, err)
				_, err = l.Report(ctx, "k:done", done.AttemptID, done.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
				require.NoError(t, err)
				offset.Add(int64(2 * time.Hour)) // k:lost's lease and k:done's retention are over

				release := testdb.HoldWrites(t, dsn)
				defer release()

				var logs testrig.LogBuffer
				o := job.opts
				o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
				mctx, stop := context.WithCancel(ctx)
				stopped := make(chan struct{})
				go func() {
					l.Maintain(mctx, o)
					close(stopped)
				}()
				defer func() {
					stop()
					<-stopped
				}()
				// A failure guard only: with the bound the turn ends within
				// its deadline, without it never while the lock is held.
				warned := `level=WARN msg="` + job.what + `" problem=store_busy failures=1 `
				if job.what == "compact" {
					warned = `level=WARN msg=compact problem=store_busy failures=1 `
				}
				require.Eventually(t, func() bool { return strings.Contains(logs.String(), warned) },
					time.Minute, time.Millisecond, "the job's turn still waits for the lock:\n%s", &logs)

				release()
				require.Eventually(t, func() bool {
					out := logs.String()
					return strings.Contains(out, job.did) && strings.Contains(out, `msg="`+job.what+`: store reachable again"`)
				}, time.Minute, time.Millisecond, "the job ran again once the lock was released:\n%s", &logs)
				stop()
				<-stopped
				require.NotContains(t, logs.String(), "level=ERROR")

				if job.what == "expire leases" {
					op, err := l.Get(ctx, "k:lost")
					require.NoError(t, err)
					require.Equal(t, opledger.StatePending, op.State)
					attempts, err := l.Attempts(ctx, "k:lost")
					require.NoError(t, err)
					require.Equal(t, lost.AttemptID, attempts[0].ID)
					require.Equal(t, opledger.AttemptAbandoned, attempts[0].Outcome)
				} else {
					gone, err := l.Get(ctx, "k:done")
					require.NoError(t, err)
					require.True(t, gone.Tombstoned)
				}
				// The store takes writes again: nothing of a turn given up
				// is left open.
				_, _, err = l.Record(ctx, opledger.Intent{Key: "k:after", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			})
		}
	}
}
