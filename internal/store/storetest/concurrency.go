package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testConcurrentClaims races 32 goroutines over the same 1,000 keys, in two
// rounds, and checks that every key has exactly one winner per round.
func testConcurrentClaims(t *testing.T, h Harness) {
	const (
		workers = 32
		keys    = 1000
	)
	b := setup(t, h, func(o *opledger.Options) {
		// No backoff: a retryable outcome makes the key claimable again at once.
		o.RetryPolicy = &opledger.RetryPolicy{MaxAttempts: 10}
	})
	names := make([]string, keys)
	for i := range names {
		names[i] = fmt.Sprintf("race:%04d", i)
		_, _, err := b.ledger.Record(b.ctx, intent(names[i]))
		require.NoError(t, err)
	}
	for round := 1; round <= 2; round++ {
		wins := make([]atomic.Int32, keys)
		claims := make([]*opledger.Claim, keys)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
				for _, i := range rng.Perm(keys) {
					c, err := b.ledger.Claim(b.ctx, names[i], opledger.ClaimOptions{Worker: fmt.Sprintf("w%d", w), Lease: time.Hour})
					switch {
					case err == nil:
						wins[i].Add(1)
						claims[i] = c
					case errors.Is(err, opledger.ErrInProgress):
					default:
						errs <- fmt.Errorf("claim %s: %w", names[i], err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		for i := range wins {
			require.EqualValues(t, 1, wins[i].Load(), "round %d: winners of %s", round, names[i])
			require.EqualValues(t, round, claims[i].FencingToken)
		}
		// Hand every key back for the next round.
		for i, c := range claims {
			op, err := b.ledger.Report(b.ctx, names[i], c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "next round"})
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
		}
	}
	for _, name := range names[:10] {
		attempts, err := b.ledger.Attempts(b.ctx, name)
		require.NoError(t, err)
		require.Len(t, attempts, 2, "one attempt per round, no more")
	}
}

func testTombstones(t *testing.T, h Harness) {
	b := setupRetention(t, h)
	b.inState(t, "done", opledger.StateSucceeded)
	b.inState(t, "rejected", opledger.StateFailed)
	b.inState(t, "open", opledger.StateHeld)

	res, err := b.ledger.Compact(b.ctx)
	require.NoError(t, err)
	require.Zero(t, res.Tombstoned, "too young")

	b.clock.Advance(31 * 24 * time.Hour)
	res, err = b.ledger.Compact(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Tombstoned)

	op, err := b.ledger.Get(b.ctx, "done")
	require.NoError(t, err)
	require.True(t, op.Tombstoned)
	require.Equal(t, opledger.StateSucceeded, op.State)
	require.Equal(t, "REF-done", op.DestinationRef)
	tl, err := b.ledger.Timeline(b.ctx, "done")
	require.NoError(t, err)
	require.Empty(t, tl, "full record gone")
	b.requireState(t, "open", opledger.StateHeld) // unresolved work is never compacted

	// A very late repeat is still recognised.
	again, created, err := b.ledger.Record(b.ctx, intent("done"))
	require.NoError(t, err)
	require.False(t, created)
	require.True(t, again.Tombstoned)
	require.Equal(t, "REF-done", again.DestinationRef)
	_, err = b.ledger.Claim(b.ctx, "done", opledger.ClaimOptions{})
	require.ErrorIs(t, err, opledger.ErrAlreadySucceeded)
	in := intent("done")
	in.Version = 2
	_, _, err = b.ledger.Record(b.ctx, in)
	require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
	_, err = b.ledger.Claim(b.ctx, "rejected", opledger.ClaimOptions{})
	require.ErrorIs(t, err, opledger.ErrInvalidState)

	// A decision on a compacted operation says why nothing can change it.
	_, _, err = b.ledger.Resolve(b.ctx, "rejected", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "again"})
	require.ErrorIs(t, err, opledger.ErrInvalidState)
	require.ErrorContains(t, err, "operation is failed and compacted")

	b.clock.Advance(401 * 24 * time.Hour)
	res, err = b.ledger.Compact(b.ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Forgotten)
	_, err = b.ledger.Get(b.ctx, "done")
	require.ErrorIs(t, err, opledger.ErrNotFound)
}

// testCompactionsAtOnce: compactions running at the same time (several
// servers maintaining one store) each skip what another compacted first:
// none fails, and every operation is compacted once.
func testCompactionsAtOnce(t *testing.T, h Harness) {
	b := setupRetention(t, h)
	const n = 60
	for i := range n {
		b.inState(t, fmt.Sprintf("done-%d", i), opledger.StateSucceeded)
	}
	b.clock.Advance(31 * 24 * time.Hour)
	total := 0
	for _, r := range b.compactAtOnce(t, 4) {
		total += r.Tombstoned
	}
	require.Equal(t, n, total, "each operation compacted once")
	st, err := b.ledger.Stats(b.ctx, false)
	require.NoError(t, err)
	require.Equal(t, n, st.ConfirmedEffects, "totals unchanged")
}

func testPaging(t *testing.T, h Harness) {
	b := setup(t, h)
	const n = 120
	for i := range n {
		in := intent(fmt.Sprintf("page:%03d", i))
		if i%3 == 0 {
			in.Owner = "alice"
		}
		if i%4 == 0 {
			in.Destination = "email"
		}
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		if i%2 == 0 {
			b.clock.Advance(time.Millisecond) // some share a created_at, some don't
		}
	}
	var seen []string
	cursor := ""
	pages := 0
	for {
		page, err := b.ledger.List(b.ctx, opledger.ListOptions{Limit: 50, Cursor: cursor})
		require.NoError(t, err)
		pages++
		for _, op := range page.Items {
			seen = append(seen, op.Key)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	require.Equal(t, 3, pages)
	require.Len(t, seen, n)
	for i, key := range seen {
		require.Equal(t, fmt.Sprintf("page:%03d", n-1-i), key, "newest first, no gaps or repeats")
	}

	page, err := b.ledger.List(b.ctx, opledger.ListOptions{Owner: "alice", Destination: "email", Limit: 500})
	require.NoError(t, err)
	require.Len(t, page.Items, 10) // i%12 == 0
	require.Empty(t, page.NextCursor)

	_, err = b.ledger.Claim(b.ctx, "page:000", opledger.ClaimOptions{})
	require.NoError(t, err)
	page, err = b.ledger.List(b.ctx, opledger.ListOptions{States: []opledger.State{opledger.StateInProgress, opledger.StateHeld}})
	require.NoError(t, err)
	require.Len(t, page.Items, 1)

	_, err = b.ledger.List(b.ctx, opledger.ListOptions{Cursor: "garbage!"})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = b.ledger.List(b.ctx, opledger.ListOptions{States: []opledger.State{"done"}})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = b.ledger.List(b.ctx, opledger.ListOptions{Limit: 501})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

// compactAtOnce runs n compactions at the same time and returns what each
// did; any of them failing fails the test.
func (b *bundle) compactAtOnce(t *testing.T, n int) []opledger.CompactResult {
	t.Helper()
	results := make([]opledger.CompactResult, n)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			var err error
			results[i], err = b.ledger.Compact(b.ctx)
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	return results
}
