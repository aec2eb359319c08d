package store

import (
	"context"
	"fmt"
)

// Write is one write of a batch: exactly one of its pointer fields is set.
type Write struct {
	InsertAttempt   *Attempt
	UpdateAttempt   *Attempt
	InsertOperation *Operation
	// UpdateOperation is written if the stored revision still equals
	// PrevRevision, as Tx.UpdateOperation does.
	UpdateOperation *Operation
	PrevRevision    int64
	AppendTimeline  *TimelineEntry
}

// WriteBatcher is implemented by transactions that can send several writes
// to the database in one round trip (pgstore pipelines them). WriteBatch
// performs ws in order, with the effects and errors the single Tx calls
// would have, and stops at the first error. It may hold the writes back
// until the transaction's next statement or its commit: their errors then
// surface there, from Store.Update at the latest, and the transaction
// commits none of its writes. Callers must not rely on results of ws (such
// as TimelineEntry.ID) before then.
type WriteBatcher interface {
	WriteBatch(ctx context.Context, ws []Write) error
}

// WriteAll performs ws in order on tx: as one batch where tx is a
// WriteBatcher, otherwise one call each.
func WriteAll(ctx context.Context, tx Tx, ws []Write) error {
	if len(ws) == 0 {
		return nil
	}
	if b, ok := tx.(WriteBatcher); ok {
		return b.WriteBatch(ctx, ws)
	}
	return WriteEach(ctx, tx, ws)
}

// WriteEach performs ws in order with one Tx call each.
func WriteEach(ctx context.Context, tx Tx, ws []Write) error {
	for _, w := range ws {
		var err error
		switch {
		case w.InsertAttempt != nil:
			err = tx.InsertAttempt(ctx, w.InsertAttempt)
		case w.UpdateAttempt != nil:
			err = tx.UpdateAttempt(ctx, w.UpdateAttempt)
		case w.InsertOperation != nil:
			err = tx.InsertOperation(ctx, w.InsertOperation)
		case w.UpdateOperation != nil:
			err = tx.UpdateOperation(ctx, w.UpdateOperation, w.PrevRevision)
		case w.AppendTimeline != nil:
			err = tx.AppendTimeline(ctx, w.AppendTimeline)
		default:
			err = fmt.Errorf("write batch: empty write")
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// OperationAttemptGetter is implemented by transactions that can read an
// operation and one of its attempts in one round trip.
type OperationAttemptGetter interface {
	// GetOperationAndAttempt is Tx.GetOperation (locking the row where the
	// store locks it) followed by Tx.GetAttempt. The attempt is nil when it
	// does not exist; a missing operation is ErrNotFound.
	GetOperationAndAttempt(ctx context.Context, tenant, key, attemptID string) (*Operation, *Attempt, error)
}
