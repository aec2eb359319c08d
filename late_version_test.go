package opledger_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestLateReportOnEarlierVersion: attempt 1 of version 1 lost its lease
// without a dispatch mark, the operation was revised to version 2 and
// approved, and then attempt 1 reports that its call acted (or may have).
// That effect is version 1's: it must not settle version 2, nor leave
// version 2 to be sent or looked for unseen. The operation is held for a
// person whatever was decided before the report came (before, a report
// arriving after the approval closed version 2 as succeeded with version
// 1's reference, and version 2 was never sent). Attempts say which
// version they were claimed for.
func TestLateReportOnEarlierVersion(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })

			// revised leaves key at version 2, approved, with attempt 1
			// of version 1 given up as never sent; its claim is returned.
			revised := func(key string) *opledger.Claim {
				t.Helper()
				in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"amount":100}`)}
				c1, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in})
				require.NoError(t, err)
				clock.Advance(11 * time.Second)
				_, err = l.ExpireLeases(ctx)
				require.NoError(t, err)
				op, _, err := l.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`{"amount":90}`), Version: 2, Actor: "eve"})
				require.NoError(t, err)
				_, _, err = l.Approve(ctx, key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
				require.NoError(t, err)
				return c1
			}
			report := func(key string, c *opledger.Claim, r opledger.Report) {
				t.Helper()
				_, err := l.Report(ctx, key, c.AttemptID, c.FencingToken, r)
				var stale *opledger.StaleError
				require.ErrorAs(t, err, &stale, "a late report is refused, and recorded")
			}
			held := func(key string) *opledger.Operation {
				t.Helper()
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateHeld, op.State, "%s: %+v", key, op)
				require.Empty(t, op.DestinationRef, "version 1's reference does not settle version 2")
				require.Equal(t, int64(2), op.Version)
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				last := tl[len(tl)-1]
				require.Equal(t, "late report on an earlier version", last.Event)
				require.Contains(t, last.Evidence, "attempt 1 was claimed for version 1")
				require.Contains(t, last.Evidence, "the operation holds version 2 now")
				return op
			}

			// Approved, not claimed yet: a late success holds it.
			c1 := revised("pending")
			report("pending", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			held("pending")
			attempts, err := l.Attempts(ctx, "pending")
			require.NoError(t, err)
			require.Len(t, attempts, 1)
			require.Equal(t, int64(1), attempts[0].Version)
			require.Equal(t, "R-v1", attempts[0].DestinationRef, "the report is kept on its attempt")
			// The person decides; the decisions work from held.
			_, _, err = l.Resolve(ctx, "pending", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "R-v1",
				Reason: "version 1 stands", Operator: "maria"})
			require.NoError(t, err)

			// A late uncertain report holds it too, instead of making it
			// uncertain, where version 2 would be looked for.
			c1 = revised("uncertain")
			report("uncertain", c1, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			held("uncertain")

			// Version 2 claimed, not dispatched: its attempt is ended
			// unsent, and its dispatch refused.
			c1 = revised("claimed")
			c2, err := l.Claim(ctx, "claimed", opledger.ClaimOptions{})
			require.NoError(t, err)
			report("claimed", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			held("claimed")
			_, err = l.Dispatch(ctx, "claimed", c2.AttemptID, c2.FencingToken)
			require.ErrorContains(t, err, "it was never sent: an attempt on an earlier version reported that its call acted, and the operation is held for a person",
				"version 2's call must not start, and its worker is told why")
			attempts, err = l.Attempts(ctx, "claimed")
			require.NoError(t, err)
			require.Len(t, attempts, 2)
			require.Equal(t, int64(2), attempts[1].Version)
			require.Equal(t, opledger.AttemptAbandoned, attempts[1].Outcome)
			require.Contains(t, attempts[1].Error, "not sent: an attempt on an earlier version reported that its call acted")

			// Version 2 dispatched: both calls may have acted; the
			// timeline says so, and version 2's own end decides. A
			// success is the operation's, version 1's effect a second
			// one; anything else (here a retryable answer, a lease that
			// ran out) is held, never sent again, failed or looked up.
			dispatched := func(key string) *opledger.Claim {
				t.Helper()
				c1 := revised(key)
				c2, err := l.Claim(ctx, key, opledger.ClaimOptions{Dispatch: true})
				require.NoError(t, err)
				report(key, c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, opledger.StateInProgress, op.State)
				require.Empty(t, op.DestinationRef, "version 2's dispatch is not settled by version 1's effect")
				tl, err := l.Timeline(ctx, key)
				require.NoError(t, err)
				require.Contains(t, tl[len(tl)-1].Evidence, "so both calls may have acted: check the destination for both")
				return c2
			}
			c2 = dispatched("dispatched")
			op, err := l.Report(ctx, "dispatched", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v2"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects, "version 1's record is a second effect, as in the other order (below)")

			c2 = dispatched("dispatched-retryable")
			op, err = l.Report(ctx, "dispatched-retryable", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State, "not pending: version 2 is not sent again on top of version 1's effect")
			tl, err := l.Timeline(ctx, "dispatched-retryable")
			require.NoError(t, err)
			require.Equal(t, "held after a late report on an earlier version", tl[len(tl)-1].Event)
			require.Contains(t, tl[len(tl)-1].Evidence, "attempt 2 answered retryable; 503; attempt 1, of version 1, had reported that its call acted (destination ref R-v1)")

			dispatched("dispatched-lease") // its attempt never reports
			clock.Advance(11 * time.Second)
			_, err = l.ExpireLeases(ctx)
			require.NoError(t, err)
			op, err = l.Get(ctx, "dispatched-lease")
			require.NoError(t, err)
			require.Equal(t, opledger.StateHeld, op.State, "not uncertain: a lookup of version 2 would not weigh version 1's effect")

			// Held for version 1's record, then a lookup (begun before)
			// finds version 2's: it succeeds, and version 1's record is
			// the second effect, counted.
			c1 = revised("held-then-found")
			c2, err = l.Claim(ctx, "held-then-found", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "held-then-found", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			report("held-then-found", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			held("held-then-found")
			op, _, err = l.Reconcile(ctx, "held-then-found", opledger.Finding{Found: true, Matches: true, DestinationRef: "R-v2", Authoritative: true, AttemptCount: 2})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects, "version 1's record is counted however version 2's is confirmed")

			// Version 2's late success kept while a retry (attempt 3)
			// holds the operation settles it whatever attempt 3 says:
			// version 1's record is counted then too.
			c1 = revised("confirmed-while-held")
			c2, err = l.Claim(ctx, "confirmed-while-held", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			clock.Advance(11 * time.Second)
			_, err = l.ExpireLeases(ctx) // attempt 2: uncertain
			require.NoError(t, err)
			_, _, err = l.Resolve(ctx, "confirmed-while-held", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "nothing at the CRM", Operator: "maria"})
			require.NoError(t, err)
			c3, err := l.Claim(ctx, "confirmed-while-held", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			report("confirmed-while-held", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			report("confirmed-while-held", c2, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v2"})
			op, err = l.Report(ctx, "confirmed-while-held", c3.AttemptID, c3.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects)

			// Once version 2 succeeded, version 1's late success is a
			// second effect, counted.
			c1 = revised("succeeded")
			c2, err = l.Claim(ctx, "succeeded", opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, "succeeded", c2.AttemptID, c2.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v2"})
			require.NoError(t, err)
			report("succeeded", c1, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
			op, err = l.Get(ctx, "succeeded")
			require.NoError(t, err)
			require.Equal(t, opledger.StateSucceeded, op.State)
			require.Equal(t, "R-v2", op.DestinationRef)
			require.Equal(t, 1, op.DuplicateEffects)
		})
	}
}

// TestLateReportOfAttemptBeforeVersions: an attempt claimed before
// attempts kept their version (0, as every attempt is after the upgrade
// to migration 026) is of an earlier version when the operation was
// revised after its claim, which its timeline says: its late success
// holds the approved version 2 as a versioned attempt's does.
func TestLateReportOfAttemptBeforeVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newManualClock()
	path := filepath.Join(t.TempDir(), "l.db")
	l, err := opledger.Open(ctx, "sqlite:"+path, opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	for _, key := range []string{"revised", "not-revised"} {
		in := opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"amount":100}`)}
		c1, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		db, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		_, err = db.Exec(`UPDATE attempts SET version = 0 WHERE id = ?`, c1.AttemptID)
		require.NoError(t, err)
		require.NoError(t, db.Close())
		clock.Advance(11 * time.Second)
		_, err = l.ExpireLeases(ctx)
		require.NoError(t, err)
		if key == "revised" {
			op, _, err := l.Revise(ctx, key, opledger.Revision{Payload: json.RawMessage(`{"amount":90}`), Version: 2, Actor: "eve"})
			require.NoError(t, err)
			_, _, err = l.Approve(ctx, key, opledger.Approval{Version: 2, Fingerprint: op.Fingerprint, Approver: "lead"})
			require.NoError(t, err)
		}
		_, err = l.Report(ctx, key, c1.AttemptID, c1.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R-v1"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)
		op, err := l.Get(ctx, key)
		require.NoError(t, err)
		if key == "revised" {
			require.Equal(t, opledger.StateHeld, op.State)
			tl, err := l.Timeline(ctx, key)
			require.NoError(t, err)
			require.Contains(t, tl[len(tl)-1].Evidence, "attempt 1 was claimed for an earlier version")
			continue
		}
		require.Equal(t, opledger.StateSucceeded, op.State, "never revised: the late success is its own, as before")
		require.Equal(t, "R-v1", op.DestinationRef)
	}
}

// TestLateReportOnEarlierVersionMasked: a late report on an earlier
// version may quote that version's sensitive values, which the revision
// replaced. They are masked in what is stored and shown, as the current
// payload's are (before, only the current payload's values were, and
// version 1's address was shown in the attempt, the timeline and the
// reference). So too when the field became sensitive only after the
// revision (a repeat of the new content names it).
func TestLateReportOnEarlierVersionMasked(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		for _, later := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/sensitive-later=%v", st.Name, later), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				clock := newManualClock()
				l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map, Lease: 10 * time.Second})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				in := opledger.Intent{Key: "k", Action: "send", Destination: "mail", Payload: json.RawMessage(`{"to":"first.person@example.com"}`)}
				if !later {
					in.SensitiveFields = []string{"to"}
				}
				c1, err := l.Claim(ctx, "k", opledger.ClaimOptions{Intent: &in})
				require.NoError(t, err)
				clock.Advance(11 * time.Second)
				_, err = l.ExpireLeases(ctx)
				require.NoError(t, err)
				second := json.RawMessage(`{"to":"second.person@example.com"}`)
				_, _, err = l.Revise(ctx, "k", opledger.Revision{Payload: second, Version: 2, Actor: "eve"})
				require.NoError(t, err)
				if later {
					_, _, err = l.Record(ctx, opledger.Intent{Key: "k", Action: "send", Destination: "mail", Payload: second, Version: 2,
						SensitiveFields: []string{"to"}})
					require.NoError(t, err)
				}
				_, err = l.Report(ctx, "k", c1.AttemptID, c1.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain,
					DestinationRef: "msg-first.person@example.com", Error: "timeout sending to first.person@example.com"})
				require.ErrorAs(t, err, new(*opledger.StaleError))

				op, err := l.Get(ctx, "k")
				require.NoError(t, err)
				require.Equal(t, "held", string(op.State))
				attempts, err := l.Attempts(ctx, "k")
				require.NoError(t, err)
				tl, err := l.Timeline(ctx, "k")
				require.NoError(t, err)
				// As stored: the errors and evidence were masked when written.
				require.Equal(t, "timeout sending to ***", attempts[0].Error)
				var stored strings.Builder
				for _, e := range tl {
					stored.WriteString(e.Evidence + "\n")
				}
				require.NotContains(t, stored.String(), "first.person")
				// As shown: the reference too.
				var shown strings.Builder
				for _, v := range []any{op.Masked(), op.MaskedAttempts(attempts), tl} {
					b, err := json.Marshal(v)
					require.NoError(t, err)
					shown.Write(b)
				}
				for _, secret := range []string{"first.person", "second.person"} {
					require.NotContains(t, shown.String(), secret)
				}
				require.Equal(t, "timeout sending to ***", op.MaskText("timeout sending to first.person@example.com"))
			})
		}
	}
}
