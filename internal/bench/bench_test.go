package bench

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
)

// TestProxyMode runs protected requests through the Idempotency-Key proxy
// for a moment on SQLite: operations happen, and the upstream got exactly
// one request per protected operation the bench counted (Run fails
// otherwise; the cell says it too).
func TestProxyMode(t *testing.T) {
	t.Parallel()
	cells, err := Run(context.Background(), Config{
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "bench.db"),
		Concurrency: []int{1, 4},
		Duration:    time.Second,
		Mode:        ModeProxy,
	})
	require.NoError(t, err)
	require.Len(t, cells, 2)
	for _, c := range cells {
		require.Equal(t, ModeProxy, c.Mode)
		require.Equal(t, "sqlite", c.Store)
		require.Positive(t, c.Ops, "c=%d", c.Concurrency)
		require.Equal(t, c.Ops, c.UpstreamRequests, "c=%d: one upstream request per protected operation", c.Concurrency)
		require.Positive(t, c.FloorOps)
		requireMeasuredAgainstLibrary(t, c)
	}
}

// TestHTTPModeAgainstLibrary: in the http mode every round measures the
// library too, and the cell divides the mode's throughput by it within
// each round (the median of those ratios, each round's listed); the
// library mode measures no library of its own.
func TestHTTPModeAgainstLibrary(t *testing.T) {
	t.Parallel()
	cells, err := Run(context.Background(), Config{
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "bench.db"),
		Concurrency: []int{2},
		Duration:    200 * time.Millisecond,
		Mode:        ModeHTTP,
		Rounds:      2,
	})
	require.NoError(t, err)
	require.Len(t, cells, 1)
	c := cells[0]
	require.Equal(t, ModeHTTP, c.Mode)
	require.Positive(t, c.Ops)
	requireMeasuredAgainstLibrary(t, c)
	require.Len(t, c.RatioToLibraryRounds, 2, "one ratio per round")
	require.InDelta(t, (c.RatioToLibraryRounds[0]+c.RatioToLibraryRounds[1])/2, c.RatioToLibrary, 1e-12, "the median of the rounds' ratios")

	library, err := Run(context.Background(), Config{
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "bench.db"),
		Concurrency: []int{2},
		Duration:    100 * time.Millisecond,
		Rounds:      2,
	})
	require.NoError(t, err)
	require.Zero(t, library[0].LibraryOpsPerSec)
	require.Zero(t, library[0].RatioToLibrary)
	require.Empty(t, library[0].RatioToLibraryRounds)
}

// requireMeasuredAgainstLibrary checks the library figures of a cell of
// the http or proxy mode measured in one round, or the consistency of
// their medians in several: the library completed operations, and the
// ratio is the mode's throughput over the library's.
func requireMeasuredAgainstLibrary(t *testing.T, c Cell) {
	t.Helper()
	require.Positive(t, c.LibraryOpsPerSec, "c=%d: the library was measured", c.Concurrency)
	require.Positive(t, c.LibraryP99ms, "c=%d", c.Concurrency)
	require.Positive(t, c.RatioToLibrary, "c=%d", c.Concurrency)
	if c.Rounds == 1 {
		require.InDelta(t, c.OpsPerSec/c.LibraryOpsPerSec, c.RatioToLibrary, 1e-9, "c=%d: the mode's throughput over the library's", c.Concurrency)
	}
}

// TestRandomKeys: with KeysRandom every protected operation gets a key of
// 48 random hex digits, which follow each other in no order; with
// KeysSequential the keys of a run share a prefix and count up.
func TestRandomKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "bench.db"), opledger.Options{Worker: "bench"})
	require.NoError(t, err)
	defer l.Close()
	keysOf := func(keys Keys) []string {
		t.Helper()
		op, stop, err := protectedOp(ctx, l, ModeLibrary, keys, 1, nil)
		require.NoError(t, err)
		defer stop()
		before, err := l.List(ctx, opledger.ListOptions{Limit: opledger.MaxListLimit})
		require.NoError(t, err)
		for i := range 20 {
			require.NoError(t, op(ctx, 0, int64(i)))
		}
		page, err := l.List(ctx, opledger.ListOptions{Limit: opledger.MaxListLimit})
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, o := range before.Items {
			seen[o.Key] = true
		}
		var out []string
		for _, o := range page.Items {
			if !seen[o.Key] {
				out = append(out, o.Key)
			}
		}
		require.Len(t, out, 20)
		slices.Reverse(out) // List is newest first
		return out
	}
	random := keysOf(KeysRandom)
	for _, k := range random {
		require.Regexp(t, `^bench:[0-9a-f]{48}$`, k)
	}
	require.False(t, slices.IsSorted(random), "random keys are in no order: %v", random)
	sequential := keysOf(KeysSequential)
	prefix := sequential[0][:strings.LastIndex(sequential[0], ":")+1]
	for i, k := range sequential {
		require.Equal(t, prefix+strconv.Itoa(i+1), k)
	}
}

func TestUnknownMode(t *testing.T) {
	t.Parallel()
	_, err := Run(context.Background(), Config{Mode: "grpc"})
	require.EqualError(t, err, `mode must be library, http or proxy (got "grpc")`)
}

// TestWarmUpAnalyzes: on PostgreSQL the warm-up runs its protected
// operations through the ledger and leaves the tables analyzed, which the
// catalog shows (pg_class.reltuples is set by ANALYZE).
func TestWarmUpAnalyzes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{Worker: "bench"})
	require.NoError(t, err)
	defer l.Close()
	op, stop, err := protectedOp(ctx, l, ModeLibrary, KeysSequential, 8, nil)
	require.NoError(t, err)
	defer stop()
	n, err := warmUp(ctx, dsn, op)
	require.NoError(t, err)
	require.EqualValues(t, warmUpOps, n)
	counts, err := l.CountByState(ctx)
	require.NoError(t, err)
	require.Equal(t, warmUpOps, counts[opledger.StateSucceeded])

	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var tuples float64
	require.NoError(t, conn.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'operations'::regclass`).Scan(&tuples))
	require.EqualValues(t, warmUpOps, tuples, "operations analyzed")
}

// TestRunMeasuresReferences: a short run at c=4 measures the reference on
// both stores and the batched reference on SQLite alone (Run itself fails
// unless bench_reference holds one done row per reference operation).
func TestRunMeasuresReferences(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"sqlite", "postgres"} {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			dsn := "sqlite:" + filepath.Join(t.TempDir(), "bench.db")
			if store == "postgres" {
				testdb.RequirePostgres(t)
				dsn = testdb.PostgresBase() // Run makes a fresh schema of its own
			}
			cells, err := Run(context.Background(), Config{DSN: dsn, Concurrency: []int{4}, Duration: time.Second})
			require.NoError(t, err)
			require.Len(t, cells, 1)
			c := cells[0]
			require.Equal(t, store, c.Store)
			require.Positive(t, c.Ops)
			require.Positive(t, c.ReferenceOpsPerSec)
			require.Positive(t, c.ReferenceP99ms)
			require.InDelta(t, c.OpsPerSec/c.ReferenceOpsPerSec, c.RatioToReference, 1e-9)
			if store == "sqlite" {
				require.Positive(t, c.BatchedReferenceOpsPerSec)
				require.Positive(t, c.BatchedReferenceP99ms)
				require.InDelta(t, c.OpsPerSec/c.BatchedReferenceOpsPerSec, c.RatioToBatchedReference, 1e-9)
				// The writer's work during the protected operations: a
				// share of their time, and at least one write a batch.
				require.Positive(t, c.WriterBusy)
				require.LessOrEqual(t, c.WriterBusy, 1.0)
				require.GreaterOrEqual(t, c.WritesPerBatch, 1.0)
			} else {
				require.Zero(t, c.BatchedReferenceOpsPerSec, "no batched reference on PostgreSQL")
				require.Zero(t, c.RatioToBatchedReference)
				require.Zero(t, c.WriterBusy, "no one writer on PostgreSQL")
				require.Zero(t, c.WritesPerBatch)
			}
		})
	}
}

// TestReferencesLeaveEveryRowDone runs the reference (and on SQLite the
// batched reference) closed-loop at c=4 on a fresh store, then reads
// bench_reference directly: one row per operation counted, each done with
// its result and completion time.
func TestReferencesLeaveEveryRowDone(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			base, err := newBaselines(ctx, dsn)
			require.NoError(t, err)
			defer base.close()
			ops, _, err := loop(ctx, 4, 200*time.Millisecond, base.reference, func(time.Duration) {})
			require.NoError(t, err)
			require.Positive(t, ops)
			if st.Name == "sqlite" {
				require.NotNil(t, base.batchedReference)
				batched, _, err := loop(ctx, 4, 200*time.Millisecond, base.batchedReference, func(time.Duration) {})
				require.NoError(t, err)
				require.Positive(t, batched)
				ops += batched
			} else {
				require.Nil(t, base.batchedReference)
			}

			const count = `SELECT count(*), count(*) FILTER (WHERE state = 'done' AND result = '` + referenceResult + `'
				AND completed_at IS NOT NULL AND completed_at >= claimed_at) FROM bench_reference`
			var rows, done int64
			if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
				db, err := sql.Open("sqlite", "file:"+path)
				require.NoError(t, err)
				defer db.Close()
				require.NoError(t, db.QueryRowContext(ctx, count).Scan(&rows, &done))
			} else {
				conn, err := pgx.Connect(ctx, dsn)
				require.NoError(t, err)
				defer conn.Close(ctx)
				require.NoError(t, conn.QueryRow(ctx, count).Scan(&rows, &done))
			}
			require.Equal(t, ops, rows, "one row per reference operation counted")
			require.Equal(t, rows, done, "every row done")
		})
	}
}

// TestBatcherIsolatesCallersErrors: in one shared transaction, a claim of a
// key already claimed and a complete of a key never claimed are their
// callers' errors, and the other callers' writes commit; a statement that
// fails outright fails every caller of its batch, and none of its writes
// commit.
func TestBatcherIsolatesCallersErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := openSQLiteWriter(filepath.Join(t.TempDir(), "bench.db"))
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, sqliteReferenceTable)
	require.NoError(t, err)
	claim, err := db.PrepareContext(ctx, sqliteReferenceClaim)
	require.NoError(t, err)
	complete, err := db.PrepareContext(ctx, sqliteReferenceComplete)
	require.NoError(t, err)
	_, err = claim.ExecContext(ctx, "taken", "first", 1)
	require.NoError(t, err)
	b := newBatcher(db)

	write := func(st *sql.Stmt, args ...any) *batchedWrite {
		return &batchedWrite{st: st, args: args, done: make(chan error, 1)}
	}
	batch := []*batchedWrite{
		write(claim, "a", "w1", 2),
		write(claim, "taken", "w2", 2),
		write(complete, referenceResult, 3, "never-claimed"),
		write(claim, "c", "w3", 2),
		write(complete, referenceResult, 3, "a"),
	}
	b.commit(batch)
	want := []error{nil, errNoRowChanged, errNoRowChanged, nil, nil}
	for i, w := range batch {
		require.Equal(t, want[i], <-w.done, "write %d", i)
	}
	state := func(k string) (state, worker string) {
		err := db.QueryRowContext(ctx, `SELECT state, worker FROM bench_reference WHERE k = ?`, k).Scan(&state, &worker)
		if errors.Is(err, sql.ErrNoRows) {
			return "", ""
		}
		require.NoError(t, err)
		return state, worker
	}
	for k, want := range map[string][2]string{"a": {"done", "w1"}, "taken": {"claimed", "first"}, "c": {"claimed", "w3"}, "never-claimed": {"", ""}} {
		s, w := state(k)
		require.Equal(t, want, [2]string{s, w}, k)
	}

	// worker is NOT NULL: that claim fails as a statement, and takes its
	// whole batch with it.
	batch = []*batchedWrite{write(claim, "d", "w1", 4), write(claim, "e", nil, 4)}
	b.commit(batch)
	for i, w := range batch {
		require.Error(t, <-w.done, "write %d", i)
	}
	s, _ := state("d")
	require.Empty(t, s, "the failed batch's writes are rolled back")

	// Through write: callers queued while another holds the writer share
	// the next transaction; the one whose claim conflicts gets its error,
	// the others their rows.
	b.lock <- struct{}{}
	keys := []string{"f", "taken", "g"}
	errs := make([]chan error, len(keys))
	for i, k := range keys {
		errs[i] = make(chan error, 1)
		go func() { errs[i] <- b.write(claim, k, "w"+strconv.Itoa(i), 5) }()
	}
	for queued := 0; queued < len(keys); runtime.Gosched() {
		b.mu.Lock()
		queued = len(b.queue)
		b.mu.Unlock()
	}
	<-b.lock
	require.NoError(t, <-errs[0])
	require.ErrorIs(t, <-errs[1], errNoRowChanged)
	require.NoError(t, <-errs[2])
	for _, k := range []string{"f", "g"} {
		s, _ := state(k)
		require.Equal(t, "claimed", s, k)
	}
}

// TestMedianCell: rounds combine into one cell whose rates, latencies and
// ratios are the medians of the rounds' (the mean of the middle two for an
// even number), whose counts are sums, and which lists each round's ratio
// to the floor in the order they ran.
func TestMedianCell(t *testing.T) {
	t.Parallel()
	round := func(ops int64, opsPerSec, ratio, p99, rss float64) Cell {
		return Cell{Mode: ModeLibrary, Store: "sqlite", Concurrency: 8, Ops: ops, OpsPerSec: opsPerSec, P99ms: p99,
			FloorOps: 2 * ops, RatioToFloor: ratio, ReferenceOpsPerSec: opsPerSec / 2, RSSMB: rss, Rounds: 1, UpstreamRequests: ops,
			LibraryOpsPerSec: 2 * opsPerSec, RatioToLibrary: ratio + 0.1}
	}
	got := medianCell([]Cell{round(100, 1000, 0.5, 9, 30), round(300, 3000, 0.2, 3, 31), round(200, 2000, 0.4, 5, 32)})
	require.Equal(t, 3, got.Rounds)
	require.EqualValues(t, 600, got.Ops)
	require.EqualValues(t, 1200, got.FloorOps)
	require.EqualValues(t, 600, got.UpstreamRequests)
	require.Equal(t, 2000.0, got.OpsPerSec)
	require.Equal(t, 0.4, got.RatioToFloor, "the median ratio, not the ratio of the medians")
	require.Equal(t, 5.0, got.P99ms)
	require.Equal(t, 1000.0, got.ReferenceOpsPerSec)
	require.Equal(t, []float64{0.5, 0.2, 0.4}, got.RatioToFloorRounds)
	require.Equal(t, 4000.0, got.LibraryOpsPerSec)
	require.Equal(t, 0.5, got.RatioToLibrary)
	require.Equal(t, []float64{0.6, 0.30000000000000004, 0.5}, got.RatioToLibraryRounds)
	require.Equal(t, 32.0, got.RSSMB, "read after the last round")
	require.Equal(t, 8, got.Concurrency)

	even := medianCell([]Cell{round(1, 1000, 0.5, 9, 30), round(1, 3000, 0.2, 3, 31)})
	require.Equal(t, 2000.0, even.OpsPerSec)
	require.InDelta(t, 0.35, even.RatioToFloor, 1e-12)

	one := round(5, 50, 0.1, 1, 20)
	require.Equal(t, one, medianCell([]Cell{one}), "a single round is its own cell")
}

// TestRunRounds: with Rounds set, Run measures each concurrency that many
// times and returns one cell for it.
func TestRunRounds(t *testing.T) {
	t.Parallel()
	cells, err := Run(context.Background(), Config{
		DSN:         "sqlite:" + filepath.Join(t.TempDir(), "bench.db"),
		Concurrency: []int{2},
		Duration:    100 * time.Millisecond,
		Rounds:      2,
	})
	require.NoError(t, err)
	require.Len(t, cells, 1)
	c := cells[0]
	require.Equal(t, 2, c.Rounds)
	require.Len(t, c.RatioToFloorRounds, 2)
	require.InDelta(t, (c.RatioToFloorRounds[0]+c.RatioToFloorRounds[1])/2, c.RatioToFloor, 1e-12)
	require.Positive(t, c.Ops)
	require.Equal(t, 0.1, c.DurationSeconds, "one round's measuring time")
	require.InDelta(t, 0.2, c.MeasuredSeconds, 1e-12, "both rounds' measuring time, in which Ops were counted")
}

// TestMeasuredSeconds: a cell's ops reconcile with its measured time. One
// round: ops / measured_seconds is ops_per_sec. Several: ops and
// measured_seconds are sums, so their ratio is the rounds' mean rate,
// while ops_per_sec is their median.
func TestMeasuredSeconds(t *testing.T) {
	t.Parallel()
	round := func(ops int64) Cell {
		return Cell{Ops: ops, OpsPerSec: float64(ops) / 2, DurationSeconds: 2, MeasuredSeconds: 2, Rounds: 1}
	}
	one := medianCell([]Cell{round(100)})
	require.Equal(t, one.OpsPerSec, float64(one.Ops)/one.MeasuredSeconds)

	got := medianCell([]Cell{round(100), round(400), round(160)})
	require.EqualValues(t, 660, got.Ops)
	require.Equal(t, 2.0, got.DurationSeconds)
	require.Equal(t, 6.0, got.MeasuredSeconds)
	require.Equal(t, 80.0, got.OpsPerSec, "the median round")
	require.Equal(t, 110.0, float64(got.Ops)/got.MeasuredSeconds, "the mean rate over the rounds")
}

// TestQuantileNearestRank: the q-quantile is the ceil(q·n)-th smallest
// latency, so that p99 of a small sample is its largest, not the one
// below it.
func TestQuantileNearestRank(t *testing.T) {
	t.Parallel()
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	ten := []int{10, 1, 9, 2, 8, 3, 7, 4, 6, 5} // 1…10 ms, unsorted
	for _, tc := range []struct {
		lats []time.Duration
		q    float64
		want float64
	}{
		{nil, 0.99, 0},
		{ms(7), 0.5, 7},
		{ms(7), 0.99, 7},
		{ms(1, 2), 0.5, 1},
		{ms(1, 2), 0.99, 2},
		{ms(ten...), 0.5, 5},
		{ms(ten...), 0.9, 9},
		{ms(ten...), 0.99, 10},
		{ms(ten...), 1, 10},
		{ms(ten...), 0, 1},
	} {
		require.Equal(t, tc.want, Quantile(tc.lats, tc.q), "q=%v of %v", tc.q, tc.lats)
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(100-i) * time.Millisecond
	}
	require.Equal(t, 99.0, Quantile(hundred, 0.99))
	require.Equal(t, 50.0, Quantile(hundred, 0.5))
}

// TestLoopNHugeCount: a count far beyond what memory holds sizes no
// allocation: the loop runs until its first error, which it returns.
func TestLoopNHugeCount(t *testing.T) {
	t.Parallel()
	errStop := errors.New("stop")
	var calls atomic.Int64
	_, err := loopN(context.Background(), 1, math.MaxInt64-1, func(context.Context) error {
		if calls.Add(1) == 3 {
			return errStop
		}
		return nil
	}, func() {})
	require.ErrorIs(t, err, errStop)
	require.EqualValues(t, 3, calls.Load())

	lats, err := loopN(context.Background(), 3, 10, func(context.Context) error { return nil }, func() {})
	require.NoError(t, err)
	require.Len(t, lats, 10)

	_, err = ServeRSS(context.Background(), ServeRSSConfig{Ops: 9_000_000_000_000_000_000, Binary: filepath.Join(t.TempDir(), "absent")})
	require.EqualError(t, err, "serve-rss takes 2 to 100000000 operations (got 9000000000000000000)")
}

// TestSQLiteDSNTakenAsOpenTakesIt: the bench finds, refuses, writes and
// removes the file of a sqlite: DSN exactly as opledger.Open names it. A
// '#' or '?' in the name is part of it: "sqlite:DIR/prod#x.db" must
// neither write its tables into an existing DIR/prod nor leave anything
// behind.
func TestSQLiteDSNTakenAsOpenTakesIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	prod := filepath.Join(dir, "prod")
	l, err := opledger.Open(ctx, "sqlite:"+prod, opledger.Options{})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	before, err := os.ReadFile(prod)
	require.NoError(t, err)

	for _, name := range []string{"prod#x.db", "prod?.db"} {
		// Long enough for an operation to complete on a loaded machine
		// (100 ms counted none once, with the test suite running beside it).
		cells, err := Run(ctx, Config{DSN: "sqlite:" + filepath.Join(dir, name), Concurrency: []int{1},
			Duration: 500 * time.Millisecond, Preload: 10})
		require.NoError(t, err, name)
		require.Len(t, cells, 1)
		require.Positive(t, cells[0].Ops, name)
		require.Positive(t, cells[0].FloorOps, name)
	}
	after, err := os.ReadFile(prod)
	require.NoError(t, err)
	require.Equal(t, before, after, "the existing file is left as it was")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	// prod's own write lock file, which its migration made, stays.
	require.Equal(t, []string{"prod", "prod" + sqlitestore.WriteLockSuffix}, names, "the bench's files are removed afterwards")
}

// TestSQLiteSlashesDSN: sqlite://PATH names PATH, as for opledger.Open: a
// bench on a new one runs (and removes it), and an existing file there,
// here another application's database, is refused before anything opens
// it. (Not parallel: it changes the working directory, as a relative
// PATH needs.)
func TestSQLiteSlashesDSN(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	// As in TestSQLiteDSNTakenAsOpenTakesIt, long enough for an operation
	// to complete on a loaded machine: 100 ms counted none in 3 of 6 runs
	// beside the full suite, where the first one took up to 99 ms.
	cells, err := Run(ctx, Config{DSN: "sqlite://new.db", Concurrency: []int{1}, Duration: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Positive(t, cells[0].Ops)
	_, err = os.Stat(filepath.Join(dir, "new.db"))
	require.ErrorIs(t, err, os.ErrNotExist, "removed afterwards")

	db, err := sql.Open("sqlite", filepath.Join(dir, "user.db"))
	require.NoError(t, err)
	_, err = db.Exec(`CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	before, err := os.ReadFile(filepath.Join(dir, "user.db"))
	require.NoError(t, err)
	for _, dsn := range []string{"sqlite://user.db", "sqlite:user.db"} {
		_, err = Run(ctx, Config{DSN: dsn, Concurrency: []int{1}, Duration: 100 * time.Millisecond})
		require.EqualError(t, err, "bench needs a fresh ledger: user.db exists", dsn)
	}
	after, err := os.ReadFile(filepath.Join(dir, "user.db"))
	require.NoError(t, err)
	require.Equal(t, before, after, "the existing file is left as it was")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no WAL or other file made next to it")

	_, err = Run(ctx, Config{DSN: "sqlite://"})
	require.EqualError(t, err, "sqlite:// names no file: give sqlite:PATH of a file that does not exist yet")
}
