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

// TestAnsweredTimesAsStored: the operation a write answers with shows
// its times as a later read does, in the stores' microseconds: a retry's
// not_before (a random backoff has nanoseconds) and a lease's end. A
// client that compares the two as text, or a cursor made from one, sees
// one time.
func TestAnsweredTimesAsStored(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Lease: 1500*time.Millisecond + 777*time.Nanosecond})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			for i := range 5 { // a backoff a whole number of microseconds by chance is 1 in 1000
				key := "p:" + string(rune('a'+i))
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
				c, err := l.Claim(ctx, key, opledger.ClaimOptions{})
				require.NoError(t, err)
				got, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, got.LeaseExpiresAt.Format(time.RFC3339Nano), c.Operation.LeaseExpiresAt.Format(time.RFC3339Nano), "the claim's operation's lease end")
				require.Equal(t, got.LeaseExpiresAt.Format(time.RFC3339Nano), c.LeaseExpiresAt.Format(time.RFC3339Nano), "the claim's own lease_expires_at")
				op, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
				require.NoError(t, err)
				got, err = l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, got.NotBefore.Format(time.RFC3339Nano), op.NotBefore.Format(time.RFC3339Nano), "the retry's not_before")
			}
		})
	}
}
