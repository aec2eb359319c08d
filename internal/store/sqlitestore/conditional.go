package sqlitestore

import (
	"context"
	"time"

	"github.com/opledger/opledger/internal/store"
)

// WriteConditional implements store.ConditionalWriter. It runs in an
// ordinary write transaction, which group commit already shares with
// concurrent callers; what it saves is the reads.
func (s *Store) WriteConditional(ctx context.Context, decide func(now time.Time) ([]store.Write, error)) error {
	return s.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return store.WriteConditionalIn(ctx, tx, decide)
	})
}
