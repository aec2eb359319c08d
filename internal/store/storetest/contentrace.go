package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testContentRace races workers over the same new keys, each with content
// of its own (a payload naming it), half recording, half claiming with the
// intent inline, so that refusals land in the same shared transactions
// (SQLite's group commit, PostgreSQL's pipelined writes) as the one
// insert that wins. Per key exactly one caller wins; every other one is
// refused with ErrFingerprintMismatch naming the stored fingerprint,
// which is the winner's; the ledger holds the winner's content, its
// claim if it claimed, and one "recorded" entry. Once the winner's claim
// succeeded, a repeat of its content replays the saved result and a
// repeat of any other content is still refused: no refused caller's
// content ever replaces or blurs the one recorded.
func testContentRace(t *testing.T, h Harness) {
	const (
		workers = 12
		keys    = 40
	)
	b := setup(t, h)
	content := func(key string, w int) opledger.Intent {
		in := intent(key)
		in.Payload = json.RawMessage(fmt.Sprintf(`{"submission":"S-847","worker":%d}`, w))
		return in
	}
	type win struct {
		worker int
		claim  *opledger.Claim // nil for a Record
		fp     string
	}
	var (
		mu    sync.Mutex
		wins  = map[string][]win{}
		wrong []string
	)
	// Each worker's fingerprint, as the ledger computes it (the key is
	// not part of it).
	fps := make([]string, workers)
	for w := range workers {
		op, _, err := b.ledger.Record(b.ctx, content(fmt.Sprintf("probe:%02d", w), w))
		require.NoError(t, err)
		fps[w] = op.Fingerprint
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for k := range keys {
				key := fmt.Sprintf("content-race:%02d", (k+w)%keys)
				in := content(key, w)
				var (
					won   *win
					err   error
					given string
				)
				if w%2 == 0 {
					var op *opledger.Operation
					var created bool
					op, created, err = b.ledger.Record(b.ctx, in)
					if err == nil {
						if !created {
							err = fmt.Errorf("recorded %s with content of its own, not created", key)
						} else {
							won = &win{worker: w, fp: op.Fingerprint}
						}
					}
				} else {
					var c *opledger.Claim
					c, err = b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{Worker: fmt.Sprintf("w%02d", w), Intent: &in})
					if err == nil {
						won = &win{worker: w, claim: c, fp: c.Operation.Fingerprint}
					}
				}
				given = fps[w]
				func() {
					mu.Lock()
					defer mu.Unlock()
					var me *opledger.MismatchError
					switch {
					case len(wrong) >= 10:
					case won != nil:
						if won.fp != given {
							wrong = append(wrong, fmt.Sprintf("%s: worker %d won with fingerprint %s, gave %s", key, w, won.fp, given))
						}
						wins[key] = append(wins[key], *won)
					case errors.As(err, &me):
						if me.Given != given || me.Stored == given {
							wrong = append(wrong, fmt.Sprintf("%s: worker %d refused with given %s, stored %s; gave %s", key, w, me.Given, me.Stored, given))
						}
					default:
						wrong = append(wrong, fmt.Sprintf("%s: worker %d: %v", key, w, err))
					}
				}()
			}
		})
	}
	wg.Wait()
	require.Empty(t, wrong)
	require.Len(t, wins, keys)
	for k := range keys {
		key := fmt.Sprintf("content-race:%02d", k)
		require.Len(t, wins[key], 1, "%s: winners", key)
		w := wins[key][0]
		op, err := b.ledger.Get(b.ctx, key)
		require.NoError(t, err)
		require.Equal(t, w.fp, op.Fingerprint, key)
		require.JSONEq(t, string(content(key, w.worker).Payload), string(op.Payload), "%s: the winner's content", key)
		attempts, err := b.ledger.Attempts(b.ctx, key)
		require.NoError(t, err)
		if w.claim == nil {
			require.Equal(t, opledger.StatePending, op.State, key)
			require.Empty(t, attempts, key)
		} else {
			require.Equal(t, opledger.StateInProgress, op.State, key)
			require.Len(t, attempts, 1, key)
			require.Equal(t, w.claim.AttemptID, op.CurrentAttemptID, key)
		}
		events := b.events(t, key)
		recorded := 0
		for _, e := range events {
			if e == "recorded" {
				recorded++
			}
		}
		require.Equal(t, 1, recorded, "%s: %v", key, events)

		// Settle it, then repeat every worker's content.
		c := w.claim
		if c == nil {
			c, err = b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{})
			require.NoError(t, err)
		}
		_, err = b.ledger.Report(b.ctx, key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
			DestinationRef: "REF-" + key, Response: json.RawMessage(`{"id":1}`)})
		require.NoError(t, err)
		for other := range workers {
			in := content(key, other)
			_, err := b.ledger.Claim(b.ctx, key, opledger.ClaimOptions{Intent: &in})
			if other == w.worker {
				require.ErrorIs(t, err, opledger.ErrAlreadySucceeded, key)
				var se *opledger.StateError
				require.ErrorAs(t, err, &se)
				require.Equal(t, "REF-"+key, se.Operation.DestinationRef, "the saved result replayed")
				continue
			}
			require.ErrorIs(t, err, opledger.ErrFingerprintMismatch, "%s: worker %d's content after the winner's succeeded", key, other)
		}
		stored, err := b.ledger.Get(b.ctx, key)
		require.NoError(t, err)
		require.Equal(t, w.fp, stored.Fingerprint, key)
		require.Equal(t, opledger.StateSucceeded, stored.State, key)
	}
}
