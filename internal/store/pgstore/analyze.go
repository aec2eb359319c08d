package pgstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A new ledger's first statistics.
//
// PostgreSQL plans a prepared statement from the table's statistics; a new
// schema has none until autovacuum first analyzes it, about a minute after
// the first writes. Plans cached meanwhile, while the tables are nearly
// empty, may look an operation up through a list index instead of the
// primary key, and stay in use, scanning ever more entries, until the
// statistics arrive (measured: 5.3 ms per update at 50,000 rows instead of
// about 0.05 ms). So once a store has committed analyzeAfter writes (a
// transaction, or one caller of a shared one), it analyzes the ledger's
// tables itself if nothing has analyzed them yet; ANALYZE invalidates the
// cached plans of every session.

// analyzeAfter is how many committed writes of one store trigger the
// check.
const analyzeAfter = 1000

// ledgerTables are the tables the first ANALYZE covers.
const ledgerTables = `operations, attempts, timeline, tombstones`

// firstAnalyze runs the check once per store.
type firstAnalyze struct {
	writes atomic.Int64
	mu     sync.Mutex
	// started is set once the check has started, closed once the store
	// closes: either way no check starts any more.
	started, closed bool
	wg              sync.WaitGroup
}

// committed counts n committed writes and starts the check in the
// background when they reach analyzeAfter.
func (s *Store) committed(n int) {
	a := &s.analyze
	if a.writes.Add(int64(n)) < analyzeAfter {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.started || a.closed {
		return
	}
	a.started = true
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.analyzeIfNeverAnalyzed(ctx) // best effort: autovacuum does it later anyway
	}()
}

// analyzeIfNeverAnalyzed runs ANALYZE on the ledger's tables when the
// operations table has never been analyzed or vacuumed (reltuples < 0).
func (s *Store) analyzeIfNeverAnalyzed(ctx context.Context) error {
	var tuples float64
	if err := s.pool.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'operations'::regclass`).Scan(&tuples); err != nil {
		return err
	}
	if tuples >= 0 {
		return nil
	}
	_, err := s.pool.Exec(ctx, `ANALYZE `+ledgerTables)
	return err
}

// close waits for a check in progress; none starts after it.
func (a *firstAnalyze) close() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	a.wg.Wait()
}
