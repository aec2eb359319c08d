package opledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"

	_ "modernc.org/sqlite"
)

// tombstoneRefusingStore fails every tombstone of a key with prefix
// broken, as a store that cannot write one would.
type tombstoneRefusingStore struct {
	store.Store
	broken string
}

type tombstoneRefusingTx struct {
	store.Tx
	broken string
}

func (s tombstoneRefusingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, tombstoneRefusingTx{Tx: tx, broken: s.broken})
	})
}

func (t tombstoneRefusingTx) UpsertTombstone(ctx context.Context, ts *store.Tombstone) error {
	if strings.HasPrefix(ts.Key, t.broken) {
		return errors.New("injected: cannot write this tombstone")
	}
	return t.Tx.UpsertTombstone(ctx, ts)
}

func (t tombstoneRefusingTx) CompactOperations(ctx context.Context, cs []store.Compaction) error {
	for _, c := range cs {
		if strings.HasPrefix(c.Key, t.broken) {
			return errors.New("injected: cannot write this tombstone")
		}
	}
	return t.Tx.CompactOperations(ctx, cs)
}

// agedLedger opens a ledger on dsn with a Retention of an hour and a
// TombstoneRetention of a day, whose clock runs the returned offset ahead
// of the store's: a test moves it to age what the ledger holds.
func agedLedger(t *testing.T, dsn string) (*Ledger, *atomic.Int64) {
	t.Helper()
	var offset atomic.Int64
	l, err := Open(context.Background(), dsn, Options{
		Retention: time.Hour, TombstoneRetention: 24 * time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) },
	})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	return l, &offset
}

// succeedKey records key, claims it and reports it succeeded: one
// finished operation of one attempt.
func succeedKey(t *testing.T, l *Ledger, key string) {
	t.Helper()
	ctx := context.Background()
	c, err := l.Claim(ctx, key, ClaimOptions{Intent: &Intent{Key: key, Action: "a", Destination: "d"}})
	require.NoError(t, err)
	_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, Report{Outcome: OutcomeSucceeded, DestinationRef: "ref"})
	require.NoError(t, err)
}

// claimAndReport claims the recorded operation key and reports r for
// that attempt.
func claimAndReport(t *testing.T, l *Ledger, key string, r Report) {
	t.Helper()
	ctx := context.Background()
	c, err := l.Claim(ctx, key, ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, key, c.AttemptID, c.FencingToken, r)
	require.NoError(t, err)
}

// TestCompactPastFailures: operations Compact cannot compact, more than a
// page of them and the oldest, stop neither the operations after them
// nor the later steps of retention; the error counts them without a key,
// and they are tried again on the next run.
func TestCompactPastFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, offset := agedLedger(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"))
	advance := func(d time.Duration) { offset.Add(int64(d)) }
	succeedKey(t, l, "old")
	advance(2 * time.Hour)
	_, err := l.Compact(ctx) // "old" is a tombstone, forgotten below
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "console", ReadWrite)
	require.NoError(t, err)
	_, _, err = l.OpenSession(ctx, token, time.Minute)
	require.NoError(t, err)
	const broken = 201 // a page is 200
	for i := range broken {
		succeedKey(t, l, fmt.Sprintf("broken:alice%03d", i))
	}
	advance(time.Second)
	succeedKey(t, l, "good")
	advance(25 * time.Hour)

	l.store = tombstoneRefusingStore{Store: l.store, broken: "broken:"}
	res, err := l.Compact(ctx)
	require.ErrorContains(t, err, fmt.Sprintf("compact: %d could not be compacted and are tried again on the next run", broken))
	require.NotContains(t, err.Error(), "alice", "the error is for a log: no key")
	require.Equal(t, 1, res.Tombstoned, "the operation after the failing ones")
	require.Equal(t, 1, res.Forgotten, "tombstones are still forgotten")
	require.Equal(t, 1, res.SessionsExpired, "expired sessions are still deleted")
	good, err := l.Get(ctx, "good")
	require.NoError(t, err)
	require.True(t, good.Tombstoned)

	res, err = l.Compact(ctx)
	require.ErrorContains(t, err, fmt.Sprintf("%d could not be compacted", broken), "tried again")
	require.Zero(t, res.Tombstoned)
}

// tombstoneCountingStore counts, after each write transaction commits,
// the tombstones left in a SQLite file, through a connection of its own,
// and keeps the largest number one transaction removed.
type tombstoneCountingStore struct {
	store.Store
	t       *testing.T
	db      *sql.DB
	last    int
	maxDrop int
}

func (s *tombstoneCountingStore) count() int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.db.QueryRow(`SELECT count(*) FROM tombstones`).Scan(&n))
	return n
}

func (s *tombstoneCountingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	n := s.count()
	s.maxDrop = max(s.maxDrop, s.last-n)
	s.last = n
	return err
}

// TestCompactForgetsTombstonesInBatches: tombstones past
// TombstoneRetention are forgotten retentionBatch at a time, as events and
// workflows are, rather than all in one transaction. A ledger that
// compacts a million operations a day forgets as many tombstones in a run;
// in one transaction that held the store's writer for as long (12.8 s for
// 1,000,000 on SQLite, every write of the API waiting behind it) and grew
// the SQLite WAL by the size of the delete (185 MB), which it keeps.
func TestCompactForgetsTombstonesInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	l, offset := agedLedger(t, "sqlite:"+path)

	const n = 2*retentionBatch + retentionBatch/2
	require.NoError(t, l.store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		now, err := l.now(ctx, tx)
		if err != nil {
			return err
		}
		for i := range n {
			if err := tx.UpsertTombstone(ctx, &store.Tombstone{Tenant: "default", Key: fmt.Sprintf("old:%05d", i),
				Fingerprint: "sha256:x", State: string(StateSucceeded), DestinationRef: "R", Version: 1,
				CreatedAt: now, FinishedAt: now, CompactedAt: now}); err != nil {
				return err
			}
		}
		return nil
	}))
	before, err := l.Stats(ctx, false)
	require.NoError(t, err)
	require.Equal(t, n, before.ConfirmedEffects)
	offset.Add(int64(25 * time.Hour))

	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	counting := &tombstoneCountingStore{Store: l.store, t: t, db: db}
	counting.last = counting.count()
	require.Equal(t, n, counting.last)
	l.store = counting

	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, n, res.Forgotten)
	require.Zero(t, counting.count())
	require.LessOrEqual(t, counting.maxDrop, retentionBatch, "one transaction forgot more than a batch")
	after, err := l.Stats(ctx, false)
	require.NoError(t, err)
	require.Equal(t, before.ConfirmedEffects, after.ConfirmedEffects, "forgetting keeps the totals")
}

// clockMovingStore moves the ledger's clock on by step after each write
// transaction, as time goes by while a long run of Compact writes.
type clockMovingStore struct {
	store.Store
	offset *atomic.Int64
	step   time.Duration
}

func (s clockMovingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	err := s.Store.Update(ctx, fn)
	s.offset.Add(int64(s.step))
	return err
}

// TestCompactRunEndsUnderInflow: a run of Compact compacts the operations
// that were past Retention when it began and leaves those that pass it
// during the run to the next one. It read the horizon again on each page,
// so that under a steady inflow of finished operations (on PostgreSQL,
// 60 a second, compacted more slowly than they finished) one run went on
// for as long as the inflow and never reached the later steps: deliveries,
// events and tombstones were not forgotten while it lasted.
func TestCompactRunEndsUnderInflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, offset := agedLedger(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"))
	const early, late = 250, 250 // more than a page (200) each
	for i := range early {
		succeedKey(t, l, fmt.Sprintf("early:%03d", i))
	}
	offset.Add(int64(10 * time.Minute))
	for i := range late {
		succeedKey(t, l, fmt.Sprintf("late:%03d", i))
	}
	// The early ones are past Retention, the late ones 5 minutes short of
	// it; each transaction of the run (compactBatchSize operations) takes
	// 2 minutes, so that the late ones pass it after the first page.
	offset.Add(int64(55 * time.Minute))
	l.store = clockMovingStore{Store: l.store, offset: offset, step: 2 * time.Minute}

	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, early, res.Tombstoned, "only what was past Retention when the run began")
	late0, err := l.Get(ctx, "late:000")
	require.NoError(t, err)
	require.False(t, late0.Tombstoned)

	res, err = l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, late, res.Tombstoned, "the next run takes the rest")
}

// updateCountingStore counts write transactions.
type updateCountingStore struct {
	store.Store
	updates *atomic.Int64
}

func (s updateCountingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	s.updates.Add(1)
	return s.Store.Update(ctx, fn)
}

// TestCompactBatchesOperations: Compact reduces operations to tombstones
// compactBatchSize to a transaction. One transaction each made a commit
// per operation the cost of compaction (about 35 a second on a loaded
// PostgreSQL, slower than that soak's operations finished), and a ledger
// whose operations finish faster than they are compacted grows for ever.
func TestCompactBatchesOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, offset := agedLedger(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"))
	const n = 2*compactBatchSize + 20
	for i := range n {
		succeedKey(t, l, fmt.Sprintf("k:%03d", i))
	}
	var updates atomic.Int64
	l.store = updateCountingStore{Store: l.store, updates: &updates}
	_, err := l.Compact(ctx) // nothing past Retention yet: the later steps' transactions
	require.NoError(t, err)
	laterSteps := updates.Swap(0)

	offset.Store(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, n, res.Tombstoned)
	require.Zero(t, res.BatchesRetried)
	require.Equal(t, int64(3)+laterSteps, updates.Load(), "%d operations in 3 transactions", n)
}

// TestCompactBatchFailureCountsOnce: when one operation of a batch cannot
// be compacted, the batch's transaction writes nothing, and the others,
// compacted again one at a time, are counted once: the running totals
// equal the ledger's figures before compaction, on both stores.
func TestCompactBatchFailureCountsOnce(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, offset := agedLedger(t, st.NewDSN(t))
			const n = 20
			for i := range n {
				key := fmt.Sprintf("k:%02d", i)
				if i == n/2 {
					key = "broken:" + key
				}
				succeedKey(t, l, key)
			}
			before, err := l.Stats(ctx, true)
			require.NoError(t, err)
			offset.Store(int64(2 * time.Hour))
			l.store = tombstoneRefusingStore{Store: l.store, broken: "broken:"}
			res, err := l.Compact(ctx)
			require.ErrorContains(t, err, "1 could not be compacted")
			require.Equal(t, n-1, res.Tombstoned)
			require.Equal(t, 1, res.BatchesRetried, "the batch, compacted again one at a time")
			after, err := l.Stats(ctx, true)
			require.NoError(t, err)
			require.Equal(t, n, after.ConfirmedEffects, "the compacted ones and the one left, each once")
			require.Equal(t, before.Attempts, after.Attempts)
			require.Equal(t, 1, after.OperationsByState[StateSucceeded])
		})
	}
}

// TestCompactLocksWorkflowBeforeStep: on PostgreSQL, compaction takes a
// workflow's row lock before its step's, in the order of every workflow
// transaction, so that it never deadlocks with one. A connection holds
// the workflow row, as a workflow transaction would; compaction waits
// for it, the connection then takes the first step's row, as resuming
// the workflow would, and gets it at once: compaction had not locked the
// step first. Before, compaction held the step and waited for the
// workflow, PostgreSQL broke the deadlock after deadlock_timeout, and
// the batch was compacted again one operation at a time.
func TestCompactLocksWorkflowBeforeStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, offset := agedLedger(t, dsn)
	_, _, err := l.PutWorkflow(ctx, "wf:1", WorkflowSpec{Steps: []WorkflowStep{
		{Name: "one", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":1}`)},
		{Name: "two", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":2}`)},
	}})
	require.NoError(t, err)
	claimAndReport(t, l, "wf:1/one", Report{Outcome: OutcomeSucceeded, DestinationRef: "ref"})
	_, err = l.AdvanceWorkflowOf(ctx, "wf:1/one")
	require.NoError(t, err)
	claimAndReport(t, l, "wf:1/two", Report{Outcome: OutcomeRejected, Error: "refused"})
	w, err := l.GetWorkflow(ctx, "wf:1")
	require.NoError(t, err)
	require.Equal(t, "two", w.CurrentStep, "the failed step is the current one: the workflow's steps are compacted")
	offset.Store(int64(2 * time.Hour))

	res := compactWhileWorkflowHeld(t, l, dsn, "wf:1", func(holder pgx.Tx) {
		_, err := holder.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'wf:1/one' FOR UPDATE`)
		require.NoError(t, err, "the step was free: compaction waits for the workflow first")
	})
	require.Equal(t, 2, res.Tombstoned)
	require.Zero(t, res.BatchesRetried, "no deadlock broke the batch")
}

// compactWhileWorkflowHeld runs Compact while a connection holds the row
// of workflow key, as a workflow transaction would; once compaction waits
// for it, check runs in the holder's transaction, which then commits.
// It returns what Compact did.
func compactWhileWorkflowHeld(t *testing.T, l *Ledger, dsn, key string, check func(holder pgx.Tx)) CompactResult {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	var one int
	require.NoError(t, holder.QueryRow(ctx, `SELECT 1 FROM workflows WHERE key = $1 FOR UPDATE`, key).Scan(&one))

	type compacted struct {
		res CompactResult
		err error
	}
	done := make(chan compacted, 1)
	go func() {
		res, err := l.Compact(ctx)
		done <- compacted{res, err}
	}()
	testdb.WaitBlockedBy(t, conn, "compaction")
	check(holder)
	require.NoError(t, holder.Commit(ctx))
	got := <-done
	require.NoError(t, got.err)
	return got.res
}

// TestCompactLocksWorkflowsBeforeOperations: on PostgreSQL, compaction
// reads (and locks) the workflows of its batch before any operation of
// the batch, so that it never holds an operation while it waits for a
// workflow: an event whose rule writes a plain key after a workflow's
// step holds the workflow and would wait for that operation. A
// connection holds the workflow row, as such an event would; compaction
// waits for it, and the connection then gets the batch's other
// operations at once. Before, compaction locked the plain operations
// first and then waited for the workflow holding them (the connection's
// NOWAIT failed), a deadlock that deadlock_timeout broke.
func TestCompactLocksWorkflowsBeforeOperations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, offset := agedLedger(t, dsn)
	succeedKey(t, l, "p")
	succeedKey(t, l, "orders/1")
	_, _, err := l.PutWorkflow(ctx, "wf:1", WorkflowSpec{Steps: []WorkflowStep{
		{Name: "one", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":1}`)},
	}})
	require.NoError(t, err)
	claimAndReport(t, l, "wf:1/one", Report{Outcome: OutcomeSucceeded, DestinationRef: "ref"})
	_, err = l.AdvanceWorkflowOf(ctx, "wf:1/one")
	require.NoError(t, err)
	offset.Store(int64(2 * time.Hour))

	res := compactWhileWorkflowHeld(t, l, dsn, "wf:1", func(holder pgx.Tx) {
		_, err := holder.Exec(ctx, `SELECT 1 FROM operations WHERE key IN ('p', 'orders/1') FOR UPDATE NOWAIT`)
		require.NoError(t, err, "the operations were free: compaction waits for the workflow before it locks any operation")
	})
	require.Equal(t, 3, res.Tombstoned)
	require.Zero(t, res.BatchesRetried, "no deadlock broke the batch")
}

// TestCompactWaitsForNoOperation: on PostgreSQL, compaction leaves out
// an operation outside workflows whose key has the shape of a step
// ("orders/1") while another transaction holds it, as it does any other
// operation, instead of waiting for it while it holds the rest of its
// batch: an event whose rule writes "orders/1" and then a key of that
// batch held "orders/1" and waited for compaction, which waited for it.
// A connection holds "orders/1"; compaction finishes without waiting
// and takes it on the next run.
func TestCompactWaitsForNoOperation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, offset := agedLedger(t, dsn)
	succeedKey(t, l, "p")
	succeedKey(t, l, "orders/1")
	offset.Store(int64(2 * time.Hour))

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	holder, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(ctx)
	var one int
	require.NoError(t, holder.QueryRow(ctx, `SELECT 1 FROM operations WHERE key = 'orders/1' FOR UPDATE`).Scan(&one))

	type compacted struct {
		res CompactResult
		err error
	}
	done := make(chan compacted, 1)
	go func() {
		res, err := l.Compact(ctx)
		done <- compacted{res, err}
	}()
	watcher, err := pgx.Connect(ctx, testdb.PostgresBase())
	require.NoError(t, err)
	defer watcher.Close(ctx)
	var got compacted
	for waited := false; !waited; {
		select {
		case got = <-done:
			waited = true
			continue
		case <-time.After(10 * time.Millisecond):
		}
		var blocked int
		require.NoError(t, watcher.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`,
			conn.PgConn().PID()).Scan(&blocked))
		if blocked > 0 {
			_, err := holder.Exec(ctx, `SELECT 1 FROM operations WHERE key = 'p' FOR UPDATE NOWAIT`)
			require.NoError(t, holder.Rollback(ctx)) // let compaction end
			<-done
			require.NoError(t, err, "compaction waited for orders/1")
			t.Fatal("compaction waited for orders/1, holding p")
		}
	}
	require.NoError(t, got.err)
	require.Equal(t, 1, got.res.Tombstoned, "p; orders/1 is held: left to the next run")
	require.NoError(t, holder.Rollback(ctx))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
}

// TestCompactSkipsHeldOperations: on PostgreSQL, compaction leaves out an
// operation another transaction holds (a person deciding about it, or
// another process compacting it) instead of waiting for it, compacts the
// rest of its batch, and takes it on the next run. It used to wait until
// the holder let go (here, past the test's deadline).
func TestCompactSkipsHeldOperations(t *testing.T) {
	t.Parallel()
	dsn := testdb.PostgresDSN(t)
	l, offset := agedLedger(t, dsn)
	for _, key := range []string{"a", "b", "c"} {
		succeedKey(t, l, key)
	}
	before, err := l.Stats(context.Background(), true)
	require.NoError(t, err)
	offset.Store(int64(2 * time.Hour))
	release := testdb.HoldLock(t, dsn, DefaultTenant, "b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a guard against the wait, not a pause
	defer cancel()
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, res.Tombstoned)
	require.Zero(t, res.BatchesRetried)
	b, err := l.Get(ctx, "b")
	require.NoError(t, err)
	require.False(t, b.Tombstoned, "held: left to the next run")
	release()

	res, err = l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	after, err := l.Stats(ctx, true)
	require.NoError(t, err)
	require.Equal(t, before.ConfirmedEffects, after.ConfirmedEffects)
	require.Equal(t, before.Attempts, after.Attempts)
}

// workflowReadCountingStore counts the workflow rows read inside write
// transactions.
type workflowReadCountingStore struct {
	store.Store
	reads *atomic.Int64
}

type workflowReadCountingTx struct {
	store.Tx
	reads *atomic.Int64
}

func (s workflowReadCountingStore) Update(ctx context.Context, fn func(context.Context, store.Tx) error) error {
	return s.Store.Update(ctx, func(ctx context.Context, tx store.Tx) error {
		return fn(ctx, workflowReadCountingTx{Tx: tx, reads: s.reads})
	})
}

func (t workflowReadCountingTx) GetWorkflow(ctx context.Context, tenant, key string) (*store.Workflow, error) {
	t.reads.Add(1)
	return t.Tx.GetWorkflow(ctx, tenant, key)
}

// TestCompactReadsAWorkflowOnce: a batch that holds several steps of
// one workflow reads whether the workflow keeps them once, not once per
// step (on PostgreSQL, a round trip each, and the workflow's current
// step locked again), whether the workflow keeps its steps or not.
func TestCompactReadsAWorkflowOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, offset := agedLedger(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"))
	steps := []WorkflowStep{
		{Name: "one", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":1}`)},
		{Name: "two", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":2}`)},
		{Name: "three", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":3}`)},
		{Name: "four", Action: "send", Destination: "email", Payload: json.RawMessage(`{"n":4}`)},
	}
	// "done" finished all four steps; "going" is at its fourth, pending:
	// it keeps its three succeeded steps.
	for _, wk := range []string{"done", "going"} {
		_, _, err := l.PutWorkflow(ctx, wk, WorkflowSpec{Steps: steps})
		require.NoError(t, err)
		for i, s := range steps {
			if wk == "going" && i == len(steps)-1 {
				break
			}
			claimAndReport(t, l, WorkflowStepKey(wk, s.Name), Report{Outcome: OutcomeSucceeded, DestinationRef: "ref"})
			_, err = l.AdvanceWorkflowOf(ctx, WorkflowStepKey(wk, s.Name))
			require.NoError(t, err)
		}
	}
	w, err := l.GetWorkflow(ctx, "done")
	require.NoError(t, err)
	require.Equal(t, WorkflowSucceeded, w.Status)

	offset.Store(int64(2 * time.Hour))
	var reads atomic.Int64
	l.store = workflowReadCountingStore{Store: l.store, reads: &reads}
	ids := []store.OperationID{}
	for _, wk := range []string{"done", "going"} {
		for _, s := range steps {
			ids = append(ids, store.OperationID{Tenant: DefaultTenant, Key: WorkflowStepKey(wk, s.Name)})
		}
	}
	n, err := l.compactTx(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, len(steps), n, "the finished workflow's steps; the other keeps its own")
	require.Equal(t, int64(2), reads.Load(), "one read per workflow")
	kept, err := l.Get(ctx, "going/one")
	require.NoError(t, err)
	require.False(t, kept.Tombstoned)
}
