package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestDestinationsRequiringApproval: every new operation for a listed
// destination waits for approval whatever its intent says, by every way
// one is recorded; one recorded before the list, pending and never sent,
// is moved to awaiting_approval by a repeat or a claim; one already
// dispatched keeps going; other destinations are not touched.
func TestDestinationsRequiringApproval(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			intent := func(key, dest string) opledger.Intent {
				return opledger.Intent{Key: key, Action: dest + ".create", Destination: dest, Payload: json.RawMessage(`{"n":1}`)}
			}
			const why = "destination crm requires approval of every operation"

			// Recorded before the destination required approval: three
			// pending and never sent, one whose attempt went out.
			clock := newManualClock()
			before, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			for _, key := range []string{"old:repeated", "old:claimed", "old:next"} {
				_, _, err = before.Record(ctx, intent(key, "crm"))
				require.NoError(t, err)
			}
			sentIn := intent("old:sent", "crm")
			c, err := before.Claim(ctx, sentIn.Key, opledger.ClaimOptions{Intent: &sentIn, Dispatch: true})
			require.NoError(t, err)
			_, err = before.Report(ctx, sentIn.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "503"})
			require.NoError(t, err)
			require.NoError(t, before.Close())

			l, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.Map, DestinationsRequiringApproval: []string{"crm", "payments"}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })

			awaiting := func(op *opledger.Operation, event string) {
				t.Helper()
				require.Equal(t, opledger.StateAwaitingApproval, op.State)
				require.True(t, op.RequiresApproval)
				tl, err := l.Timeline(ctx, op.Key)
				require.NoError(t, err)
				i := slices.IndexFunc(tl, func(e *opledger.TimelineEntry) bool { return e.Event == event })
				require.GreaterOrEqual(t, i, 0, "no %s in the timeline", event)
				require.Contains(t, tl[i].Evidence, why, "the timeline says what required the approval")
			}
			refusedClaim := func(err error) {
				t.Helper()
				var se *opledger.StateError
				require.ErrorAs(t, err, &se)
				require.Equal(t, opledger.StateAwaitingApproval, se.State)
			}

			// A new operation, though its intent does not ask.
			op, created, err := l.Record(ctx, intent("new:record", "crm"))
			require.NoError(t, err)
			require.True(t, created)
			awaiting(op, "recorded")
			// Other destinations are not touched.
			op, _, err = l.Record(ctx, intent("new:mail", "mail"))
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
			require.False(t, op.RequiresApproval)

			// A claim with an intent records it waiting and is refused.
			in := intent("new:claim", "crm")
			_, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
			refusedClaim(err)
			op, err = l.Get(ctx, in.Key)
			require.NoError(t, err)
			awaiting(op, "recorded")
			require.Zero(t, op.AttemptCount)

			// Recorded before: a repeat moves it, and so does a claim,
			// by key or as the next due.
			op, created, err = l.Record(ctx, intent("old:repeated", "crm"))
			require.NoError(t, err)
			require.False(t, created)
			awaiting(op, "approval required")
			_, err = l.Claim(ctx, "old:claimed", opledger.ClaimOptions{})
			refusedClaim(err)
			op, err = l.Get(ctx, "old:claimed")
			require.NoError(t, err)
			awaiting(op, "approval required")
			require.Zero(t, op.AttemptCount, "nothing was claimed")
			_, err = l.ClaimNext(ctx, opledger.ClaimNextOptions{Destinations: []string{"crm"}})
			require.ErrorIs(t, err, opledger.ErrNothingDue)
			op, err = l.Get(ctx, "old:next")
			require.NoError(t, err)
			awaiting(op, "approval required")
			tl, err := l.Timeline(ctx, "old:next")
			require.NoError(t, err)
			require.Equal(t, opledger.ActorSystem, tl[len(tl)-1].Actor)

			// Dispatched before the list: its retry goes on, unapproved.
			op, err = l.Get(ctx, "old:sent")
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
			clock.Advance(time.Hour) // past its backoff
			c, err = l.Claim(ctx, "old:sent", opledger.ClaimOptions{})
			require.NoError(t, err, "an operation already sent is not stopped half way")
			require.Equal(t, 2, c.Operation.AttemptCount)

			// Approved, it is claimed as any other.
			op, err = l.Get(ctx, "new:record")
			require.NoError(t, err)
			_, _, err = l.Approve(ctx, op.Key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "ana"})
			require.NoError(t, err)
			_, err = l.Claim(ctx, op.Key, opledger.ClaimOptions{})
			require.NoError(t, err)

			// A workflow's step waits in its turn, and shows that it will.
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
				{Name: "crm", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}}
			w, _, err := l.PutWorkflow(ctx, "onboard:1", spec)
			require.NoError(t, err)
			require.False(t, w.Steps[0].RequiresApproval)
			require.True(t, w.Steps[1].RequiresApproval, "the waiting step says it will need approval")
			first := w.Steps[0].Operation
			c, err = l.Claim(ctx, first.Key, opledger.ClaimOptions{Dispatch: true})
			require.NoError(t, err)
			_, err = l.Report(ctx, first.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "M1"})
			require.NoError(t, err)
			w, err = l.ResumeWorkflow(ctx, "onboard:1")
			require.NoError(t, err)
			require.NotNil(t, w.Steps[1].Operation)
			awaiting(w.Steps[1].Operation, "recorded")

			// An event's operation.
			receivePaid(t, l)
			op, err = l.Get(ctx, "order:7:charge")
			require.NoError(t, err)
			require.Equal(t, opledger.StateAwaitingApproval, op.State)
			tl, err = l.Timeline(ctx, op.Key)
			require.NoError(t, err)
			require.Contains(t, tl[0].Evidence, "destination payments requires approval of every operation")
		})
	}
}

// receivePaid receives a shop's paid event whose rule records one
// operation for destination payments, order:7:charge.
func receivePaid(t *testing.T, l *opledger.Ledger) {
	t.Helper()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: paid
    source: shop
    type: paid
    operations:
      - key: "order:{data.n}:charge"
        action: payments.capture
        destination: payments
`))
	require.NoError(t, err)
	res, err := l.ReceiveEvent(context.Background(), rules, opledger.Event{Source: "shop", EventID: "e1", Type: "paid", Payload: json.RawMessage(`{"n":7}`)})
	require.NoError(t, err)
	require.Len(t, res.Operations, 1)
}

// TestDestinationsRequiringApprovalChecked: Open refuses a name outside
// the destination syntax.
func TestDestinationsRequiringApprovalChecked(t *testing.T) {
	t.Parallel()
	_, err := opledger.Open(context.Background(), "sqlite:"+t.TempDir()+"/l.db",
		opledger.Options{DestinationsRequiringApproval: []string{"crm", "a b"}})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "DestinationsRequiringApproval: ")
	require.ErrorContains(t, err, "destination names take letters")
}

// TestOldestApprovalWait: Stats.OldestApprovalWaitSeconds is how long the
// operation awaiting approval the longest has waited: since it was
// recorded, or since the revision that awaits approval; another tenant's
// counts only across tenants; an approved one no longer counts.
func TestOldestApprovalWait(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := newManualClock()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			other, err := l.WithTenant("other")
			require.NoError(t, err)
			wait := func(l *opledger.Ledger, all bool) float64 {
				t.Helper()
				s, err := l.Stats(ctx, all)
				require.NoError(t, err)
				return s.OldestApprovalWaitSeconds
			}
			record := func(l *opledger.Ledger, key string, approval bool) {
				t.Helper()
				_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "payments.capture", Destination: "payments",
					Payload: json.RawMessage(`{"cents":100}`), RequiresApproval: approval})
				require.NoError(t, err)
			}

			record(l, "pending", false)
			require.Zero(t, wait(l, false), "none awaits approval")
			record(l, "a", true)
			clock.Advance(100 * time.Second)
			record(l, "b", true)
			record(other, "c", true)
			clock.Advance(20 * time.Second)
			require.Equal(t, 120.0, wait(l, false), "a, recorded 120 s ago")
			require.Equal(t, 20.0, wait(other, false), "the other tenant's own")
			require.Equal(t, 120.0, wait(l, true), "all tenants: a")

			// A revision awaits approval since it was made.
			_, _, err = l.Revise(ctx, "a", opledger.Revision{Payload: json.RawMessage(`{"cents":90}`), Version: 2})
			require.NoError(t, err)
			clock.Advance(5 * time.Second)
			require.Equal(t, 25.0, wait(l, false), "b, recorded 25 s ago; a was revised 5 s ago")

			// Approved ones no longer wait.
			for _, key := range []string{"a", "b"} {
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				_, _, err = l.Approve(ctx, key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "ana"})
				require.NoError(t, err)
			}
			require.Zero(t, wait(l, false))
			require.Equal(t, 25.0, wait(l, true), "all tenants: c")
		})
	}
}

// TestDestinationOwners: a new operation for a destination with an owner
// is recorded with that owner when its intent names none, by every way
// one is recorded, and its timeline says so; an owner the intent (or the
// workflow) names is kept; other destinations, and operations recorded
// before, are not touched.
func TestDestinationOwners(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			intent := func(key, dest, owner string) opledger.Intent {
				return opledger.Intent{Key: key, Action: dest + ".create", Destination: dest, Owner: owner, Payload: json.RawMessage(`{"n":1}`)}
			}
			before, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			_, _, err = before.Record(ctx, intent("old", "payments", ""))
			require.NoError(t, err)
			require.NoError(t, before.Close())

			l, err := opledger.Open(ctx, dsn, opledger.Options{DestinationOwners: map[string]string{"payments": "finance"}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			owner := func(key string) string {
				t.Helper()
				op, err := l.Get(ctx, key)
				require.NoError(t, err)
				return op.Owner
			}

			op, _, err := l.Record(ctx, intent("new", "payments", ""))
			require.NoError(t, err)
			require.Equal(t, "finance", op.Owner)
			tl, err := l.Timeline(ctx, "new")
			require.NoError(t, err)
			require.Contains(t, tl[0].Evidence, "owner finance, named for destination payments")
			_, _, err = l.Record(ctx, intent("own", "payments", "treasury"))
			require.NoError(t, err)
			require.Equal(t, "treasury", owner("own"), "the intent's own owner is kept")
			_, _, err = l.Record(ctx, intent("mail", "mail", ""))
			require.NoError(t, err)
			require.Empty(t, owner("mail"), "other destinations are not touched")
			_, _, err = l.Record(ctx, intent("old", "payments", ""))
			require.NoError(t, err)
			require.Empty(t, owner("old"), "recorded before: as it was")

			in := intent("claimed", "payments", "")
			_, err = l.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
			require.NoError(t, err)
			require.Equal(t, "finance", owner("claimed"))

			step := opledger.WorkflowStep{Name: "pay", Action: "payments.capture", Destination: "payments", Payload: json.RawMessage(`{}`)}
			_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{step}})
			require.NoError(t, err)
			require.Equal(t, "finance", owner(opledger.WorkflowStepKey("wf:1", "pay")))
			_, _, err = l.PutWorkflow(ctx, "wf:2", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{step}})
			require.NoError(t, err)
			require.Equal(t, "ops", owner(opledger.WorkflowStepKey("wf:2", "pay")), "the workflow's owner comes first")

			receivePaid(t, l)
			require.Equal(t, "finance", owner("order:7:charge"))
		})
	}
}

// TestDestinationOwnersChecked: Open refuses an owner list it cannot
// apply.
func TestDestinationOwnersChecked(t *testing.T) {
	t.Parallel()
	for msg, owners := range map[string]map[string]string{
		`DestinationOwners: destination "payments" names no owner`:        {"payments": " "},
		"DestinationOwners: invalid input: destination names take":        {"a b": "finance"},
		`DestinationOwners: destination "payments": invalid input: owner`: {"payments": "fin\x00ance"},
	} {
		_, err := opledger.Open(context.Background(), "sqlite:"+t.TempDir()+"/l.db", opledger.Options{DestinationOwners: owners})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, msg)
		require.ErrorContains(t, err, msg)
	}
}

// TestClaimNextPastAWaitingBacklog: a backlog of operations recorded
// before their destination required approval, more than one transaction
// of ClaimNext moves, does not hide the due operation behind it: one call
// moves them all to awaiting_approval and claims it.
func TestClaimNextPastAWaitingBacklog(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			clock := newManualClock()
			before, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.Map})
			require.NoError(t, err)
			const backlog = 45 // more than two transactions' worth
			for i := range backlog {
				_, _, err := before.Record(ctx, opledger.Intent{Key: fmt.Sprintf("refund:%02d", i), Action: "payments.refund",
					Destination: "payments", Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
				clock.Advance(time.Second)
			}
			_, _, err = before.Record(ctx, opledger.Intent{Key: "mail:1", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			require.NoError(t, before.Close())

			l, err := opledger.Open(ctx, dsn, opledger.Options{Clock: clock.Map, DestinationsRequiringApproval: []string{"payments"}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, l.Close()) })
			c, err := l.ClaimNext(ctx, opledger.ClaimNextOptions{})
			require.NoError(t, err, "the due operation behind the backlog is claimed")
			require.Equal(t, "mail:1", c.Operation.Key)
			counts, err := l.CountByState(ctx)
			require.NoError(t, err)
			require.Equal(t, backlog, counts[opledger.StateAwaitingApproval], "every one of the backlog waits for approval")
			require.Zero(t, counts[opledger.StatePending])
		})
	}
}
