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

// TestNoteCallAbandoned: the note of an abandoned call is made once per
// attempt, under the claim, without a change of state; a claim lost is
// refused as by ExtendLease.
func TestNoteCallAbandoned(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			const key = "charge:1"
			_, _, err = l.Record(ctx, opledger.Intent{Key: key, Action: "payment.charge", Destination: "payment", Payload: json.RawMessage(`{"amount":5}`)})
			require.NoError(t, err)
			c, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			events := func() []string {
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				var out []string
				for _, e := range tl {
					out = append(out, e.Event)
				}
				return out
			}

			_, err = l.NoteCallAbandoned(ctx, key, c.AttemptID, c.FencingToken, " ")
			require.ErrorIs(t, err, opledger.ErrInvalidInput)
			for range 2 {
				op, err := l.NoteCallAbandoned(ctx, key, c.AttemptID, c.FencingToken, "still running")
				require.NoError(t, err)
				require.Equal(t, opledger.StateInProgress, op.State)
			}
			require.Equal(t, []string{"recorded", "claimed", "dispatched", "call abandoned, still running"}, events(), "once")
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			require.Equal(t, c.AttemptID, tl[3].AttemptID)
			require.Equal(t, "still running", tl[3].Evidence)

			clock.Advance(11 * time.Second)
			_, err = l.NoteCallAbandoned(ctx, key, c.AttemptID, c.FencingToken, "still running")
			require.ErrorIs(t, err, opledger.ErrStaleFencingToken, "the claim is lost")
		})
	}
}
