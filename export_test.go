package opledger

import (
	"context"
	"sync/atomic"

	"github.com/opledger/opledger/internal/store"
)

// CountWholeTimelineReads makes l count the times its store reads an
// operation's whole timeline (store.Reader.ListTimeline), in and out of
// write transactions, and returns the count so far. The tests of the
// packages that use a Ledger (opledger_test) check with it what their
// work reads. Call it before l is used by other goroutines.
func CountWholeTimelineReads(l *Ledger) func() int64 {
	var reads atomic.Int64
	l.store = wholeTimelineCountingStore{Store: l.store, reads: &reads}
	return reads.Load
}

// wholeTimelineCountingStore counts the ListTimeline calls of its
// readers and transactions.
type wholeTimelineCountingStore struct {
	store.Store
	reads *atomic.Int64
}

type wholeTimelineCountingReader struct {
	store.Reader
	reads *atomic.Int64
}

type wholeTimelineCountingTx struct {
	store.Tx
	reads *atomic.Int64
}

func (s wholeTimelineCountingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, wholeTimelineCountingTx{Tx: tx, reads: s.reads})
	})
}

func (s wholeTimelineCountingStore) View(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	return s.Store.View(ctx, func(ctx context.Context, r store.Reader) error {
		return fn(ctx, wholeTimelineCountingReader{Reader: r, reads: s.reads})
	})
}

func (s wholeTimelineCountingStore) ViewSnapshot(ctx context.Context, fn func(context.Context, store.Reader) error) error {
	return s.Store.ViewSnapshot(ctx, func(ctx context.Context, r store.Reader) error {
		return fn(ctx, wholeTimelineCountingReader{Reader: r, reads: s.reads})
	})
}

func (r wholeTimelineCountingReader) ListTimeline(ctx context.Context, tenant, key string) ([]*store.TimelineEntry, error) {
	r.reads.Add(1)
	return r.Reader.ListTimeline(ctx, tenant, key)
}

func (t wholeTimelineCountingTx) ListTimeline(ctx context.Context, tenant, key string) ([]*store.TimelineEntry, error) {
	t.reads.Add(1)
	return t.Tx.ListTimeline(ctx, tenant, key)
}
