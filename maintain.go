package opledger

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/store"
)

// Default intervals of Maintain.
const (
	// DefaultLeaseSweep is how often Maintain settles expired leases.
	DefaultLeaseSweep = 5 * time.Second
	// DefaultCompactInterval is how often Maintain applies retention.
	DefaultCompactInterval = time.Hour
)

// MaintainOptions set how often Maintain does each of its jobs.
type MaintainOptions struct {
	// LeaseSweep is how often expired leases are settled (ExpireLeases).
	// Zero means DefaultLeaseSweep.
	LeaseSweep time.Duration
	// WorkflowSweep is how often workflows whose current step succeeded
	// are moved on (AdvanceWorkflows). Zero means DefaultLeaseSweep.
	WorkflowSweep time.Duration
	// CompactInterval is how often retention is applied (Compact). Zero
	// means DefaultCompactInterval.
	CompactInterval time.Duration
	// Settings are the program's own settings that every process sharing
	// the store must have too, by name (AnnounceOptions.Settings).
	Settings map[string]string
	// Destinations are the only destinations this process records
	// operations for, if it has such a list (AnnounceOptions.Destinations).
	Destinations []string
	// Logger gets a line for each run that changed something and for
	// each error (a job the store could not take, ErrStoreUnavailable,
	// ErrStoreBusy (a turn not answered by its deadline among them) or
	// ErrStoreFull, is logged at WARN at the first failure and as their
	// count doubles, at DEBUG between, and at INFO when the store answers
	// again, rather than at ERROR at each turn), and once, after the first lease sweep, the number of
	// operations still claimed by leases not yet ended, when there are
	// any (no keys). Nil means slog.Default().
	Logger *slog.Logger
}

// Maintain does the ledger's periodic work until ctx ends or the ledger
// is closed: it settles expired leases (ExpireLeases), so that a worker
// that died leaves no operation in_progress for ever; moves on workflows
// whose current step succeeded by a lookup or an operator's decision
// (AdvanceWorkflows); applies retention (Compact); and announces the
// process every 15 seconds (Announce), logging a warning when another
// process that maintains the store runs with other settings, and
// removing its announcement when it ends. Each job runs at once and then
// at its interval; an error is logged and the job runs again at its next
// turn (a store outage is logged as it grows, not at each turn: see
// MaintainOptions.Logger). Each turn has a deadline: its job's interval
// (twice CompactInterval for retention), at least 5 seconds; a turn the
// store has not answered by then (a lock held elsewhere, a server that
// stopped answering) is given up, with nothing of its current
// transaction recorded, and fails with ErrStoreBusy, so that a store
// that holds a job does not stall it in silence. Maintain returns when
// ctx has ended or Close was called, and every job has stopped; Close
// waits for that before it closes the store.
//
// An interval of zero is its default; a negative one, a mistake, is
// logged as an error and replaced by the default.
//
// opledger serve and opledger proxy run it; a program that embeds the
// library without either runs it in a goroutine of its own. Several
// processes may maintain one store at the same time: each lease is
// settled once, each workflow step recorded once, and each operation
// compacted once.
func (l *Ledger) Maintain(ctx context.Context, o MaintainOptions) {
	ctx, done, ok := l.life.start(ctx)
	if !ok {
		return // closed
	}
	defer done()
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	for _, iv := range []struct {
		name string
		d    *time.Duration
		def  time.Duration
	}{{"LeaseSweep", &o.LeaseSweep, DefaultLeaseSweep}, {"WorkflowSweep", &o.WorkflowSweep, DefaultLeaseSweep},
		{"CompactInterval", &o.CompactInterval, DefaultCompactInterval}} {
		if *iv.d < 0 {
			// A mistake Maintain cannot return: said, not passed over.
			log.Error("maintain: a negative interval is a mistake; the default is used", "option", "MaintainOptions."+iv.name,
				"given", iv.d.String(), "used", iv.def.String())
		}
		if *iv.d <= 0 {
			*iv.d = iv.def
		}
	}
	// Each turn of a job is bounded (periodic.Bounded), so that a store
	// that holds it (a PostgreSQL LOCK TABLE while the DSN sets no
	// lock_timeout, a SQLite lock held past a long SQLiteBusyTimeout, a
	// server that stopped answering) ends the turn as store_busy, logged
	// by the outage rule, rather than stalling the job in silence:
	// periodic.TurnBound for the sweeps and the announcement, compactBound for
	// compaction.
	var wg sync.WaitGroup
	wg.Go(func() {
		started := true
		periodic.Run(ctx, o.LeaseSweep, log, "expire leases", periodic.Bounded(periodic.TurnBound(o.LeaseSweep), func(ctx context.Context) error {
			n, err := l.ExpireLeases(ctx)
			if n > 0 {
				log.Info("settled expired leases", "count", n)
			}
			if started && err == nil {
				// Once, after the first sweep: a process started after one
				// that died says that the dead one's claims are still
				// held, rather than nothing until their leases end.
				started = false
				claimed, err := l.countClaimed(ctx)
				if err != nil {
					return err
				}
				if claimed > 0 {
					log.Info("operations claimed by leases not yet ended: each is settled when its lease ends, if its worker is gone", "count", claimed)
				}
			}
			return err
		}))
	})
	wg.Go(func() {
		periodic.Run(ctx, o.WorkflowSweep, log, "advance workflows", periodic.Bounded(periodic.TurnBound(o.WorkflowSweep), func(ctx context.Context) error {
			n, err := l.AdvanceWorkflows(ctx)
			if n > 0 {
				log.Info("advanced workflows", "count", n)
			}
			return err
		}))
	})
	wg.Go(func() {
		periodic.Run(ctx, o.CompactInterval, log, "compact", periodic.Bounded(compactBound(o.CompactInterval), func(ctx context.Context) error {
			res, err := l.Compact(ctx)
			if res != (CompactResult{}) {
				// The periods this process applied: they are its own
				// options (serve --retention, --tombstone-retention), and
				// act on every tenant's operations in the store.
				log.Info("retention", "compacted", res, "retention", l.opts.Retention, "tombstone_retention", l.opts.TombstoneRetention)
			}
			return err
		}))
	})
	wg.Go(func() {
		periodic.Run(ctx, announceInterval, log, "announce the process", periodic.Bounded(periodic.TurnBound(announceInterval), func(ctx context.Context) error {
			ps, err := l.Announce(ctx, AnnounceOptions{Settings: o.Settings, Destinations: o.Destinations})
			if err != nil {
				return err
			}
			for _, p := range l.newlyDiffering(ps) {
				log.Warn("another process that maintains this ledger runs with other settings: every process sharing a store must have the same",
					"settings", p.names, "process_host", p.Host, "process_pid", p.PID, "process_started", p.StartedAt)
			}
			return nil
		}))
		// Gone at once rather than after a minute; the store is still
		// open, as Close waits for Maintain.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := l.unannounce(ctx); err != nil {
			log.Warn("could not remove the process's announcement; it counts as gone a minute after the last", "error", err)
		}
	})
	wg.Wait()
}

// compactBound is the deadline of a turn of compaction every interval:
// twice the interval, and at least periodic.MinTurn. Compaction works in
// batches, a transaction each, and its first run over a large backlog
// (retention shortened, or compaction long stopped) may legitimately take
// longer than one interval; its next turn then starts at once, and
// nothing is lost. A turn that has run for two intervals has missed one
// whole turn: a store that holds it that long is busy, and is said to
// be. The batches it committed before the deadline are kept, the rest
// left to the next turn.
func compactBound(interval time.Duration) time.Duration { return periodic.TurnBound(2 * interval) }

// countClaimed counts the in_progress operations of every tenant: those
// whose leases ExpireLeases found not yet ended (and any claimed since).
// They are few, one per running worker, and listed through the index the
// lease sweep reads.
func (l *Ledger) countClaimed(ctx context.Context) (int, error) {
	beyondEveryLease := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	err := sweepPages(ctx, l, func(ctx context.Context, r store.Reader, _ time.Time, after store.OperationID) ([]store.OperationID, error) {
		return r.ExpiredLeases(ctx, beyondEveryLease, after, sweepPage)
	}, func(store.OperationID) error {
		n++
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("count claimed operations: %w", err)
	}
	return n, nil
}

// sweepPage is how many items a sweep lists at a time.
const sweepPage = 200

// sweepPages runs a sweep over what list finds, a page at a time: list
// gets the store's clock and the last item of the previous page (the zero
// R for the first) and returns up to sweepPage items in its order, and
// handle gets each in turn. It ends after a page shorter than sweepPage,
// or with the first error of list or handle (a handle that goes on past
// an item it could not handle returns nil for it), so that items a sweep
// cannot handle never hide those after them.
func sweepPages[R any](ctx context.Context, l *Ledger, list func(ctx context.Context, r store.Reader, now time.Time, after R) ([]R, error), handle func(R) error) error {
	var after R
	for {
		var items []R
		err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
			now, err := l.now(ctx, r)
			if err != nil {
				return err
			}
			items, err = list(ctx, r, now, after)
			return err
		})
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := handle(it); err != nil {
				return err
			}
		}
		if len(items) < sweepPage {
			return nil
		}
		after = items[len(items)-1]
	}
}

// sweepFailures are the operations or workflows a sweep (ExpireLeases,
// AdvanceWorkflows) could not handle: it goes on past them, and its error
// counts them and gives the first one's cause, with its key left out (the
// error is meant for a log, and a key may carry personal data).
type sweepFailures struct {
	ids   map[store.OperationID]bool
	first error
}

// add records that what ("a lease") of id failed with err; an id already
// recorded (a sweep may meet it again) is counted once.
func (f *sweepFailures) add(what string, id store.OperationID, err error) {
	if f.ids[id] {
		return
	}
	if f.ids == nil {
		f.ids = map[store.OperationID]bool{}
	}
	f.ids[id] = true
	if f.first == nil {
		f.first = fmt.Errorf("%s of tenant %s: %w", what, id.Tenant, redact.Keys(id.Key, err))
	}
}

// err is nil when nothing failed, else the sweep's error: "expire
// leases: 2 could not be settled and are tried again on the next run;
// the first: …".
func (f *sweepFailures) err(sweep, handled string) error {
	if len(f.ids) == 0 {
		return nil
	}
	return fmt.Errorf("%s: %d could not be %s and are tried again on the next run; the first: %w", sweep, len(f.ids), handled, f.first)
}
