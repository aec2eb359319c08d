package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
)

// ledgerFlags are the ledger's time limits that the long-running commands
// (serve, proxy) let an operator set; docs/configuration.md explains each.
type ledgerFlags struct {
	holdReview, retention, tombstoneRetention time.Duration
}

func (f *ledgerFlags) add(cmd *cobra.Command) {
	cmd.Flags().DurationVar(&f.holdReview, "hold-review", opledger.DefaultHoldReviewAfter,
		"time a held operation's owner has to decide (its review_by); after it the operation counts as an overdue review; more than 0")
	cmd.Flags().DurationVar(&f.retention, "retention", opledger.DefaultRetention,
		"how long finished operations keep their full record before compaction to a tombstone, at least 1m (720h: 30 days)")
	cmd.Flags().DurationVar(&f.tombstoneRetention, "tombstone-retention", opledger.DefaultTombstoneRetention,
		"how long tombstones recognise a late repeat, and inbound events and finished workflows are kept, at least 1m (9600h: 400 days)")
}

// MinRetention is the shortest --retention taken: a shorter one would
// compact an operation to its tombstone moments after it finished, before
// anyone could read its record, and no compaction is undone.
const MinRetention = time.Minute

// MinTombstoneRetention is the shortest --tombstone-retention taken: a
// shorter one would forget a tombstone in the very retention run that
// wrote it, and every inbound event and finished workflow on the next
// run, so that a late repeat of a key or a redelivered event would be
// taken as new, and could act a second time.
const MinTombstoneRetention = time.Minute

// apply sets the flags on o, refusing durations that are not positive,
// a --retention shorter than MinRetention and a --tombstone-retention
// shorter than MinTombstoneRetention.
func (f *ledgerFlags) apply(o *opledger.Options) error {
	for _, fl := range []struct {
		name string
		d    time.Duration
	}{{"hold-review", f.holdReview}, {"retention", f.retention}, {"tombstone-retention", f.tombstoneRetention}} {
		if fl.d <= 0 {
			return usageError{fmt.Errorf("--%s must be more than 0, got %s", fl.name, fl.d)}
		}
	}
	for _, fl := range []struct {
		name   string
		d, min time.Duration
	}{{"retention", f.retention, MinRetention}, {"tombstone-retention", f.tombstoneRetention, MinTombstoneRetention}} {
		if fl.d < fl.min {
			return usageError{fmt.Errorf("--%s must be at least %gm, got %s", fl.name, fl.min.Minutes(), fl.d)}
		}
	}
	o.HoldReviewAfter, o.Retention, o.TombstoneRetention = f.holdReview, f.retention, f.tombstoneRetention
	return nil
}

// openLedger opens the ledger of dsn as opledger.Open does, and, when
// its SQLite file was in rollback-journal mode (a backup made by an
// older opledger), which every open switches to WAL, tells note so once
// it is open: the file then has a -wal file beside it while in use,
// which a copy with cp would leave out.
func openLedger(ctx context.Context, dsn string, opts opledger.Options, note func(string)) (*opledger.Ledger, error) {
	rollback := false
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		rollback, _ = sqlitestore.RollbackJournal(path)
	}
	l, err := opledger.Open(ctx, dsn, opts)
	if err == nil && rollback {
		path, _ := sqlitestore.DSNPath(dsn)
		note(path + " was in rollback-journal mode (a backup made by an older opledger): opening it switched it to WAL mode, " +
			"as every ledger runs; copy it with opledger backup from now on, not cp, which would leave out the writes still in its -wal file")
	}
	return l, err
}

// stderrNote prints a note on cmd's stderr, as "note: …".
func stderrNote(cmd *cobra.Command) func(string) {
	return func(msg string) { fmt.Fprintln(cmd.ErrOrStderr(), "note: "+msg) }
}
