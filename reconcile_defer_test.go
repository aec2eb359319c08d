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

// TestRepeatedDeferralWrittenOnce: an operation put off again and again
// for the same reason (its destination is not configured in the
// reconciler, or does not serve its tenant: a recheck every 10 minutes)
// used to get a "reconcile deferred" entry at each recheck, 144 a day for
// as long as it stayed uncertain. The same deferral right after itself is
// written once; its next check moves on all the same, and another reason
// is written.
func TestRepeatedDeferralWrittenOnce(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			const key = "defer:D1"
			in := opledger.Intent{Key: key, Action: "create", Destination: "legacy", Payload: json.RawMessage(`{}`)}
			c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			deferrals := func() []string {
				t.Helper()
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				var out []string
				for _, e := range tl {
					if e.Event == "reconcile deferred" {
						out = append(out, e.Evidence)
					}
				}
				return out
			}

			const why = "destination legacy is not configured in this reconciler; it declares nothing here"
			for range 3 {
				clock.Advance(10 * time.Minute)
				op, err := l.DeferReconcile(ctx, key, 10*time.Minute, why)
				require.NoError(t, err)
				require.Equal(t, opledger.StateUncertain, op.State)
				require.Equal(t, 10*time.Minute, op.NotBefore.Sub(op.UpdatedAt), "the next check moves on")
			}
			require.Len(t, deferrals(), 1, "one entry for the same deferral")
			require.Contains(t, deferrals()[0], why)

			// Another reason is news: written, and so is the first one again
			// after it.
			for _, reason := range []string{"lookup failed: 503", why} {
				clock.Advance(10 * time.Minute)
				_, err = l.DeferReconcile(ctx, key, 10*time.Minute, reason)
				require.NoError(t, err)
			}
			got := deferrals()
			require.Len(t, got, 3)
			require.Contains(t, got[1], "lookup failed: 503")
			require.Contains(t, got[2], why)
		})
	}
}

// TestDeferralAttributed: a deferral is the reconciler's entry like its
// findings and holds, and names the credential of the Ledger it came
// through as they do ("reconciler (token …)"). It was written by the
// bare "reconciler" whatever the credential, so a deferral through one
// credential could not be told from another's. The same deferral right
// after itself is still written once.
func TestDeferralAttributed(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			base, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, base.Close()) })
			l, err := base.WithCredential("token lookups, tok_1")
			require.NoError(t, err)
			const key = "defer:A1"
			in := opledger.Intent{Key: key, Action: "create", Destination: "legacy", Payload: json.RawMessage(`{}`)}
			c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in, Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)

			for range 2 {
				_, err = l.DeferReconcile(ctx, key, time.Minute, "lookup failed: 503")
				require.NoError(t, err)
			}
			_, err = l.Hold(ctx, key, "lookups keep failing")
			require.NoError(t, err)
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			var actors []string
			for _, e := range tl {
				if e.Event == "reconcile deferred" || e.Event == "held" {
					actors = append(actors, e.Event+" by "+e.Actor)
				}
			}
			require.Equal(t, []string{
				"reconcile deferred by reconciler (token lookups, tok_1)",
				"held by reconciler (token lookups, tok_1)",
			}, actors)
		})
	}
}
