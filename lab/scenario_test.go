package lab_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/lab"
)

// openLedger opens a ledger on a fresh SQLite file, closed when t ends.
func openLedger(t *testing.T) *opledger.Ledger {
	t.Helper()
	l, err := opledger.Open(context.Background(), testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	return l
}

func TestScenarios(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t)

	type want struct {
		action                          string
		attempts, actions, verification int
		state                           string
		says                            string
	}
	for _, tc := range []struct {
		scenario string
		steps    []want
	}{
		{"normal", []want{
			{"send", 1, 1, 0, "succeeded", "sent it once"},
			{"repeat", 2, 1, 0, "succeeded", "Answered from the ledger"},
		}},
		{"changed-data", []want{
			{"send", 1, 1, 0, "succeeded", "sent it once"},
			{"retry-3", 2, 1, 0, "succeeded", "Refused"},
		}},
		{"lost-response", []want{
			{"send", 1, 1, 0, "uncertain", "never confirmed"},
			{"retry", 2, 1, 0, "uncertain", "Held back"},
			{"verify", 2, 1, 1, "succeeded", "found record"},
			{"retry", 3, 1, 1, "succeeded", "Answered from the ledger"},
		}},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			p, err := lab.NewPlayground(ctx, l, tc.scenario)
			require.NoError(t, err)
			check := func(r lab.StepResult, w want) {
				t.Helper()
				require.Equal(t, lab.ScenarioCounters{Attempts: w.attempts, Actions: w.actions, Verifications: w.verification}, r.Counters, "after %s", w.action)
				require.Equal(t, w.state, r.State, "after %s", w.action)
				require.Contains(t, r.Explanation, w.says)
			}
			for _, w := range tc.steps {
				r, err := p.Step(ctx, w.action)
				require.NoError(t, err)
				check(r, w)
			}
			first := p.Tenant()

			// Replay starts over in a new tenant and plays the same script.
			got, err := p.Replay(ctx)
			require.NoError(t, err)
			require.Len(t, got, len(tc.steps))
			for i, w := range tc.steps {
				check(got[i], w)
			}
			require.NotEqual(t, first, p.Tenant())

			// The repeat of a changed request keeps the original content.
			if tc.scenario == "changed-data" {
				tl, err := l.WithTenant(p.Tenant())
				require.NoError(t, err)
				op, err := tl.Get(ctx, lab.OperationKey)
				require.NoError(t, err)
				require.JSONEq(t, `{"order":"DEMO-ORDER-017","units":2}`, string(op.Payload))
			}

			require.NoError(t, p.Reset(ctx))
			require.Empty(t, p.History())
			require.Equal(t, lab.ScenarioCounters{}, p.Counters())
			_, err = p.Step(ctx, "no-such-step")
			require.ErrorIs(t, err, lab.ErrUnknownAction)
		})
	}
	_, err := lab.NewPlayground(ctx, l, "nope")
	require.Error(t, err)
}

// TestPlaygroundResetCancels: an unresolved operation left by a run is
// cancelled by Reset, so it waits for nobody.
func TestPlaygroundResetCancels(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t)
	p, err := lab.NewPlayground(ctx, l, "lost-response")
	require.NoError(t, err)
	_, err = p.Step(ctx, "send")
	require.NoError(t, err)
	tl, err := l.WithTenant(p.Tenant())
	require.NoError(t, err)
	require.NoError(t, p.Reset(ctx))
	op, err := tl.Get(ctx, lab.OperationKey)
	require.NoError(t, err)
	require.Equal(t, opledger.StateFailed, op.State)
	require.Equal(t, opledger.FailureCancelled, op.FailureKind)
}

// TestPlaygroundConcurrentSteps: steps pressed at once (two browser tabs)
// are played one at a time; the CRM still acts once.
func TestPlaygroundConcurrentSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t)
	p, err := lab.NewPlayground(ctx, l, "normal")
	require.NoError(t, err)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			_, err := p.Step(ctx, "send")
			errs <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, lab.ScenarioCounters{Attempts: 8, Actions: 1}, p.Counters())
	h := p.History()
	require.Len(t, h, 8)
	for i, r := range h {
		require.Equal(t, i+1, r.N)
	}
}

// TestPlaygroundHistoryCap: a scenario played for long keeps only its
// newest MaxHistory steps, numbered on from the earlier ones, which are
// counted; Reset forgets both.
func TestPlaygroundHistoryCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l := openLedger(t)
	p, err := lab.NewPlayground(ctx, l, "normal")
	require.NoError(t, err)
	const played = 57
	require.Equal(t, 50, lab.MaxHistory)
	for i := range played {
		r, err := p.Step(ctx, "repeat")
		require.NoError(t, err)
		require.Equal(t, i+1, r.N)
	}
	steps, earlier := p.Recent()
	require.Len(t, steps, 50)
	require.Equal(t, 7, earlier)
	for i, r := range steps {
		require.Equal(t, 8+i, r.N, "the newest steps, oldest first")
	}
	require.Equal(t, steps, p.History())
	require.Equal(t, played, p.Counters().Attempts, "every step still counts")

	require.NoError(t, p.Reset(ctx))
	steps, earlier = p.Recent()
	require.Empty(t, steps)
	require.Zero(t, earlier)
	r, err := p.Step(ctx, "send")
	require.NoError(t, err)
	require.Equal(t, 1, r.N)
}
