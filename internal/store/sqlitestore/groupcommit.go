package sqlitestore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/store/migrate"
)

// maxBatch bounds how many write functions share one transaction, so that
// one commit never holds a caller back behind an unbounded queue.
const maxBatch = 128

// errBatchAborted is returned to the callers whose writes were lost because
// the shared transaction broke under another caller's write or at COMMIT.
var errBatchAborted = errors.New("shared write transaction aborted")

// writeReq is one caller's Update waiting for, or inside, a group commit.
type writeReq struct {
	ctx context.Context
	fn  func(context.Context, store.Tx) error
	// decide is set for a conditional write (WriteConditional), which can
	// run without a savepoint; fn then runs it inside one.
	decide func(now time.Time) ([]store.Write, error)
	done   chan writeResult // buffered: the leader never blocks on it
	// migration marks Migrate's transaction, the only one that runs
	// without checkSchema: the schema may not be there yet.
	migration bool
}

type writeResult struct {
	err error
	// panicked holds what fn panicked with; the caller re-panics with it
	// in its own goroutine.
	panicked any
	stack    []byte
}

// groupCommit gathers concurrent write transactions into shared ones: the
// first caller to take the writer (the leader) runs every queued write
// function in one BEGIN IMMEDIATE … COMMIT, each inside its own SAVEPOINT,
// and releases each caller only after that COMMIT has returned. A caller
// whose function fails is rolled back to its savepoint and gets its own
// error; the others are unaffected. Conditional writes run first and
// without savepoints (runConditional). Callers that arrive while a commit
// is in flight form the next batch, so a caller alone waits for no one.
type groupCommit struct {
	mu    sync.Mutex
	queue []*writeReq
	// commits counts shared transactions begun, for tests and profiling.
	commits atomic.Int64
	// batches, writes and busyNs are what Store.WriterWork reports: the
	// batches run, the write requests they held, and the nanoseconds
	// spent on them (runBatch, from start to end).
	batches, writes, busyNs atomic.Int64
}

// enqueue adds r to the next batch.
func (g *groupCommit) enqueue(r *writeReq) {
	g.mu.Lock()
	g.queue = append(g.queue, r)
	g.mu.Unlock()
}

// withdraw removes r if no leader has taken it yet.
func (g *groupCommit) withdraw(r *writeReq) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, q := range g.queue {
		if q == r {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			return true
		}
	}
	return false
}

// handBack ends the wait of a batch whose leader's context ended while it
// waited for the write lock (beginFailed): the leader's own
// request, in the batch or still queued, gets err (nothing of it was
// run); so does every other whose context has ended too, which its
// caller may be waiting for alone; the rest of the batch goes back to
// the head of the queue, in its order, for a caller of its own to lead
// once the leader gives the writer back. Checking each context under
// the queue's lock leaves none stranded: a caller whose context ends
// after it finds its request queued again (withdraw).
func (g *groupCommit) handBack(leader *writeReq, batch []*writeReq, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	keep := make([]*writeReq, 0, len(batch)+len(g.queue))
	for _, r := range batch {
		switch {
		case r == leader:
			r.done <- writeResult{err: err}
		case r.ctx.Err() != nil:
			r.done <- writeResult{err: fmt.Errorf("begin: %w", r.ctx.Err())}
		default:
			keep = append(keep, r)
		}
	}
	for _, r := range g.queue {
		if r == leader {
			r.done <- writeResult{err: err}
			continue
		}
		keep = append(keep, r)
	}
	g.queue = keep
}

// failQueued answers every queued request with err, none of which has
// run: the store is closed.
func (g *groupCommit) failQueued(err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	answerAll(g.queue, err)
	g.queue = g.queue[:0]
}

// answerAll answers every request of reqs with err.
func answerAll(reqs []*writeReq, err error) {
	for _, r := range reqs {
		r.done <- writeResult{err: err}
	}
}

// take removes up to maxBatch queued requests.
func (g *groupCommit) take() []*writeReq {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := min(len(g.queue), maxBatch)
	batch := make([]*writeReq, n)
	copy(batch, g.queue)
	g.queue = append(g.queue[:0], g.queue[n:]...)
	return batch
}

// Update runs fn in a BEGIN IMMEDIATE transaction on the writer connection,
// possibly shared with concurrent callers' functions (group commit): fn runs
// inside its own savepoint, sees the writes of the functions committed
// before it in the same transaction, and Update returns only once the
// COMMIT covering fn's writes has returned (with synchronous=FULL, once they
// are on disk). An error from fn rolls back fn's writes alone.
func (s *Store) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.settled(s.submit(&writeReq{ctx: ctx, fn: fn, done: make(chan writeResult, 1)}))
}

// submit queues r for the next group commit and waits for its outcome,
// leading the commit when the writer is free.
func (s *Store) submit(r *writeReq) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	ctx := r.ctx
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	s.group.enqueue(r)
	for {
		select {
		case res := <-r.done:
			return res.unwrap()
		case s.wlock <- struct{}{}:
			return s.lead(r)
		case <-ctx.Done():
			if s.group.withdraw(r) {
				return fmt.Errorf("begin: %w", ctx.Err())
			}
			// A leader has fn already: its outcome is coming.
			return (<-r.done).unwrap()
		}
	}
}

// lead commits what is queued, batch after batch, until r has its outcome
// (r is among them, unless an earlier leader already answered it). The
// caller has taken wlock; lead gives it back, even when it panics. Its
// waits for the write lock last no longer than r's context: once that
// ends, r gets its error, and the batch goes back to the queue for
// another caller to lead (handBack).
func (s *Store) lead(r *writeReq) error {
	defer func() { <-s.wlock }()
	for {
		select {
		case res := <-r.done:
			return res.unwrap()
		default:
		}
		if s.closed.Load() {
			// Close has come (or comes now): its statements and
			// connection are closed, or about to be; nothing queued runs.
			s.group.failQueued(fmt.Errorf("begin: %w", store.ErrClosed))
			select {
			case res := <-r.done:
				return res.unwrap()
			default:
				return errors.New("begin: write request lost by a failed group commit")
			}
		}
		batch := s.group.take()
		if len(batch) == 0 {
			// Only a leader that died half-way (a panic outside any write
			// function) can have taken r without answering it.
			return errors.New("begin: write request lost by a failed group commit")
		}
		s.runBatch(r, batch)
	}
}

func (res writeResult) unwrap() error {
	if res.panicked != nil {
		panic(fmt.Sprintf("%v\n\nwrite function panicked inside a group commit:\n%s", res.panicked, res.stack))
	}
	return res.err
}

// runBatch runs batch in one transaction and answers every request,
// holding the file's write lock (writeLock) for that transaction and for
// any that runs the batch again (commitBatch). The waits for that lock
// and for SQLite's share one busy timeout (lockBudget), and end when the
// context of leader, the caller leading the batch, ends. The caller
// holds wlock.
func (s *Store) runBatch(leader *writeReq, batch []*writeReq) {
	start := time.Now()
	defer func() {
		s.group.batches.Add(1)
		s.group.writes.Add(int64(len(batch)))
		s.group.busyNs.Add(int64(time.Since(start)))
	}()
	budget := &lockBudget{leader: leader}
	held, err := s.fileLock.lock(leader.ctx, s.busy)
	if err != nil {
		s.beginFailed(budget, batch, err)
		return
	}
	if held {
		defer s.fileLock.unlock()
	}
	budget.deadline, budget.queued = start.Add(s.busy), time.Since(start)
	// A failure leaves wbusy as it is, and the next BEGIN sets it again.
	defer func() { _ = s.setBusyTimeout(s.busy) }()
	s.commitBatch(batch, false, budget)
}

// lockBudget bounds one batch's wait for the write lock: the wait in the
// file's queue (writeLock) and every wait for SQLite's lock after it, at
// each BEGIN IMMEDIATE of the batch, add up to at most the busy timeout.
// Without it, a write that queued behind other processes and then found
// SQLite's lock held by a writer that does not queue (a sqlite3 shell)
// would wait a second busy timeout for it.
//
// The waits end, too, when the context of the caller leading the batch
// ends: that caller has gone, and the others go back to the queue
// (handBack), where the next leader's wait has a budget of its own.
type lockBudget struct {
	deadline time.Time
	queued   time.Duration // the wait for the file's lock
	leader   *writeReq
}

// beginFailed answers a batch whose wait for the write lock (the file's
// or SQLite's) failed with err: when it ended because the leader's
// context did, the batch goes back to the queue (handBack); otherwise
// every request gets err.
func (s *Store) beginFailed(budget *lockBudget, batch []*writeReq, err error) {
	if ctxErr := budget.leader.ctx.Err(); ctxErr != nil {
		s.group.handBack(budget.leader, batch, fmt.Errorf("begin: %w", ctxErr))
		return
	}
	answerAll(batch, fmt.Errorf("begin: %w", err))
}

// beginTimeout is the busy_timeout of the batch's next BEGIN IMMEDIATE:
// the busy timeout itself while less than a millisecond of it is spent
// (a batch that found the file's lock free and begins once: nothing to
// set), otherwise what is left (cut). That is at least a millisecond
// rather than nothing: BEGIN takes a free lock at once whatever the
// timeout, and a turn this batch queued for is not thrown away without
// one try and one retry a millisecond later.
func (b *lockBudget) beginTimeout(busy time.Duration) (d time.Duration, cut bool) {
	left := time.Until(b.deadline)
	if left > busy-time.Millisecond {
		return busy, false
	}
	return max(left.Truncate(time.Millisecond), time.Millisecond), true
}

// setBusyTimeout sets the writer connection's busy_timeout to d, in whole
// milliseconds, unless it has it already (wbusy): one PRAGMA, a few
// microseconds, only for a batch that queued or runs again.
func (s *Store) setBusyTimeout(d time.Duration) error {
	d = d.Truncate(time.Millisecond)
	if d == s.wbusy {
		return nil
	}
	if _, err := s.wconn.ExecContext(context.Background(), fmt.Sprintf("PRAGMA busy_timeout = %d", d.Milliseconds())); err != nil {
		return fmt.Errorf("set busy_timeout: %w", err)
	}
	s.wbusy = d
	return nil
}

// begin runs the batch's BEGIN IMMEDIATE, waiting for SQLite's lock only
// as long as budget has left, and as long as the leader's context lasts
// (the driver's busy handler gives up once it ends). A wait cut short
// that runs out says so, wrapping SQLite's SQLITE_BUSY, which classify
// makes store.ErrBusy.
func (s *Store) begin(budget *lockBudget) error {
	d, cut := budget.beginTimeout(s.busy)
	if err := s.setBusyTimeout(d); err != nil {
		return err
	}
	// Not detached, unlike the batch's other statements: BEGIN runs
	// nothing of any caller's that an interruption could undo.
	q := &cachedQuerier{cache: s.writeStmts, plain: s.wconn}
	_, err := q.ExecContext(budget.leader.ctx, `BEGIN IMMEDIATE`)
	if err != nil {
		// The driver answers with the context's error when the context
		// ends as the statement completes, a BEGIN that did begin among
		// them: left open, its transaction would fail every later BEGIN
		// of this writer and hold SQLite's lock against every other
		// process. A ROLLBACK without one fails harmlessly.
		_ = rawTx{q}.Rollback()
	}
	if err != nil && cut && isBusy(err) {
		queued := ""
		if budget.queued >= time.Millisecond {
			queued = fmt.Sprintf(", after %s queued on %s", budget.queued.Round(time.Millisecond), s.fileLock.path)
		}
		return fmt.Errorf("another process held SQLite's lock on %s for the %s left of the busy timeout, %s%s: %w",
			s.path, d, s.busy, queued, err)
	}
	return mapErr(err)
}

// commitBatch runs batch in one transaction and answers every request.
// Unless careful, the batch's conditional writes run first and without
// savepoints; if one of them fails in a way only its savepoint could
// undo, nothing has been answered yet, and the batch runs again,
// carefully. Each BEGIN IMMEDIATE waits within budget.
func (s *Store) commitBatch(batch []*writeReq, careful bool, budget *lockBudget) {
	if len(batch) == 0 {
		return
	}
	if !careful && len(batch) > 1 {
		// Writes queued together are concurrent: any order is one they
		// could have arrived in.
		slices.SortStableFunc(batch, func(a, b *writeReq) int {
			return cmp.Compare(boolInt(a.decide == nil), boolInt(b.decide == nil))
		})
	}
	// The transaction belongs to no single caller: one caller's
	// cancellation must not roll back the others' writes.
	bctx := context.Background()
	s.group.commits.Add(1)
	// BEGIN and COMMIT go to the connection as plain statements rather
	// than through database/sql's Tx: Tx.StmtContext prepares a statement
	// that was prepared on a Conn all over again, on every call, so the
	// statement cache only works outside sql.Tx.
	q := &cachedQuerier{cache: s.writeStmts, plain: s.wconn, detach: true}
	if err := s.begin(budget); err != nil {
		s.beginFailed(budget, batch, err)
		return
	}
	tx := rawTx{q}
	if slices.ContainsFunc(batch, func(r *writeReq) bool { return !r.migration }) {
		if err := s.checkSchema(bctx, q); err != nil {
			_ = tx.Rollback()
			answerAll(batch, err)
			return
		}
	}
	results := make([]writeResult, len(batch))
	if len(batch) == 1 {
		// A caller alone needs no savepoint: its error rolls back the
		// whole transaction.
		r := batch[0]
		if err := r.ctx.Err(); err != nil {
			results[0].err = fmt.Errorf("begin: %w", err)
		} else {
			results[0] = runFn(r.ctx, r.fn, &sqlTx{sqlReader: sqlReader{q: q}})
		}
		if results[0].err != nil || results[0].panicked != nil {
			_ = tx.Rollback()
			r.done <- results[0]
			return
		}
	} else {
		for i, r := range batch {
			if err := r.ctx.Err(); err != nil {
				results[i].err = fmt.Errorf("begin: %w", err)
				continue
			}
			if r.decide != nil && !careful {
				var undo bool
				if results[i], undo = runConditional(r, &sqlTx{sqlReader: sqlReader{q: q}}); undo {
					_ = tx.Rollback()
					s.commitBatch(batch, true, budget)
					return
				}
				continue
			}
			if _, err := q.ExecContext(bctx, `SAVEPOINT w`); err != nil {
				s.abort(tx, batch, results, i, fmt.Errorf("begin: %w", mapErr(err)), budget)
				return
			}
			res := runFn(r.ctx, r.fn, &sqlTx{sqlReader: sqlReader{q: q}})
			end := `RELEASE w`
			if res.err != nil || res.panicked != nil {
				end = `ROLLBACK TO w`
			}
			if _, err := q.ExecContext(bctx, end); err != nil {
				// SQLite rolled the whole transaction back under us (an
				// I/O error, a full disk): nothing of this batch survives.
				if res.err == nil && res.panicked == nil {
					res.err = fmt.Errorf("commit: %w", mapErr(err))
				}
				results[i] = res
				s.abort(tx, batch, results, i+1, fmt.Errorf("%w: %w", errBatchAborted, err), budget)
				return
			}
			if end != `RELEASE w` {
				if _, err := q.ExecContext(bctx, `RELEASE w`); err != nil {
					results[i] = res
					s.abort(tx, batch, results, i+1, fmt.Errorf("%w: %w", errBatchAborted, err), budget)
					return
				}
			}
			results[i] = res
		}
	}
	if err := tx.Commit(); err != nil {
		_ = tx.Rollback() // SQLite may leave the transaction open (SQLITE_BUSY)
		err = fmt.Errorf("commit: %w", mapErr(err))
		for i := range results {
			if results[i].err == nil && results[i].panicked == nil {
				results[i].err = err
			}
		}
	}
	for i, r := range batch {
		r.done <- results[i]
	}
}

// checkSchema refuses, at the start of a write transaction, a schema that
// a newer release has migrated past the newest migration this build
// embeds (store.ErrSchemaNewer): this build's writes are made for its own
// schema, and a process of it that was running when the newer release
// migrated the file must stop writing rather than write what the new
// schema no longer means. The transaction holds the write lock, so no
// migration commits before it ends. One read of the table's last row.
func (s *Store) checkSchema(ctx context.Context, q querier) error {
	var current int
	if err := q.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > s.newest {
		return migrate.Newer(current, s.newest)
	}
	return nil
}

// abort rolls back a broken batch: the requests before next that had
// succeeded get err (their writes are gone), those from next on were not run
// and go through a new transaction, within budget.
func (s *Store) abort(tx rawTx, batch []*writeReq, results []writeResult, next int, err error, budget *lockBudget) {
	_ = tx.Rollback()
	for i := range next {
		if results[i].err == nil && results[i].panicked == nil {
			results[i].err = err
		}
		batch[i].done <- results[i]
	}
	s.commitBatch(batch[next:], true, budget)
}

// runFn runs a caller's function, turning a panic into a result that the
// caller re-raises.
func runFn(ctx context.Context, fn func(context.Context, store.Tx) error, tx *sqlTx) (res writeResult) {
	defer func() {
		if p := recover(); p != nil {
			res = writeResult{panicked: p, stack: debug.Stack()}
		}
	}()
	return writeResult{err: fn(ctx, tx)}
}

// rawTx ends a transaction begun with a plain BEGIN on the writer.
type rawTx struct{ q *cachedQuerier }

// Commit runs COMMIT.
func (t rawTx) Commit() error {
	_, err := t.q.ExecContext(context.Background(), `COMMIT`)
	return err
}

// Rollback runs ROLLBACK; it fails harmlessly when SQLite has already
// rolled the transaction back.
func (t rawTx) Rollback() error {
	_, err := t.q.ExecContext(context.Background(), `ROLLBACK`)
	return err
}
