// Package advance records the next step of a workflow as soon as one of
// its steps has succeeded, for the executor, the reconciler, the HTTP
// API's outcome route and the console's decisions, rather than leaving it
// to the server's periodic sweep.
package advance

import (
	"context"
	"errors"
	"log/slog"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/redact"
)

// WorkflowOf advances the workflow whose step is the operation key, if
// there is one. It logs what stops it: a next step that cannot be
// recorded is no failure (the workflow waits for a person to revise it;
// its status and the exception queue say so); any other error is a
// warning: the success is recorded, and the sweep advances the workflow
// later.
func WorkflowOf(ctx context.Context, l *opledger.Ledger, key string, log *slog.Logger) {
	_, err := l.AdvanceWorkflowOf(ctx, key)
	if _, stuck := errors.AsType[*opledger.StepError](err); stuck {
		log.InfoContext(ctx, "workflow cannot go on", "error", redact.Keys(key, err))
	} else if err != nil {
		log.WarnContext(ctx, "advance workflow", "error", redact.Keys(key, err))
	}
}
