package opledger

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// WorkflowCancel is an operator's decision to give up on a workflow whose
// current step has no operation (one that is stuck, the step cannot be
// recorded, see StuckWorkflows, or whose step is due to be recorded) or
// whose current step's operation failed.
type WorkflowCancel struct {
	// Reason is required: it is what the next person reads.
	Reason string `json:"reason"`
	// Operator names who decided. Default "operator".
	Operator string `json:"operator,omitempty"`
	// SeenUpdatedAt, when set, is the workflow's UpdatedAt as the person
	// deciding saw it. If the workflow has changed since (a step revised,
	// recorded, approved), the decision is refused with ErrStaleDecision.
	SeenUpdatedAt time.Time `json:"seen_updated_at,omitzero"`
}

// WorkflowCancellation is the cancellation recorded on a workflow.
type WorkflowCancellation struct {
	// Step is the step the workflow was at: it and the steps after it
	// are never recorded (an operation of it, failed, stays failed).
	Step string `json:"step"`
	// Operator names who cancelled it: WorkflowCancel.Operator
	// ("operator" when it named none), followed by the credential of
	// WithCredential, if any.
	Operator string `json:"operator"`
	// Reason is the reason they gave (WorkflowCancel.Reason).
	Reason string `json:"reason"`
	// At is when it was cancelled, by the ledger's clock.
	At time.Time `json:"at"`
}

// workflowCancelledEvent is the timeline entry CancelWorkflow adds to the
// failed operation of the step it cancels the workflow at: by the
// operator, with the reason.
// The stores find it to leave that operation out of the exception queue
// (ListOptions.ExceptCancelled).
const workflowCancelledEvent = store.EventWorkflowCancelled

// cancelledError refuses a change to a cancelled workflow, or a second
// cancellation other than the first. It matches ErrInvalidState.
type cancelledError struct {
	workflow string
	c        *WorkflowCancellation
}

func (e *cancelledError) Error() string {
	return fmt.Sprintf("workflow %s was cancelled by %s at step %s (%s): it takes no other change",
		e.workflow, e.c.Operator, e.c.Step, textTime(e.c.At))
}

// Is matches ErrInvalidState.
func (e *cancelledError) Is(target error) bool { return target == ErrInvalidState }

// CancelWorkflow records an operator's decision to give up on a workflow
// whose current step has no operation, most often a stuck one (its next
// step cannot be recorded), or whose current step's operation failed
// (rejected, exhausted or cancelled): the workflow ends, cancelled, at
// that step; the steps not recorded yet are never recorded, and the
// workflow leaves StuckWorkflows (and Stats.StuckWorkflows) and the open
// workflows. Its steps already recorded are not changed. The decision is
// kept on the workflow (Workflow.Cancelled: step, operator, reason, time)
// and its Reason says it; the failed operation of that step, if any, has
// it in its timeline too (event "workflow cancelled", by the operator,
// with the reason), and Resolve refuses a retry of it (ErrInvalidState):
// it is not attempted again.
//
// A reason is required (ErrReasonRequired). A workflow whose current step
// has an operation that has not finished (awaiting approval, pending, in
// progress, uncertain or held) is refused (ErrInvalidState): cancel or
// settle that operation first (Resolve with DecisionCancel fails the step
// and the workflow with it, which can then be cancelled). A workflow
// changed since SeenUpdatedAt is refused with ErrStaleDecision. Repeating
// the cancellation that ended the workflow (same operator and reason)
// records nothing and answers replayed true; another is refused
// (ErrInvalidState).
func (l *Ledger) CancelWorkflow(ctx context.Context, key string, c WorkflowCancel) (w *Workflow, replayed bool, err error) {
	if err := ValidateKey(key); err != nil {
		return nil, false, err
	}
	if strings.TrimSpace(c.Reason) == "" {
		return nil, false, fmt.Errorf("cancel workflow: %w", ErrReasonRequired)
	}
	if err := checkLength("reason", c.Reason, maxReasonLength); err != nil {
		return nil, false, err
	}
	if err := checkLength("operator", c.Operator, maxNameLength); err != nil {
		return nil, false, err
	}
	if err := checkText("reason", c.Reason, "operator", c.Operator); err != nil {
		return nil, false, err
	}
	switch {
	case c.Operator == "":
		c.Operator = "operator"
	case strings.TrimSpace(c.Operator) == "":
		return nil, false, invalidInput("operator must name who decided, or be left out")
	}
	c.Operator = l.attributed(c.Operator)
	err = l.workflowTxn(ctx, key, func(ctx context.Context, tx store.Tx) error {
		replayed = false // a conflict runs this again
		row, def, err := l.getWorkflowRow(ctx, tx, key)
		if err != nil {
			return err
		}
		if done := def.Cancelled; done != nil {
			if done.Operator != c.Operator || done.Reason != c.Reason {
				return &cancelledError{workflow: key, c: done}
			}
			replayed = true
			w, err = l.workflowIn(ctx, tx, row)
			return err
		}
		cur, err := l.workflowIn(ctx, tx, row)
		if err != nil {
			return err
		}
		if !c.SeenUpdatedAt.IsZero() && !c.SeenUpdatedAt.Equal(cur.UpdatedAt) {
			return fmt.Errorf("cancel workflow %s: %w: it is %s, updated at %s, and was seen as updated at %s",
				key, ErrStaleDecision, cur.Status, cur.UpdatedAt.UTC().Format(time.RFC3339Nano),
				c.SeenUpdatedAt.UTC().Format(time.RFC3339Nano))
		}
		step := cur.Step(cur.CurrentStep)
		switch {
		case cur.Status == WorkflowSucceeded || step == nil:
			return fmt.Errorf("cancel workflow %s: %w: every step succeeded", key, ErrInvalidState)
		case step.Operation != nil && step.Operation.State != StateFailed:
			return fmt.Errorf("cancel workflow %s: %w: its step %s is %s, not finished; cancel or settle its operation %s first "+
				"(a cancelled operation fails the workflow, which can then be cancelled)",
				key, ErrInvalidState, step.Name, step.State, step.Key)
		}
		i, err := findStep(key, def, step.Name)
		if err != nil {
			return err
		}
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		if op := step.Operation; op != nil && !op.Tombstoned {
			// The failed step's own timeline says that its workflow was
			// given up on, by whom and why.
			_, refusal, err := l.decideIn(ctx, tx, l.tenant, step.Key, func(t *txn) error {
				if t.op == nil || State(t.op.State) != StateFailed {
					return fmt.Errorf("cancel workflow %s: step %s changed while read: %w", key, step.Name, store.ErrConflict)
				}
				t.note(c.Operator, "", workflowCancelledEvent, fmt.Sprintf("workflow %s cancelled at this step: %s", key, c.Reason))
				return nil
			})
			if err != nil {
				return err
			}
			if refusal != nil {
				return refusal
			}
		}
		def.Cancelled = &WorkflowCancellation{Step: step.Name, Operator: c.Operator, Reason: c.Reason, At: now}
		row.Done, row.CurrentStep, row.CurrentKey = true, i, step.Key
		if err := l.writeDef(ctx, tx, row, def); err != nil {
			return err
		}
		w, err = l.workflowIn(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return w, replayed, nil
}
