package sqlitestore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// WriteConditional implements store.ConditionalWriter. Its writes go
// through group commit like any other, and where the batch allows it they
// run without a savepoint of their own (runConditional): the operation's
// write, which carries the condition, goes first, so a failed condition
// leaves nothing to undo.
func (s *Store) WriteConditional(ctx context.Context, decide func(now time.Time) ([]store.Write, error)) error {
	return s.settled(s.submit(&writeReq{ctx: ctx, decide: decide, done: make(chan writeResult, 1),
		fn: func(ctx context.Context, tx store.Tx) error {
			return writeConditional(ctx, tx.(*sqlTx), decide, new(progress))
		}}))
}

// runConditional runs a conditional request in the batch's transaction
// without a savepoint. undo is true when it failed in a way only a
// savepoint of its own could have cleaned up: after writing something, or
// with an error from SQLite that may have rolled back the whole
// transaction. The batch must then be rolled back and run again with
// savepoints (decide may be called again, per store.ConditionalWriter). A
// failed condition needs no undo: it is the first write, and SQLite backs
// out a statement that breaks a constraint, leaving the transaction open.
func runConditional(r *writeReq, tx *sqlTx) (res writeResult, undo bool) {
	var p progress
	res = runFn(r.ctx, func(ctx context.Context, tx store.Tx) error {
		return writeConditional(ctx, tx.(*sqlTx), r.decide, &p)
	}, tx)
	switch {
	case res.panicked != nil:
		return res, p.ran
	case res.err != nil:
		return res, p.wrote || (p.ran && !errors.Is(res.err, store.ErrConflict))
	}
	return res, false
}

// progress is how far writeConditional went.
type progress struct {
	ran   bool // it ran a statement
	wrote bool // a statement of it changed the database
}

// writeConditional decides with the transaction's clock and writes the
// decision: the operation's write first (when its condition fails nothing
// has been written), then the others in their order, consecutive timeline
// entries in one statement. It keeps p current as it goes.
func writeConditional(ctx context.Context, tx *sqlTx, decide func(now time.Time) ([]store.Write, error), p *progress) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	ws, err := decide(now)
	if err != nil {
		return err
	}
	ow, err := store.OperationWrite(ws)
	if err != nil {
		return err
	}
	p.ran = true
	if op := ow.InsertOperation; op != nil {
		err = tx.insertNewOperation(ctx, op)
	} else {
		op := ow.UpdateOperation
		if prev := ow.Previous; prev != nil && prev.Revision == ow.PrevRevision && prev.Tenant == op.Tenant && prev.Key == op.Key {
			// The row as stored: the update sets only what changes.
			args, err := opArgs(prev)
			if err != nil {
				return err
			}
			tx.keep(prev, args, rowRef{})
		}
		err = tx.UpdateOperation(ctx, op, ow.PrevRevision)
	}
	if err != nil {
		return err
	}
	p.wrote = true
	for i := 0; i < len(ws); i++ {
		switch w := ws[i]; {
		case w.InsertOperation != nil, w.UpdateOperation != nil:
		case w.AppendTimeline != nil:
			entries := []*store.TimelineEntry{w.AppendTimeline}
			for i+1 < len(ws) && ws[i+1].AppendTimeline != nil {
				i++
				entries = append(entries, ws[i].AppendTimeline)
			}
			if err := tx.appendTimelines(ctx, entries); err != nil {
				return err
			}
		default:
			if err := store.WriteEach(ctx, tx, ws[i:i+1]); err != nil {
				return err
			}
		}
	}
	return nil
}

// insertNewOperation inserts op if its key has neither a row nor a
// tombstone, and fails with store.ErrConflict otherwise: InsertOperation
// with the tombstone check in the same statement.
func (t *sqlTx) insertNewOperation(ctx context.Context, op *store.Operation) error {
	args, err := opArgs(op)
	if err != nil {
		return err
	}
	// The unnumbered parameters are 1 to len(args); ?1 and ?2 are the
	// tenant and the key among them.
	res, err := t.q.ExecContext(ctx, `INSERT INTO operations (`+opColumns+`) SELECT `+placeholders(len(args))+`
		WHERE NOT EXISTS (SELECT 1 FROM tombstones WHERE tenant = ?1 AND key = ?2)`, args...)
	if err != nil {
		return fmt.Errorf("insert operation: %w", mapErr(err))
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("insert operation: %w", err)
	} else if n != 1 {
		return fmt.Errorf("insert operation %s: tombstone: %w", op.Key, store.ErrConflict)
	}
	t.inserted(op, args, res)
	return nil
}

// appendTimelines appends entries in one statement, without setting their
// IDs (conditional writes do not report them).
func (t *sqlTx) appendTimelines(ctx context.Context, entries []*store.TimelineEntry) error {
	q, args := t.appendTimelineSQL(entries)
	if _, err := t.q.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("append timeline: %w", err)
	}
	return nil
}
