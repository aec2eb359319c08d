package opledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
	// BatchesRetried are batches of operations whose transaction failed
	// (an operation changed meanwhile, a wait the store broke as a
	// deadlock, or one cannot be compacted; another process compacting
	// the same operations is skipped or waited for, not failed) and that
	// were compacted again one operation at a time: a few are normal;
	// many, run after run, mean compaction runs far slower than it can.
	BatchesRetried int
}

// LogValue makes a CompactResult one group of counts in a log line.
func (r CompactResult) LogValue() slog.Value {
	return slog.GroupValue(slog.Int("tombstoned", r.Tombstoned), slog.Int("forgotten", r.Forgotten),
		slog.Int("deliveries_compacted", r.DeliveriesCompacted), slog.Int("events_forgotten", r.EventsForgotten),
		slog.Int("event_objects_forgotten", r.EventObjectsForgotten), slog.Int("workflows_forgotten", r.WorkflowsForgotten),
		slog.Int("sessions_expired", r.SessionsExpired), slog.Int("batches_retried", r.BatchesRetried))
}

// Compact applies retention across all tenants: succeeded and failed
// operations last updated more than Options.Retention ago are reduced to a
// tombstone (key, fingerprint, final state, reference, dates) and their
// attempts and timeline deleted; tombstones older than
// Options.TombstoneRetention are deleted. A repeat of a tombstoned key is
// still recognised by Record and Claim. Unresolved operations are never
// compacted, nor are the steps of a workflow that has not finished and
// may still go on (a later step may read an earlier one's response): they
// are compacted once it has finished, or once its current step has been
// failed for Options.Retention without a decision.
//
// Inbound events follow the same periods: deliveries received more than
// Options.Retention ago are deleted (an event keeps the newer ones, and
// is still recognised when it arrives again); events received more than
// Options.TombstoneRetention ago are deleted with their deliveries, and
// so are the positions of tracked objects not updated for that long.
// EventStats keeps counting what was deleted, so its totals never go
// down. Workflows whose every step succeeded are deleted once they have
// been finished for Options.TombstoneRetention; the others are kept.
// Expired console sessions (OpenSession) are deleted. Operator
// recoveries are kept for the recovery figures, which never go down,
// without an operation key: the key an older release stored with one is
// cleared once it is older than Options.TombstoneRetention.
//
// Each step takes what was past its period when the step began: records
// that pass it while a run goes on are left to the next run, so that a
// steady inflow of finished operations cannot keep one step going and the
// later ones from running.
//
// An operation Compact cannot compact does not stop it: it goes on past
// it, and runs every later step of retention; its error counts such
// operations and gives the first one's cause with its key left out, and
// joins the error of any step that failed. They are tried again on the
// next run.
func (l *Ledger) Compact(ctx context.Context) (CompactResult, error) {
	var res CompactResult
	var errs []error
	failed, err := l.compactOperations(ctx, &res)
	if err != nil {
		errs = append(errs, err)
		if ctx.Err() != nil {
			return res, err
		}
	}
	errs = append(errs, failed.err("compact", "compacted"))
	for _, step := range []struct {
		name   string
		count  *int
		period time.Duration
		run    func(tx store.Tx, ctx context.Context, before time.Time, limit int) (int, error)
	}{
		{"forget tombstones", &res.Forgotten, l.opts.TombstoneRetention, store.Tx.DeleteTombstonesBefore},
		{"compact deliveries", &res.DeliveriesCompacted, l.opts.Retention, store.Tx.CompactDeliveriesBefore},
		{"forget events", &res.EventsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetEventsBefore},
		{"forget event objects", &res.EventObjectsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetEventObjectsBefore},
		{"forget workflows", &res.WorkflowsForgotten, l.opts.TombstoneRetention, store.Tx.ForgetWorkflowsBefore},
		{"delete expired sessions", &res.SessionsExpired, 0, store.Tx.DeleteSessionsBefore},
		// Recoveries are kept for the figures, which never go down; an
		// older release stored the operation's key with them.
		{"forget recovery keys", new(int), l.opts.TombstoneRetention, store.Tx.ForgetRecoveryKeysBefore},
	} {
		if ctx.Err() != nil {
			break
		}
		if err := l.compactBatches(ctx, step.period, step.count, step.run); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step.name, err))
		}
	}
	return res, errors.Join(errs...)
}

// compactOperations reduces the final operations past the retention
// period to tombstones, adding them to res.Tombstoned, compactBatchSize
// to a transaction. It pages past an operation it keeps (a step of an
// unfinished workflow) or cannot compact (returned in failed, tried again
// on the next run); its error is one listing them, or the context's.
func (l *Ledger) compactOperations(ctx context.Context, res *CompactResult) (sweepFailures, error) {
	var failed sweepFailures
	// The horizon is fixed by the first page: one read again on each page
	// moves on with the clock, and under a steady inflow the sweep would
	// not end while it found a full page past it.
	var before time.Time
	var batch []store.OperationID
	flush := func() error {
		n, err := l.compactBatch(ctx, batch, &failed, &res.BatchesRetried)
		batch = batch[:0]
		res.Tombstoned += n
		return err
	}
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, now time.Time, after store.FinalRow) ([]store.FinalRow, error) {
		if before.IsZero() {
			before = now.Add(-l.opts.Retention)
		}
		return r.FinalBefore(ctx, store.FinalParams{Before: before, After: after, Limit: sweepPage})
	}, func(row store.FinalRow) error {
		if batch = append(batch, row.OperationID); len(batch) < compactBatchSize {
			return nil
		}
		return flush()
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	if err != nil {
		return failed, fmt.Errorf("compact: %w", err)
	}
	return failed, nil
}

// compactedRef is the destination reference op's tombstone keeps. The
// tombstone keeps neither the payload nor the sensitive fields that say
// what to mask in it, so a reference made of a sensitive value, or that
// contains one of tombstoneSecretLength bytes or more (a contact named
// by its e-mail address), is kept masked: past retention the ledger no
// longer holds the value, and a repeat is answered with the masked
// reference. A shorter value inside a reference (a three-digit code in
// "ch_3P1234abc") is more likely chance than the value, and masking it
// would break the reference a repeat is answered with: it is kept as it
// is.
func compactedRef(op *store.Operation) string {
	if len(op.SensitiveFields) == 0 || op.DestinationRef == "" {
		return op.DestinationRef
	}
	return secretTextAtLeast(op.Payload, op.EarlierPayloads, op.SensitiveFields, tombstoneSecretLength).maskValue(op.DestinationRef)
}

// tombstoneSecretLength is the shortest sensitive value compaction masks
// inside a destination reference (see compactedRef).
const tombstoneSecretLength = 6

// compactBatchSize is how many operations one transaction of compaction
// reduces to tombstones. A commit was most of the cost of compacting an
// operation alone (BenchmarkCompact: 420 µs an operation on SQLite, 1 ms
// on PostgreSQL, one transaction each; 80 µs and 450 µs in batches, and
// 60 µs on PostgreSQL once a batch took a few statements), and a batch
// still holds the store briefly (about 4 ms of SQLite's writer).
const compactBatchSize = 50

// compactBatch reduces the operations ids to tombstones in one
// transaction and returns how many it compacted. When that transaction
// fails (an operation changed meanwhile, or cannot be compacted), each is
// tried in a transaction of its own, so that one operation holds back no
// other: those that fail alone are added to failed, and *retried counts
// the batch. Its error is the context's only.
func (l *Ledger) compactBatch(ctx context.Context, ids []store.OperationID, failed *sweepFailures, retried *int) (int, error) {
	n, err := l.compactTx(ctx, ids)
	if err == nil {
		return n, nil
	}
	if ctx.Err() != nil {
		return 0, ctx.Err()
	}
	if len(ids) == 1 {
		if !errors.Is(err, store.ErrConflict) { // a conflict: changed meanwhile; the next run looks again
			failed.add("an operation", ids[0], err)
		}
		return 0, nil
	}
	*retried++
	total := 0
	for _, id := range ids {
		n, err := l.compactBatch(ctx, []store.OperationID{id}, failed, retried)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// compactTx reduces each of the operations ids to a tombstone in one
// transaction, if it is still final and past the retention period, and
// retention does not keep it for its workflow (stepsKeptForWorkflow); it
// returns how many it compacted.
//
// The workflows of the batch's steps are read (and locked) first, in the
// order of their tenants and keys, each with its current step, before
// any operation of the batch: in the order of every workflow
// transaction (the workflow, then its steps), and so that compaction
// never holds an operation while it waits for a workflow (an event whose
// rule writes a step and then another key holds the workflow and would
// wait for that operation). Then the operations to compact, steps and
// others alike, are read and locked in one statement
// (store.Tx.LockOperations), in key order, leaving out those another
// transaction holds: another process compacting the same batch, or a
// person deciding about one; they are left to the next run. Compaction
// thus never waits for an operation of its batch. The attempts are
// counted in one read, and added to the running totals once per
// destination and outcome, in a fixed order, after every operation's
// rows are written; the stores write the tenants' running totals of
// effects last too.
func (l *Ledger) compactTx(ctx context.Context, ids []store.OperationID) (compacted int, err error) {
	// Each workflow the batch's keys may be steps of, read once per
	// workflow.
	var workflows []store.OperationID
	var plain []store.OperationID
	seen := map[store.OperationID]bool{}
	for _, id := range ids {
		wk, _, ok := SplitWorkflowStepKey(id.Key)
		if !ok {
			plain = append(plain, id)
			continue
		}
		w := store.OperationID{Tenant: id.Tenant, Key: wk}
		if !seen[w] {
			seen[w] = true
			workflows = append(workflows, w)
		}
	}
	slices.SortFunc(workflows, func(a, b store.OperationID) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Key, b.Key))
	})
	err = l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		compacted = 0 // the function runs again after a conflict
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		// The steps each workflow keeps whole: a key under the
		// workflow's that names none of its steps is an ordinary
		// operation, and is compacted as one.
		kept := map[store.OperationID]map[string]bool{}
		for _, w := range workflows {
			steps, err := stepsKeptForWorkflow(ctx, tx, w.Tenant, w.Key, now.Add(-l.opts.Retention))
			if err != nil {
				return err
			}
			kept[w] = steps
		}
		lock := slices.Clone(plain)
		for _, id := range ids {
			if wk, step, ok := SplitWorkflowStepKey(id.Key); ok && !kept[store.OperationID{Tenant: id.Tenant, Key: wk}][step] {
				lock = append(lock, id)
			}
		}
		ops, err := tx.LockOperations(ctx, lock)
		if err != nil {
			return err
		}
		due := make([]store.OperationID, 0, len(ops))
		ops = slices.DeleteFunc(ops, func(op *store.Operation) bool {
			return !State(op.State).Final() || !op.UpdatedAt.Before(now.Add(-l.opts.Retention)) // changed since listed
		})
		for _, op := range ops {
			due = append(due, store.OperationID{Tenant: op.Tenant, Key: op.Key})
		}
		counts, err := tx.CountAttempts(ctx, due)
		if err != nil {
			return err
		}
		attempts := map[compactedAttempts]int{}
		cs := make([]store.Compaction, len(ops))
		for i, op := range ops {
			cs[i] = store.Compaction{Revision: op.Revision, Tombstone: store.Tombstone{
				Tenant: op.Tenant, Key: op.Key, Fingerprint: op.Fingerprint, State: op.State,
				FailureKind: op.FailureKind, DestinationRef: compactedRef(op), DuplicateEffects: op.DuplicateEffects,
				Version: op.Version, AttemptCount: op.AttemptCount, CreatedAt: op.CreatedAt, FinishedAt: op.UpdatedAt, CompactedAt: now,
			}}
			// The tombstone carries the operation's effects into the
			// running totals; keep the attempt totals too: neither may
			// go down.
			for outcome, n := range counts[store.OperationID{Tenant: op.Tenant, Key: op.Key}] {
				attempts[compactedAttempts{op.Tenant, op.Destination, outcome}] += n
			}
		}
		if err := tx.CompactOperations(ctx, cs); err != nil {
			return err
		}
		compacted = len(cs)
		for _, k := range slices.SortedFunc(maps.Keys(attempts), compactedAttempts.compare) {
			if err := tx.AddCompactedAttempts(ctx, k.tenant, k.destination, k.outcome, attempts[k]); err != nil {
				return err
			}
		}
		return nil
	})
	return compacted, err
}

// compactedAttempts is a row of the running totals of compacted
// operations' attempts.
type compactedAttempts struct{ tenant, destination, outcome string }

func (a compactedAttempts) compare(b compactedAttempts) int {
	return cmp.Or(cmp.Compare(a.tenant, b.tenant), cmp.Compare(a.destination, b.destination), cmp.Compare(a.outcome, b.outcome))
}

// retentionBatch bounds the rows one transaction of tombstone, event and
// workflow retention deletes, so that a first run over a large backlog never holds
// the store's writer for long.
const retentionBatch = 1000

// compactBatches runs one step of tombstone, event, workflow or session
// retention in transactions of up to retentionBatch rows older than period
// when the step began, until a transaction finds fewer, adding the rows to
// *count.
func (l *Ledger) compactBatches(ctx context.Context, period time.Duration, count *int,
	run func(tx store.Tx, ctx context.Context, before time.Time, limit int) (int, error)) error {
	var before time.Time
	for {
		var n int
		err := l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
			if before.IsZero() {
				now, err := l.now(ctx, tx)
				if err != nil {
					return err
				}
				before = now.Add(-period)
			}
			var err error
			n, err = run(tx, ctx, before, retentionBatch)
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

// stepsKeptForWorkflow returns the names of the steps of the stored
// workflow key that retention keeps whole, because the workflow has not
// finished and may still go on: a later step may read an earlier one's
// response. It returns none for a workflow that has finished, or that is
// not stored. A workflow whose current step failed goes on only by a
// person's decision on that step, like any failed operation, within the
// retention period: its steps are kept until that step has been failed
// since before horizon (now less the retention period), or has been
// compacted, and are then compacted as any operation.
func stepsKeptForWorkflow(ctx context.Context, r store.Reader, tenant, key string, horizon time.Time) (map[string]bool, error) {
	w, err := r.GetWorkflow(ctx, tenant, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil || w.Done {
		return nil, err
	}
	if w.CurrentKey != "" {
		current, err := r.GetOperation(ctx, tenant, w.CurrentKey)
		switch {
		case err == nil && State(current.State) == StateFailed:
			if current.UpdatedAt.Before(horizon) {
				return nil, nil
			}
		case errors.Is(err, store.ErrNotFound):
			// A failed step compacted takes no decision: the workflow
			// cannot go on.
			t, err := r.GetTombstone(ctx, tenant, w.CurrentKey)
			switch {
			case err == nil && State(t.State) == StateFailed:
				return nil, nil
			case err != nil && !errors.Is(err, store.ErrNotFound):
				return nil, err
			}
		case err != nil:
			return nil, err
		}
	}
	def, err := decodeDef(w)
	if err != nil {
		return nil, err
	}
	steps := make(map[string]bool, len(def.Steps))
	for _, s := range def.Steps {
		steps[s.Name] = true
	}
	return steps, nil
}
