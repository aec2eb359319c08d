package opledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// CompactResult counts what Compact did.
type CompactResult struct {
	// Tombstoned operations lost their full record and kept a tombstone.
	Tombstoned int
	// Forgotten tombstones passed their own retention and were deleted.
	Forgotten int
	// DeliveriesCompacted are arrivals of inbound events older than the
	// retention period, deleted and kept as counts.
	DeliveriesCompacted int
	// EventsForgotten are inbound events older than the tombstone
	// retention, deleted with their deliveries and kept as counts.
	EventsForgotten int
	// EventObjectsForgotten are tracked objects (an ordering rule's newest
	// position of an object) not updated for the tombstone retention.
	EventObjectsForgotten int
	// WorkflowsForgotten are workflows finished (every step succeeded)
	// more than the tombstone retention ago.
	WorkflowsForgotten int
	// SessionsExpired are console sessions (OpenSession) past their
	// expiry, deleted.
	SessionsExpired int
}

// LogValue makes a CompactResult one group of counts in a log line.
func (r CompactResult) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("tombstoned", r.Tombstoned), slog.Int("forgotten", r.Forgotten),
		slog.Int("deliveries_compacted", r.DeliveriesCompacted), slog.Int("events_forgotten", r.EventsForgotten),
		slog.Int("event_objects_forgotten", r.EventObjectsForgotten), slog.Int("workflows_forgotten", r.WorkflowsForgotten),
		slog.Int("sessions_expired", r.SessionsExpired))
}

// Compact applies retention across all tenants: succeeded and failed
// operations last updated more than Options.Retention ago are reduced to a
// tombstone (key, fingerprint, final state, reference, dates) and their
// attempts and timeline deleted; tombstones older than
// Options.TombstoneRetention are deleted. A repeat of a tombstoned key is
// still recognised by Record and Claim. Unresolved operations are never
// compacted.
//
// Inbound events follow the same periods: deliveries received more than
// Options.Retention ago are deleted (an event keeps the newer ones, and
// is still recognised when it arrives again); events received more than
// Options.TombstoneRetention ago are deleted with their deliveries, and
// so are the positions of tracked objects not updated for that long.
// EventStats keeps counting what was deleted, so its totals never go
// down. Workflows whose every step succeeded are deleted once they have
// been finished for Options.TombstoneRetention; the others are kept.
// Expired console sessions (OpenSession) are deleted.
func (l *Ledger) Compact(ctx context.Context) (CompactResult, error) {
	var res CompactResult
	for {
		var ids []store.OperationID
		err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
			now, err := l.now(ctx, r)
			if err != nil {
				return err
			}
			ids, err = r.FinalBefore(ctx, now.Add(-l.opts.Retention), 200)
			return err
		})
		if err != nil {
			return res, fmt.Errorf("compact: %w", err)
		}
		done := 0
		for _, id := range ids {
			compacted := false
			err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
				now, err := l.now(ctx, tx)
				if err != nil {
					return err
				}
				op, err := tx.GetOperation(ctx, id.Tenant, id.Key)
				if errors.Is(err, store.ErrNotFound) {
					return nil // compacted meanwhile by another process
				}
				if err != nil {
					return err
				}
				if !State(op.State).Final() || !op.UpdatedAt.Before(now.Add(-l.opts.Retention)) {
					return nil // changed since listed
				}
				if err := tx.UpsertTombstone(ctx, &store.Tombstone{
					Tenant: op.Tenant, Key: op.Key, Fingerprint: op.Fingerprint, State: op.State,
					FailureKind: op.FailureKind, DestinationRef: op.DestinationRef, DuplicateEffects: op.DuplicateEffects,
					Version: op.Version, CreatedAt: op.CreatedAt, FinishedAt: op.UpdatedAt, CompactedAt: now,
				}); err != nil {
					return err
				}
				// The tombstone carries the operation's effects into the
				// running totals; keep the attempt totals too: neither
				// may go down.
				attempts, err := tx.ListAttempts(ctx, op.Tenant, op.Key)
				if err != nil {
					return err
				}
				byOutcome := map[string]int{}
				for _, a := range attempts {
					byOutcome[a.Outcome]++
				}
				for outcome, n := range byOutcome {
					if err := tx.AddCompactedAttempts(ctx, op.Tenant, op.Destination, outcome, n); err != nil {
						return err
					}
				}
				compacted = true
				return tx.DeleteOperation(ctx, op.Tenant, op.Key, op.Revision)
			})
			if errors.Is(err, store.ErrConflict) {
				continue // changed meanwhile; the next run looks again
			}
			if err != nil {
				return res, fmt.Errorf("compact %s: %w", id.Key, err)
			}
			if compacted {
				// Counted at once: an error later in the batch returns
				// what was compacted before it.
				done++
				res.Tombstoned++
			}
		}
		if len(ids) < 200 || done == 0 {
			break
		}
	}
	err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		res.Forgotten, err = tx.DeleteTombstonesBefore(ctx, now.Add(-l.opts.TombstoneRetention))
		return err
	})
	if err != nil {
		return res, fmt.Errorf("forget tombstones: %w", err)
	}
	for _, step := range []struct {
		name   string
		count  *int
		period time.Duration
		run    func(tx store.Tx, ctx context.Context, before time.Time, limit int) (int, error)
	}{
		{"compact deliveries", &res.DeliveriesCompacted, l.opts.Retention, store.Tx.CompactDeliveriesBefore},
		{"forget events", &res.EventsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetEventsBefore},
		{"forget event objects", &res.EventObjectsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetEventObjectsBefore},
		{"forget workflows", &res.WorkflowsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetWorkflowsBefore},
		{"delete expired sessions", &res.SessionsExpired, 0, store.Tx.DeleteSessionsBefore},
	} {
		if err := l.compactBatches(ctx, step.period, step.count, step.run); err != nil {
			return res, fmt.Errorf("%s: %w", step.name, err)
		}
	}
	return res, nil
}

// retentionBatch bounds the rows one transaction of event and workflow
// retention deletes, so that a first run over a large backlog never holds
// the store's writer for long.
const retentionBatch = 1000

// compactBatches runs one step of event, workflow or session retention in
// transactions of up to retentionBatch rows older than period, until
// a transaction finds fewer, adding the rows to *count.
func (l *Ledger) compactBatches(ctx context.Context, period time.Duration, count *int,
	run func(tx store.Tx, ctx context.Context, before time.Time, limit int) (int, error)) error {
	for {
		var n int
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			now, err := l.now(ctx, tx)
			if err != nil {
				return err
			}
			n, err = run(tx, ctx, now.Add(-period), retentionBatch)
			return err
		})
		if err != nil {
			return err
		}
		*count += n
		if n < retentionBatch {
			return nil
		}
	}
}
