// Package periodic runs the background jobs of opledger's processes: the
// ledger's maintenance, the executor's lease sweep and the server's loops.
// It also holds the rule by which every loop of those processes logs a
// store outage (StoreProblem, Outage), so that an outage reads the same
// in each.
//
// Allowed imports: internal/store (its errors), the standard library.
package periodic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Run runs fn at once and then every interval until ctx ends, logging its
// errors (but not those after ctx ended) as what. fn is never run twice at
// the same time: a run that takes longer than interval delays the next.
//
// A run that failed because the store could not take it (StoreProblem)
// is logged by the Outage rule rather than at ERROR: at WARN at the first
// such failure and as their count doubles, at DEBUG between, and once at
// INFO ("what: store reachable again") at the first run that succeeds
// after them. Any other error is logged at ERROR, every time.
func Run(ctx context.Context, interval time.Duration, log *slog.Logger, what string, fn func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var outage Outage
	for {
		outage.Log(log, what, fn(ctx), ctx.Err() != nil)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Bounded returns fn with each of its runs bounded by bound: a run gets
// a context that ends bound after it starts, and one that fails once
// that deadline has passed (its context's own not ended) failed because
// the store did not answer in time: a lock it needed held elsewhere past
// every wait the store sets (a PostgreSQL LOCK TABLE while the DSN sets
// no lock_timeout, a long SQLiteBusyTimeout), or a server that stopped
// answering. Its error then wraps store.ErrBusy (opledger.ErrStoreBusy,
// problem store_busy), so that Run logs it by the Outage rule, as well
// as fn's own error. A loop whose runs have no deadline would wait,
// silent, for as long as the store holds it, and skip every turn
// meanwhile.
//
// The store is left as the store leaves any request whose context ends:
// a PostgreSQL transaction cancelled mid-way is rolled back, a SQLite
// write that waited for the lock is withdrawn, and what earlier
// transactions of the run committed stays.
func Bounded(bound time.Duration, fn func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		turn, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		return Cut(ctx, turn, bound.String(), fn(turn))
	}
}

// TurnBound is the deadline of a turn of a job run every interval
// (Bounded): the interval, and at least MinTurn. A turn still running
// then has missed its next one; the jobs' work is small transactions
// whose progress is kept, so one cut short by a store that answered
// slowly goes on at its next turn, due at once.
func TurnBound(interval time.Duration) time.Duration { return max(interval, MinTurn) }

// MinTurn is the shortest deadline of a bounded turn, whatever its
// interval: one of a few milliseconds (tests, a lab) is shorter than a
// sweep takes on a loaded machine whose store answers, and 5 s is longer
// than a page of any sweep takes on a store that answers.
const MinTurn = 5 * time.Second

// Cut returns err, the failure of a store call made with bounded (a
// context under parent with a deadline of its own, bound naming it),
// marked store.ErrBusy (opledger.ErrStoreBusy, problem store_busy) when
// that deadline ended the call while parent had not: a store that held
// the call that long is busy (a lock it needs held elsewhere past every
// wait the store sets, or a server that stopped answering), an outage
// its caller logs by the Outage rule. Any other err, and nil, is
// returned as it is. Bounded, the executor's claim bounded by its lease
// and the reconciler's store calls bounded by a lookup's lease use it.
func Cut(parent, bounded context.Context, bound string, err error) error {
	if err == nil || parent.Err() != nil || !errors.Is(context.Cause(bounded), context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("no answer from the store within %s: %w: %w", bound, store.ErrBusy, err)
}

// StoreProblem names the failure of a store that could not take a
// request for a reason of its own, which the next try soon after would
// most likely meet again: "unavailable" (the server could not be
// reached, store.ErrUnavailable, opledger.ErrStoreUnavailable),
// "store_busy" (a lock held elsewhere past the store's wait,
// store.ErrBusy, opledger.ErrStoreBusy) or "store_full" (its disk is
// full, store.ErrFull, opledger.ErrStoreFull: writes fail until space is
// freed). These are the problem names of the HTTP API and the logs. It
// is "" for any other error, and for nil.
func StoreProblem(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, store.ErrBusy):
		return "store_busy"
	case errors.Is(err, store.ErrFull):
		return "store_full"
	}
	return ""
}

// Outage is a run of one loop's store failures (StoreProblem) with no
// success between them, and the rule by which the loop logs them: the
// first at WARN, then each one whose count is a power of two (2, 4, 8,
// …) at WARN and the others at DEBUG, and, at the first success after
// them, one INFO line with their count and how long the outage lasted.
// A loop that fails at every turn during a long outage thus says so in
// a few lines, rarer as it goes on, rather than an ERROR at each turn.
// The zero value is no outage. An Outage is not safe for concurrent use:
// each loop has its own.
type Outage struct {
	// failures counts the store failures; 0 when there is no outage.
	failures int
	// since is when the first of them came.
	since time.Time
}

// Log logs the result of one turn of a loop that does what: err nil is a
// success (which ends an outage), a store failure (StoreProblem) is
// counted and logged by the rule, and any other error is logged at ERROR
// as what, with the error. ended says that the loop's context has ended:
// an error then is the cancellation's, and is not logged.
func (o *Outage) Log(log *slog.Logger, what string, err error, ended bool) {
	switch {
	case err == nil:
		if o.failures > 0 {
			log.Info(what+": store reachable again", "failures", o.failures, "outage", time.Since(o.since).Round(time.Millisecond))
			*o = Outage{}
		}
	case ended:
	default:
		problem := StoreProblem(err)
		if problem == "" {
			log.Error(what, "error", err)
			return
		}
		if o.failures == 0 {
			o.since = time.Now()
		}
		o.failures++
		level := slog.LevelDebug
		if o.failures&(o.failures-1) == 0 { // 1, 2, 4, 8, …
			level = slog.LevelWarn
		}
		log.Log(context.Background(), level, what, "problem", problem, "failures", o.failures,
			"outage", time.Since(o.since).Round(time.Millisecond), "error", err)
	}
}
