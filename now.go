package opledger

import (
	"context"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// Now is the ledger's current time: the store's clock (now() on
// PostgreSQL) mapped through Options.Clock. Every lease, backoff, retention
// window and visibility delay is measured against it, so code that compares
// against those times (a reconciler deciding whether a visibility delay has
// passed) reads the time here, not from its own machine.
func (l *Ledger) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := l.store.View(ctx, func(ctx context.Context, r store.Reader) error {
		var err error
		now, err = l.now(ctx, r)
		return err
	})
	return now, err
}

// storeTime is t in the stores' precision, microseconds: a time computed
// by adding a duration (a lease, a backoff, a review period) is kept so,
// so that the answer that carries it shows what a later read shows.
func storeTime(t time.Time) time.Time { return t.Truncate(time.Microsecond) }

// nowPlus is the time d after the decision's now, in the stores' precision.
func (t *txn) nowPlus(d time.Duration) time.Time { return storeTime(t.now.Add(d)) }
