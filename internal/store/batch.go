package store

import (
	"context"
	"errors"
	"fmt"
	"time"
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
	// Previous, when set with UpdateOperation, is the operation as the
	// writer knows it is stored at PrevRevision, without having read it in
	// this transaction (a snapshot of its own earlier write). A store may
	// then write only the columns that differ from it: the revision
	// condition still guards the write, and every write of an operation
	// row changes its revision.
	Previous       *Operation
	AppendTimeline *TimelineEntry
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

// ConditionalWriter is implemented by stores that can write a transition
// decided without reading in the transaction: on a snapshot the caller
// kept of the operation (or on the assumption that its key is new), made
// valid by conditions on the writes. Stores use it to write the
// transitions of concurrent callers in shared transactions.
type ConditionalWriter interface {
	// WriteConditional calls decide with the store's clock, read inside the
	// transaction the writes go into, and writes what decide returns,
	// atomically: all of it or, when a condition fails, none of it and
	// ErrConflict. The writes must hold exactly one operation write, the
	// condition of all the others: an InsertOperation fails when the key
	// has a row or a tombstone, an UpdateOperation when the stored revision
	// is not PrevRevision. An error from decide is returned as it is, with
	// nothing written. decide may be called more than once (each call must
	// decide afresh from the time it is given) and must not block.
	//
	// The transaction may be shared with other callers' writes; each
	// caller's writes stay atomic and independent of the others', and
	// WriteConditional returns only once its writes are durable. Timeline
	// IDs are not set.
	WriteConditional(ctx context.Context, decide func(now time.Time) ([]Write, error)) error
}

// ErrNoOperationWrite is returned by WriteConditional when the writes do
// not hold exactly one operation write.
var ErrNoOperationWrite = errors.New("conditional write needs exactly one operation write")

// OperationWrite returns the one operation write of ws, or
// ErrNoOperationWrite.
func OperationWrite(ws []Write) (Write, error) {
	var found []Write
	for _, w := range ws {
		if w.InsertOperation != nil || w.UpdateOperation != nil {
			found = append(found, w)
		}
	}
	if len(found) != 1 {
		return Write{}, ErrNoOperationWrite
	}
	return found[0], nil
}
