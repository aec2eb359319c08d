package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// testRetention: what Compact keeps whole, what a tombstone still shows,
// and that it pages past what it keeps.
func testRetention(t *testing.T, h Harness) {
	// The recovery rows keep no operation key: new ones are written
	// without it, and retention clears the key of those an older release
	// wrote once they are older than the tombstone retention (when the
	// operation and its tombstone are gone), while the recovery figures,
	// which never go down, stay as they were.
	t.Run("RecoveriesKeepNoKey", func(t *testing.T) {
		t.Parallel()
		require.NotNil(t, h.LegacyRecovery, "the harness must give LegacyRecovery")
		require.NotNil(t, h.RecoveryKeys, "the harness must give RecoveryKeys")
		b := setupRetention(t, h)
		b.uncertain(t, "r1")
		b.clock.Advance(10 * time.Minute)
		_, _, err := b.ledger.Resolve(b.ctx, "r1", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "H1", Reason: "found it"})
		require.NoError(t, err)
		b.uncertain(t, "r2")
		b.clock.Advance(2 * time.Hour)
		_, _, err = b.ledger.Resolve(b.ctx, "r2", opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: "H2", Reason: "found it"})
		require.NoError(t, err)
		require.Zero(t, h.RecoveryKeys(t, b.dsn), "a decision stores no key with its recovery")

		// Rows an older release wrote, with their keys.
		now := b.clock.Func(time.Now())
		h.LegacyRecovery(t, b.dsn, opledger.DefaultTenant, "old:1", now.Add(-time.Hour), 30*time.Second)
		h.LegacyRecovery(t, b.dsn, opledger.DefaultTenant, "old:2", now.Add(-time.Hour), 3*24*time.Hour)
		h.LegacyRecovery(t, b.dsn, "other", "old:3", now.Add(-time.Hour), time.Hour)
		require.Equal(t, 3, h.RecoveryKeys(t, b.dsn))
		figures := func() []any {
			t.Helper()
			st, err := b.ledger.Stats(b.ctx, true)
			require.NoError(t, err)
			return []any{st.Recoveries, st.RecoveryMeanSeconds, st.RecoveryP90Seconds, st.RecoveryTotalSeconds, st.RecoveryBuckets}
		}
		before := figures()
		require.Equal(t, 5, before[0])

		// Within the tombstone retention, the operations' tombstones
		// are kept, and so are the old rows' keys.
		b.clock.Advance(retention + day)
		_, err = b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 3, h.RecoveryKeys(t, b.dsn))
		require.Equal(t, before, figures())

		b.clock.Advance(tombstoneRetention)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 2, res.Forgotten, "the tombstones of r1 and r2")
		require.Zero(t, h.RecoveryKeys(t, b.dsn), "no recovery row keeps a key")
		require.Equal(t, before, figures(), "the recovery figures never go down")
	})
	t.Run("KeepsStepsOfUnfinishedWorkflows", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		b.putReadingWorkflow(t)
		b.succeedStep(t, "wf/a", "T-1")
		_, err := b.ledger.AdvanceWorkflowOf(b.ctx, "wf/a")
		require.NoError(t, err)
		b.inState(t, "plain", opledger.StateSucceeded)

		// Step b waits for its approval past the retention period.
		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned, "the operation of no workflow")
		a, err := b.ledger.Get(b.ctx, "wf/a")
		require.NoError(t, err)
		require.False(t, a.Tombstoned, "a later step reads its response")

		b.approveStepB(t)

		// Once the workflow has finished, its steps go as any operation.
		b.succeedStep(t, "wf/c", "L-1")
		w, err := b.ledger.AdvanceWorkflowOf(b.ctx, "wf/c")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		b.clock.Advance(retention + day)
		res, err = b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 3, res.Tombstoned)
		a, err = b.ledger.Get(b.ctx, "wf/a")
		require.NoError(t, err)
		require.True(t, a.Tombstoned)
	})

	// A key under a workflow's that names none of its steps is an
	// ordinary operation (StepKeysBelongToTheWorkflow): compacted as
	// one, it must not decide for the workflow's steps in its batch.
	t.Run("KeepsStepsBesideKeysThatNameNoStep", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		b.putReadingWorkflow(t)
		// The ordinary operation finishes first, so that it comes first
		// in retention's batch.
		b.inState(t, "wf/notes", opledger.StateSucceeded)
		b.clock.Advance(time.Minute)
		b.succeedStep(t, "wf/a", "T-1")
		_, err := b.ledger.AdvanceWorkflowOf(b.ctx, "wf/a")
		require.NoError(t, err)

		// Step b waits for its approval past the retention period.
		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned, "the operation that is no step")
		notes, err := b.ledger.Get(b.ctx, "wf/notes")
		require.NoError(t, err)
		require.True(t, notes.Tombstoned)
		a, err := b.ledger.Get(b.ctx, "wf/a")
		require.NoError(t, err)
		require.False(t, a.Tombstoned, "a later step reads its response")

		b.approveStepB(t)
	})

	t.Run("TombstoneShowsDuplicateEffectsAndAttempts", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		old := b.claimed(t, "k")
		b.clock.Advance(11 * time.Second)
		_, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		cur, err := b.ledger.Claim(b.ctx, "k", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = b.ledger.Report(b.ctx, "k", cur.AttemptID, cur.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A"})
		require.NoError(t, err)
		_, err = b.ledger.Report(b.ctx, "k", old.AttemptID, old.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "B"})
		require.ErrorIs(t, err, opledger.ErrStaleFencingToken)

		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned)
		op, err := b.ledger.Get(b.ctx, "k")
		require.NoError(t, err)
		require.True(t, op.Tombstoned)
		require.Equal(t, 1, op.DuplicateEffects, "the incident outlives the timeline that told it")
		require.Equal(t, 2, op.AttemptCount, "the attempts are gone, not their count")
	})

	t.Run("PagesPastWhatItKeeps", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		// Three workflows, every step succeeded but the last: more kept
		// steps than a page of compaction (200), all finished before the
		// operation after them.
		const workflows, steps = 3, 70
		spec := opledger.WorkflowSpec{Owner: "ops"}
		for i := range steps {
			spec.Steps = append(spec.Steps, opledger.WorkflowStep{
				Name: fmt.Sprintf("s%02d", i), Action: "task.create", Destination: "crm", Payload: []byte(`{}`)})
		}
		for w := range workflows {
			wk := fmt.Sprintf("wf%d", w)
			_, _, err := b.ledger.PutWorkflow(b.ctx, wk, spec)
			require.NoError(t, err)
			for i := range steps - 1 {
				key := fmt.Sprintf("%s/s%02d", wk, i)
				b.succeedStep(t, key, "R")
				_, err := b.ledger.AdvanceWorkflowOf(b.ctx, key)
				require.NoError(t, err)
			}
		}
		b.clock.Advance(time.Second)
		b.inState(t, "later", opledger.StateSucceeded)
		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned, "the operation after the kept steps")
		op, err := b.ledger.Get(b.ctx, "later")
		require.NoError(t, err)
		require.True(t, op.Tombstoned)
	})
}

// putReadingWorkflow records workflow wf of the retention tests: step a,
// then b, which waits for its approval, then c, which reads a's
// response.
func (b *bundle) putReadingWorkflow(t *testing.T) {
	t.Helper()
	yes := true
	_, _, err := b.ledger.PutWorkflow(b.ctx, "wf", opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "task.create", Destination: "crm", Payload: []byte(`{"n":1}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: []byte(`{"n":2}`), RequiresApproval: &yes},
		{Name: "c", Action: "task.link", Destination: "crm", Payload: []byte(`{"url":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
}

// approveStepB approves and succeeds step b of putReadingWorkflow's
// workflow, once a succeeded with the reference T-1, and checks that
// step c is recorded with a's response: a was kept whole for it.
func (b *bundle) approveStepB(t *testing.T) {
	t.Helper()
	step, err := b.ledger.Get(b.ctx, "wf/b")
	require.NoError(t, err)
	_, _, err = b.ledger.Approve(b.ctx, "wf/b", opledger.Approval{Version: step.Version, Fingerprint: step.Fingerprint, Approver: "boss"})
	require.NoError(t, err)
	b.succeedStep(t, "wf/b", "M-1")
	_, err = b.ledger.AdvanceWorkflowOf(b.ctx, "wf/b")
	require.NoError(t, err, "step c is recorded with step a's response")
	c, err := b.ledger.Get(b.ctx, "wf/c")
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"https://crm.example/tasks/T-1"}`, string(c.Payload))
}
