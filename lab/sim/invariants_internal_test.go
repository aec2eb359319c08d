package sim

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// The invariants bite: effects made behind the ledger's back are caught.
func TestInvariantsCatchTampering(t *testing.T) {
	testHookBeforeCheck = func(ctx context.Context, w *world) {
		for _, key := range w.order {
			op, err := w.ledger.Get(ctx, key)
			require.NoError(t, err)
			// A resend without the idempotency key, as a careless
			// worker would make it.
			// The CRM refuses a known reference (409), which is its
			// protection; the others make a second effect.
			_, err = w.dests[w.keys[key]].Call(ctx, opledger.Call{Operation: op})
			if w.keys[key] != "crm" {
				require.NoError(t, err)
			}
		}
	}
	defer func() { testHookBeforeCheck = nil }()
	rep, err := Run(context.Background(), Config{Seed: 3, Operations: 12, Dir: t.TempDir()})
	require.NoError(t, err)
	require.False(t, rep.OK())
	verr := rep.Err()
	for _, inv := range []Invariant{UnprotectedResend, CounterMismatch, DuplicateEffect} {
		require.True(t, errors.Is(verr, inv), "%s not reported:\n%s", inv, rep)
	}
	require.Contains(t, rep.String(), "replay: go test ./lab/sim -run 'TestSim$' -seed 3")
	js, err := rep.JSON()
	require.NoError(t, err)
	require.Contains(t, string(js), `"invariant": "counter_mismatch"`)
}

// A total lower than at an earlier read is caught: here the last read is
// made to have counted one confirmed effect more than there is.
func TestFiguresWentDownIsCaught(t *testing.T) {
	testHookBeforeCheck = func(ctx context.Context, w *world) {
		w.totals["confirmed effects"]++
		require.NoError(t, w.checkTotals(ctx))
	}
	defer func() { testHookBeforeCheck = nil }()
	rep, err := Run(context.Background(), Config{Seed: 3, Operations: 12, Dir: t.TempDir()})
	require.NoError(t, err)
	require.True(t, errors.Is(rep.Err(), FiguresWentDown), "not reported:\n%s", rep)
	require.Contains(t, rep.String(), "confirmed effects went down")
}

// Several totals going down in one read are reported in the same order on
// every run of a seed: the violations go into the trace the digest covers.
func TestFiguresWentDownDeterministic(t *testing.T) {
	testHookBeforeCheck = func(ctx context.Context, w *world) {
		for name := range w.totals {
			w.totals[name]++
		}
		require.NoError(t, w.checkTotals(ctx))
	}
	defer func() { testHookBeforeCheck = nil }()
	run := func() *Report {
		rep, err := Run(context.Background(), Config{Seed: 3, Operations: 12, Dir: t.TempDir(), KeepTrace: true})
		require.NoError(t, err)
		return rep
	}
	first := run()
	require.Greater(t, len(first.Violations), 1)
	for range 3 {
		require.Equal(t, first.Digest, run().Digest, "same seed, same digest")
	}
}

// An operation decided in the pass in which its lookup failed is caught:
// here every operation that ended succeeded is made to look as if its
// lookup had failed in the reconciler's last pass. The runs themselves
// fail lookups and keep the invariant.
func TestDecidedOnFailedLookupIsCaught(t *testing.T) {
	var succeeded []string
	testHookBeforeCheck = func(ctx context.Context, w *world) {
		require.Positive(t, w.report.FailedLookups, "seed 3 fails no lookup")
		require.False(t, errors.Is(w.report.Err(), DecidedOnFailedLookup), "%s", w.report)
		for _, key := range w.order {
			op, err := w.ledger.Get(ctx, key)
			require.NoError(t, err)
			if op.State == opledger.StateSucceeded {
				succeeded = append(succeeded, key)
			}
		}
		w.failedLookups = succeeded
		require.NoError(t, w.checkFailedLookups(ctx))
	}
	defer func() { testHookBeforeCheck = nil }()
	rep, err := Run(context.Background(), Config{Seed: 3, Operations: 12, Dir: t.TempDir()})
	require.NoError(t, err)
	require.NotEmpty(t, succeeded)
	require.True(t, errors.Is(rep.Err(), DecidedOnFailedLookup), "not reported:\n%s", rep)
	require.Contains(t, rep.String(), "its lookup failed, yet the reconciler's pass left it succeeded")
}
