package opledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// StuckWorkflows lists up to limit (1 to MaxListLimit) of the tenant's
// workflows that cannot go on by themselves: their current step
// succeeded, and the next one cannot be recorded (a *StepError: its
// content reads a reference or response member the earlier step did not
// give). Such a workflow is held with no operation of its own in any
// state, so the exception queue, which lists operations, does not show
// it; a person revises the step (ReviseWorkflowStep). Each is returned
// as GetWorkflow returns it, its Reason saying what is missing, in key
// order; Stats.StuckWorkflows counts them.
func (l *Ledger) StuckWorkflows(ctx context.Context, limit int) ([]*Workflow, error) {
	if limit < 1 || limit > MaxListLimit {
		return nil, invalidInput("limit is 1 to %d", MaxListLimit)
	}
	var out []*Workflow
	// The tenant's open workflows whose current step succeeded, in key
	// order. The sweep moves the others on within its interval, so few
	// are read besides the stuck ones.
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, _ time.Time, after store.OperationID) ([]store.OperationID, error) {
		return r.WorkflowsReady(ctx, l.tenant, after, sweepPage)
	}, func(id store.OperationID) error {
		w, err := l.GetWorkflow(ctx, id.Key)
		if errors.Is(err, ErrNotFound) {
			return nil // forgotten by retention since listed
		}
		if err != nil {
			return err
		}
		if w.stuck() {
			if out = append(out, w); len(out) == limit {
				return errListFull
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, errListFull) {
		return nil, fmt.Errorf("stuck workflows: %w", err)
	}
	return out, nil
}

// stuck reports whether w cannot go on by itself: held at a step that
// has no operation, because it cannot be recorded (see StuckWorkflows).
func (w *Workflow) stuck() bool {
	cur := w.Step(w.CurrentStep)
	return w.Status == WorkflowHeld && (cur == nil || cur.Operation == nil)
}

// countStuckWorkflows counts, with r, the stuck workflows of tenant, or of
// every tenant when tenant is empty (Stats.StuckWorkflows). It reads the
// open workflows whose current step succeeded, a page at a time; the
// sweep moves the others on within its interval, so the count reads
// about as many workflows whole as there are stuck ones. Finding them
// visits the open workflows (every tenant's, or tenant's).
func (l *Ledger) countStuckWorkflows(ctx context.Context, r store.Reader, tenant string) (int, error) {
	n := 0
	var after store.OperationID
	for {
		ids, err := r.WorkflowsReady(ctx, tenant, after, sweepPage)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			tl := &Ledger{shared: l.shared, tenant: id.Tenant}
			row, _, err := tl.getWorkflowRow(ctx, r, id.Key)
			if err != nil {
				return 0, err
			}
			w, err := tl.workflowIn(ctx, r, row)
			if err != nil {
				return 0, err
			}
			if w.stuck() {
				n++
			}
		}
		if len(ids) < sweepPage {
			return n, nil
		}
		after = ids[len(ids)-1]
	}
}

// errListFull ends StuckWorkflows' sweep: it has all it lists.
var errListFull = errors.New("list full")
