package opledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
)

// StuckWorkflows lists up to limit (1 to MaxWorkflowListLimit, the
// workflow list's bound: each is read whole) of the tenant's
// workflows that cannot go on by themselves: their current step
// succeeded, and the next one cannot be recorded (a *StepError: its
// content reads a reference or response member the earlier step did not
// give, or its destination no longer serves the tenant). Such a workflow
// is held with no operation of its own in any state, so the exception
// queue, which lists operations, does not show it; a person revises the
// step (ReviseWorkflowStep), or has the destination serve the tenant
// again (Options.DestinationTenants) and resumes it. Each is returned
// as GetWorkflow returns it, its Reason saying what is missing, in key
// order; Stats.StuckWorkflows counts them.
func (l *Ledger) StuckWorkflows(ctx context.Context, limit int) ([]*Workflow, error) {
	if limit < 1 || limit > MaxWorkflowListLimit {
		return nil, invalidInput("limit is 1 to %d", MaxWorkflowListLimit)
	}
	out := []*Workflow{}
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		return l.eachStuckWorkflow(ctx, r, l.tenant, func(w *Workflow) error {
			if out = append(out, w); len(out) == limit {
				return errListFull
			}
			return nil
		})
	})
	if err != nil && !errors.Is(err, errListFull) {
		return nil, fmt.Errorf("stuck workflows: %w", err)
	}
	return out, nil
}

// errListFull ends StuckWorkflows' walk: it has all it lists.
var errListFull = errors.New("list full")

// stuck reports whether w cannot go on by itself: held at a step that
// has no operation, because it cannot be recorded (see StuckWorkflows).
func (w *Workflow) stuck() bool {
	cur := w.Step(w.CurrentStep)
	return w.Status == WorkflowHeld && (cur == nil || cur.Operation == nil)
}

// eachStuckWorkflow calls fn, in (tenant, key) order, with each stuck
// workflow of tenant, or of every tenant when tenant is empty, as
// GetWorkflow shows it, all read with r; it ends at fn's first error. It
// reads whole the open workflows whose current step succeeded, a page of
// them at a time: the sweep moves the others on within its interval, so
// those are about as many as are stuck. Finding them visits the open
// workflows (every tenant's, or tenant's).
func (l *Ledger) eachStuckWorkflow(ctx context.Context, r store.Reader, tenant string, fn func(*Workflow) error) error {
	var after store.OperationID
	for {
		ids, err := r.WorkflowsReady(ctx, tenant, after, sweepPage)
		if err != nil {
			return err
		}
		for _, id := range ids {
			tl := &Ledger{shared: l.shared, tenant: id.Tenant}
			// An error names the workflow it is about, which the
			// caller, who asked for no key, would log: keys may carry
			// personal data.
			row, _, err := tl.getWorkflowRow(ctx, r, id.Key)
			if err != nil {
				return withoutKey(id.Key, err)
			}
			w, err := tl.workflowIn(ctx, r, row)
			if err != nil {
				return withoutKey(id.Key, err)
			}
			if w.stuck() {
				if err := fn(w); err != nil {
					return err
				}
			}
		}
		if len(ids) < sweepPage {
			return nil
		}
		after = ids[len(ids)-1]
	}
}

// withoutKey is err with key (and, for a step's key, its workflow's) left
// out of its text, as redact.Keys, for an error of a call that was given
// no key: what the error wraps is kept for errors.Is and errors.As.
func withoutKey(key string, err error) error {
	r := redact.Keys(key, err)
	if r == err {
		return err
	}
	return keylessError{msg: r.Error(), err: err}
}

// keylessError is an error's text without a key, wrapping the error.
type keylessError struct {
	msg string
	err error
}

func (e keylessError) Error() string { return e.msg }
func (e keylessError) Unwrap() error { return e.err }
