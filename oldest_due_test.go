package opledger_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestOldestDue: Stats.OldestDueSeconds is the wait of the pending
// operation due longest: from its recording, or from the end of its
// backoff; an operation in backoff does not count until it is due, a
// claimed one no longer counts, and each tenant has its own (all tenants
// together: the longest of them).
func TestOldestDue(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map,
				RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Minute, MaxDelay: time.Minute}})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			other, err := l.WithTenant("other")
			require.NoError(t, err)
			// oldest is Stats' figure; for one tenant, OldestDue must say
			// the same and name the operation (due, when the figure is 0).
			due := ""
			oldest := func(l *opledger.Ledger, all bool) float64 {
				t.Helper()
				s, err := l.Stats(ctx, all)
				require.NoError(t, err)
				if !all {
					op, waited, err := l.OldestDue(ctx)
					require.NoError(t, err)
					require.Equal(t, s.OldestDueSeconds, waited.Seconds())
					if due == "" {
						require.Nil(t, op)
					} else {
						require.NotNil(t, op)
						require.Equal(t, due, op.Key)
						require.Equal(t, opledger.StatePending, op.State)
					}
				}
				return s.OldestDueSeconds
			}
			record := func(l *opledger.Ledger, key string) {
				t.Helper()
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}

			require.Zero(t, oldest(l, false), "nothing pending")
			record(l, "a")
			clock.Advance(90 * time.Second)
			due = "a"
			require.Equal(t, 90.0, oldest(l, false))
			record(l, "b")
			record(other, "c")
			clock.Advance(10 * time.Second)
			require.Equal(t, 100.0, oldest(l, false), "a still waits longest")
			due = "c"
			require.Equal(t, 10.0, oldest(other, false), "the other tenant's own")
			due = "a"

			// a is claimed and answered with a retryable error: it waits up
			// to a minute (jittered) before it is due again.
			c, err := l.Claim(ctx, "a", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			require.NoError(t, err)
			a, err := l.Get(ctx, "a")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, a.State)
			due = "b"
			require.Equal(t, 10.0, oldest(l, false), "a is not due during its backoff: b, recorded 10 s ago")
			clock.Advance(70 * time.Second)
			require.Equal(t, 80.0, oldest(l, false), "b; a is due again since its backoff ended, less than 70 s ago")
			_, err = l.Claim(ctx, "b", opledger.ClaimOptions{})
			require.NoError(t, err)
			due = "a"
			now := clock.Map(time.Time{})
			require.NotNil(t, a.NotBefore)
			require.False(t, a.NotBefore.After(now), "the backoff (a minute at most) has passed")
			require.Equal(t, now.Sub(*a.NotBefore).Seconds(), oldest(l, false), "a, due again since the end of its backoff")
			require.Equal(t, 80.0, oldest(l, true), "all tenants: c, recorded 80 s ago")
		})
	}
}
