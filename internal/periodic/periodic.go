// Package periodic runs the background jobs of opledger's processes: the
// ledger's maintenance, the executor's lease sweep and the server's loops.
package periodic

import (
	"context"
	"log/slog"
	"time"
)

// Run runs fn at once and then every interval until ctx ends, logging its
// errors (but not those after ctx ended) as what. fn is never run twice at
// the same time: a run that takes longer than interval delays the next.
func Run(ctx context.Context, interval time.Duration, log *slog.Logger, what string, fn func(context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			log.Error(what, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
