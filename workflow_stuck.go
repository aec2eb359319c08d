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
// order.
func (l *Ledger) StuckWorkflows(ctx context.Context, limit int) ([]*Workflow, error) {
	if limit < 1 || limit > MaxListLimit {
		return nil, invalidInput("limit is 1 to %d", MaxListLimit)
	}
	var out []*Workflow
	// The open workflows whose current step succeeded, of every tenant in
	// (tenant, key) order: this tenant's come from just after its empty
	// key. The sweep moves the others on within its interval, so few are
	// read besides the stuck ones.
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, _ time.Time, after store.OperationID) ([]store.OperationID, error) {
		if after == (store.OperationID{}) {
			after = store.OperationID{Tenant: l.tenant}
		}
		return r.WorkflowsReady(ctx, after, sweepPage)
	}, func(id store.OperationID) error {
		if id.Tenant != l.tenant {
			return errListFull // past this tenant's
		}
		w, err := l.GetWorkflow(ctx, id.Key)
		if errors.Is(err, ErrNotFound) {
			return nil // forgotten by retention since listed
		}
		if err != nil {
			return err
		}
		if cur := w.Step(w.CurrentStep); w.Status == WorkflowHeld && (cur == nil || cur.Operation == nil) {
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

// errListFull ends StuckWorkflows' sweep: it has all it lists.
var errListFull = errors.New("list full")
