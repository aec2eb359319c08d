package opledger

import (
	"context"
	"slices"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// RecoveryBuckets are the upper bounds of the operator recovery time
// histogram.
var RecoveryBuckets = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour,
	4 * time.Hour, 24 * time.Hour, 72 * time.Hour}

// AttemptCount counts the attempts of one destination that ended with one
// outcome (AttemptOpen for attempts still running).
type AttemptCount struct {
	// Destination is the attempts' destination.
	Destination string `json:"destination"`
	// Outcome is what they ended with: a reported Outcome,
	// AttemptAbandoned or AttemptLeaseExpired, or AttemptOpen.
	Outcome string `json:"outcome"`
	// Count is how many attempts did.
	Count int `json:"count"`
}

// Stats are the figures of DESIGN.md section 10. Each answers a different
// question, so none is derived from another.
type Stats struct {
	// OperationsByState counts operations in each state (all states present).
	OperationsByState map[State]int `json:"operations_by_state"`
	// Unresolved counts uncertain and held operations.
	Unresolved int `json:"unresolved"`
	// ReviewsOverdue counts held operations whose review_by has passed:
	// their owners have not decided in time.
	ReviewsOverdue int `json:"reviews_overdue"`
	// OldestDueSeconds is how long the longest-waiting due operation has
	// waited for a worker: of the pending operations due by now (their
	// retry time, if any, passed), the time since the earliest became due;
	// 0 when none is due. A figure that keeps growing means that nothing
	// claims them: no executor serves their destination (a misspelt
	// destination name, a destinations file left out), or the workers are
	// down or cannot keep up.
	OldestDueSeconds float64 `json:"oldest_due_seconds"`
	// OldestApprovalWaitSeconds is how long the operation awaiting
	// approval the longest has waited for an approver: the time since it
	// began to await approval (its Operation.StateSince: its recording,
	// or the revision that awaits approval), which no other write of it
	// restarts; 0 when none awaits. Nothing sends such an operation
	// before someone approves it, so one that keeps growing is work no
	// approver has seen.
	OldestApprovalWaitSeconds float64 `json:"oldest_approval_wait_seconds"`
	// StuckWorkflows counts the workflows that cannot go on by
	// themselves (see Ledger.StuckWorkflows): a step succeeded, and the
	// next cannot be recorded until a person revises it (or has its
	// destination serve the tenant again). They hold no
	// operation in any state, so no other figure counts them.
	StuckWorkflows int `json:"stuck_workflows"`
	// Attempts counts technical attempts by destination and outcome; the
	// attempts of compacted operations are included.
	Attempts []AttemptCount `json:"attempts"`
	// AttemptsTotal is the sum of the Attempts' counts.
	AttemptsTotal int `json:"attempts_total"`
	// ConfirmedEffects counts operations whose effect is confirmed
	// (succeeded), including compacted ones, even after their tombstones
	// are forgotten: it never goes down. It counts operations, not
	// records at the destination: a key repeated after its tombstone was
	// forgotten is a new operation, and confirmed again if it finds the
	// record the first one made.
	ConfirmedEffects int `json:"confirmed_effects"`
	// DuplicateEffects counts late successes with a second reference,
	// including those of compacted operations; it never goes down.
	DuplicateEffects int `json:"duplicate_effects"`
	// Recoveries counts operator decisions on uncertain or held operations.
	Recoveries int `json:"recoveries"`
	// RecoveryMeanSeconds and RecoveryP90Seconds summarise operator recovery
	// time: from entering uncertain or held to the decision.
	RecoveryMeanSeconds float64 `json:"recovery_mean_seconds"`
	RecoveryP90Seconds  float64 `json:"recovery_p90_seconds"`
	// RecoveryTotalSeconds is the sum of every recovery's time (a
	// histogram's sum, beside RecoveryBuckets).
	RecoveryTotalSeconds float64 `json:"recovery_total_seconds"`
	// RecoveryBuckets[i] counts recoveries that took at most
	// RecoveryBuckets[i] (cumulative, as in a Prometheus histogram).
	RecoveryBuckets []int `json:"recovery_buckets"`
}

// Stats returns the Ledger's tenant's figures, or every tenant's together
// when allTenants is true. Each call counts everything still in the
// ledger, so concurrent calls for the same figures share reads: a call
// made while a read is in progress waits for the next read, which all
// calls arriving meanwhile share. Every call still gets figures read
// after it was made.
func (l *Ledger) Stats(ctx context.Context, allTenants bool) (*Stats, error) {
	tenant := l.tenant
	if allTenants {
		tenant = ""
	}
	st, err := l.statsReads.do(ctx, tenant, func(ctx context.Context) (st *statsRead, err error) {
		st = &statsRead{}
		// One snapshot: a compaction committed between two of its counts
		// would count its operations both live and compacted.
		err = l.store.ViewSnapshot(ctx, func(ctx context.Context, r store.Reader) error {
			if st.Stats, err = r.Stats(ctx, tenant, RecoveryBuckets); err != nil {
				return err
			}
			now, err := l.now(ctx, r)
			if err != nil {
				return err
			}
			if st.reviewsOverdue, err = r.CountOverdueReviews(ctx, tenant, now); err != nil {
				return err
			}
			_, since, err := r.OldestDue(ctx, tenant, now)
			if err != nil {
				return err
			}
			if !since.IsZero() {
				st.oldestDue = max(now.Sub(since), 0)
			}
			if _, since, err = r.OldestAwaitingApproval(ctx, tenant); err != nil {
				return err
			}
			if !since.IsZero() {
				st.oldestApproval = max(now.Sub(since), 0)
			}
			st.stuckWorkflows = 0 // counted afresh should the read run again
			return l.eachStuckWorkflow(ctx, r, tenant, func(*Workflow) error {
				st.stuckWorkflows++
				return nil
			})
		})
		return st, err
	})
	if err != nil {
		return nil, err
	}
	out := &Stats{OperationsByState: map[State]int{}, Attempts: []AttemptCount{},
		ReviewsOverdue: st.reviewsOverdue, OldestDueSeconds: st.oldestDue.Seconds(), OldestApprovalWaitSeconds: st.oldestApproval.Seconds(),
		StuckWorkflows:   st.stuckWorkflows,
		ConfirmedEffects: st.ConfirmedEffects, DuplicateEffects: st.DuplicateEffects,
		Recoveries: st.Recoveries, RecoveryBuckets: slices.Clone(st.RecoveryBuckets),
		RecoveryP90Seconds: st.RecoveryP90.Seconds(), RecoveryTotalSeconds: st.RecoveryTotal.Seconds()}
	for _, s := range States {
		out.OperationsByState[s] = st.ByState[string(s)]
	}
	out.Unresolved = out.OperationsByState[StateUncertain] + out.OperationsByState[StateHeld]
	for _, a := range st.Attempts {
		outcome := a.Outcome
		if outcome == "" {
			outcome = AttemptOpen
		}
		out.Attempts = append(out.Attempts, AttemptCount{Destination: a.Destination, Outcome: outcome, Count: a.Count})
		out.AttemptsTotal += a.Count
	}
	if st.Recoveries > 0 {
		out.RecoveryMeanSeconds = st.RecoveryTotal.Seconds() / float64(st.Recoveries)
	}
	return out, nil
}

// statsRead is what one read of Stats gets from the store.
type statsRead struct {
	*store.Stats
	reviewsOverdue int
	oldestDue      time.Duration
	oldestApproval time.Duration
	stuckWorkflows int
}

// OldestDue returns the tenant's pending operation that has been due the
// longest without a worker claiming it, and how long it has waited (as
// Stats.OldestDueSeconds); nil and 0 when none is due. One that waits
// long is the sign of a destination nothing serves (a misspelt name, a
// destinations file left out) or of workers stopped or behind.
func (l *Ledger) OldestDue(ctx context.Context) (*Operation, time.Duration, error) {
	var op *Operation
	var waited time.Duration
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		now, err := l.now(ctx, r)
		if err != nil {
			return err
		}
		id, since, err := r.OldestDue(ctx, l.tenant, now)
		if err != nil || since.IsZero() {
			return err
		}
		if op, err = l.get(ctx, r, id.Key); err != nil {
			return err
		}
		waited = max(now.Sub(since), 0)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return op, waited, nil
}
