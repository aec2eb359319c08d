// Package bench measures opledger: closed-loop protected operations (intent
// recorded and claimed in one transaction, a no-op action, the outcome
// recorded) against the floor of one plain INSERT per operation on the same
// store, in the same run. On SQLite it also measures the batched floor: the
// same plain INSERTs from concurrent callers written in shared transactions
// (group commit), the best a single-writer database can do with one fsync
// per commit. And it measures the reference workloads of the issue that set
// the targets: a naive claim + complete per operation in two durable
// transactions without opledger (the reference), and on SQLite the same
// with concurrent callers' writes batched into shared transactions (the
// batched reference). opledger bench is its command line.
//
// Modes: library (the ledger in process), http (the HTTP API on loopback),
// proxy (the Idempotency-Key proxy on loopback in front of a trivial
// upstream). In the http and proxy modes every round also measures the
// library mode's protected operations on the same ledger, next to the
// mode's own, so that a mode is compared with the library at the speed
// the machine had in that round.
//
// Allowed imports: opledger and its public packages, the SQL drivers, the
// synthetic loaders of internal/store/sqlitestore and pgstore, and
// sqlitestore's DSNPath and FileURI, so that the bench reads a sqlite: DSN
// and opens its file exactly as opledger.Open does.
package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/proxy"
	"github.com/opledger/opledger/server"
)

// Mode is what a protected operation goes through.
type Mode string

// The modes.
const (
	// ModeLibrary calls the ledger in process: Claim with the intent inline, then Report.
	ModeLibrary Mode = "library"
	// ModeHTTP goes through the HTTP API on loopback: claim with the intent inline, then outcome.
	ModeHTTP Mode = "http"
	// ModeProxy sends one POST with a fresh Idempotency-Key through the
	// Idempotency-Key proxy (package proxy) on loopback, in front of a
	// loopback upstream that answers 200 with a tiny JSON body at once.
	ModeProxy Mode = "proxy"
)

// Modes are the valid modes, in the order the command line lists them.
var Modes = []Mode{ModeLibrary, ModeHTTP, ModeProxy}

// Keys is how the protected operations' keys follow each other.
type Keys string

const (
	// KeysSequential numbers the operations of a run: each key sorts
	// near the one before it, as keys built from a counter or a time do.
	KeysSequential Keys = "sequential"
	// KeysRandom gives each operation 24 random bytes in hex, as UUIDs
	// and hashes do: consecutive keys sort anywhere.
	KeysRandom Keys = "random"
)

// Valid reports whether k is one of the key orders.
func (k Keys) Valid() bool { return k == KeysSequential || k == KeysRandom }

// Config is one bench run.
type Config struct {
	// DSN of the store; empty means a fresh SQLite file. A postgres DSN gets
	// a fresh schema, dropped afterwards.
	DSN         string
	Concurrency []int
	Duration    time.Duration
	Mode        Mode
	// Keys is the order of the operations' keys (default KeysSequential).
	// The proxy mode sends them as Idempotency-Keys, which the proxy
	// hashes into operation keys either way.
	Keys Keys
	// Preload is how many operations (of the mix sqlitestore.SyntheticMix
	// describes, each with its history) the ledger holds before measuring.
	Preload int
	// Rounds is how many times each concurrency is measured, every phase
	// each time, one round after the other; its cell then gives the median
	// of the rounds' figures (see Cell). Zero means 1.
	Rounds int
	// Progress, if set, is told how much of the run's measuring time has
	// passed and how long it is in all.
	Progress func(done, total time.Duration)
}

// Cell is the result for one concurrency. Measured in several rounds
// (Config.Rounds), every rate, latency and ratio is the median of the
// rounds' figures, each ratio being computed within its round, so that a
// machine whose speed drifts between rounds still compares workloads it
// ran at the same speed; Ops, FloorOps, UpstreamRequests and
// MeasuredSeconds are the sums over the rounds, and RSSMB is read after
// the last. So OpsPerSec (a median of rounds) is not Ops/DurationSeconds
// when there are several rounds; Ops/MeasuredSeconds is the protected
// operations' mean rate over all of them.
type Cell struct {
	Mode           Mode    `json:"mode"`
	Keys           Keys    `json:"keys"`
	Store          string  `json:"store"`
	Concurrency    int     `json:"concurrency"`
	Ops            int64   `json:"ops"`
	OpsPerSec      float64 `json:"ops_per_sec"`
	P50ms          float64 `json:"p50_ms"`
	P99ms          float64 `json:"p99_ms"`
	FloorOps       int64   `json:"floor_ops"`
	FloorOpsPerSec float64 `json:"floor_ops_per_sec"`
	FloorP99ms     float64 `json:"floor_p99_ms"`
	RatioToFloor   float64 `json:"ratio_to_floor"`
	// The batched floor (SQLite only): plain INSERTs from the same number
	// of concurrent callers, batched into shared transactions.
	BatchedFloorOpsPerSec float64 `json:"batched_floor_ops_per_sec,omitempty"`
	BatchedFloorP99ms     float64 `json:"batched_floor_p99_ms,omitempty"`
	RatioToBatchedFloor   float64 `json:"ratio_to_batched_floor,omitempty"`
	// The reference: a naive claim + complete per operation without
	// opledger, in two durable transactions (an INSERT of the claimed row,
	// then an UPDATE of it to done), from the same number of callers. On
	// SQLite through the floor's single connection, each statement its own
	// transaction ("single writer"); on PostgreSQL on the floor's pool.
	ReferenceOpsPerSec float64 `json:"reference_ops_per_sec"`
	ReferenceP99ms     float64 `json:"reference_p99_ms"`
	RatioToReference   float64 `json:"ratio_to_reference"`
	// The batched reference (SQLite only): the reference's claims and
	// completes from the same number of concurrent callers, batched into
	// shared transactions as the batched floor's INSERTs are.
	BatchedReferenceOpsPerSec float64 `json:"batched_reference_ops_per_sec,omitempty"`
	BatchedReferenceP99ms     float64 `json:"batched_reference_p99_ms,omitempty"`
	RatioToBatchedReference   float64 `json:"ratio_to_batched_reference,omitempty"`
	// The library (http and proxy modes only): the library mode's
	// protected operations, measured in each round on the same ledger
	// right before or right after the mode's own (the order alternates
	// by round), from the same number of callers.
	LibraryOpsPerSec float64 `json:"library_ops_per_sec,omitempty"`
	LibraryP99ms     float64 `json:"library_p99_ms,omitempty"`
	RatioToLibrary   float64 `json:"ratio_to_library,omitempty"`
	// WriterBusy (SQLite only) is the share of the protected operations'
	// measured time that the ledger's writer was busy with their writes
	// (opledger.Ledger.WriterWork), and WritesPerBatch how many writes
	// each of its shared transactions carried on average: near 1, the
	// writer is what limits the protected operations.
	WriterBusy     float64 `json:"writer_busy,omitempty"`
	WritesPerBatch float64 `json:"writes_per_batch,omitempty"`
	// UpstreamRequests (proxy mode) is how many requests the upstream
	// received while the protected operations were measured: exactly Ops,
	// or the run fails (a request forwarded twice, or not at all).
	UpstreamRequests int64 `json:"upstream_requests,omitempty"`
	// Preload is how many operations the ledger held before measuring.
	Preload int `json:"preload"`
	// WarmUpOps is how many unmeasured protected operations ran on a fresh
	// PostgreSQL ledger before it was analyzed (see warmUp).
	WarmUpOps int64   `json:"warm_up_ops,omitempty"`
	RSSMB     float64 `json:"rss_mb"`
	// DurationSeconds is how long each phase of one round is measured
	// (Config.Duration): each rate of a round is its count over it.
	DurationSeconds float64 `json:"duration_seconds"`
	// MeasuredSeconds is how long the protected operations were measured
	// in all, over every round: Rounds × DurationSeconds. Ops (and
	// FloorOps, each baseline phase being measured as long) were counted
	// in it.
	MeasuredSeconds float64 `json:"measured_seconds"`
	// Rounds is how many rounds the cell's figures are the medians of.
	Rounds int `json:"rounds"`
	// RatioToFloorRounds are the rounds' own ratios to the floor, in the
	// order they ran, when there was more than one.
	RatioToFloorRounds []float64 `json:"ratio_to_floor_rounds,omitempty"`
	// RatioToLibraryRounds are the rounds' own ratios to the library, in
	// the order they ran, when there was more than one (http and proxy
	// modes only).
	RatioToLibraryRounds []float64 `json:"ratio_to_library_rounds,omitempty"`
}

// Run measures every concurrency of cfg and returns one cell each.
func Run(ctx context.Context, cfg Config) ([]Cell, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	if len(cfg.Concurrency) == 0 {
		cfg.Concurrency = []int{1, 8, 32}
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeLibrary
	}
	if !slices.Contains(Modes, cfg.Mode) {
		return nil, fmt.Errorf("mode must be library, http or proxy (got %q)", cfg.Mode)
	}
	if cfg.Keys == "" {
		cfg.Keys = KeysSequential
	}
	if !cfg.Keys.Valid() {
		return nil, fmt.Errorf("keys must be sequential or random (got %q)", cfg.Keys)
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	dsn, cleanup, err := freshStore(ctx, cfg.DSN)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	opts := opledger.Options{Worker: "bench"}
	var up *upstream
	if cfg.Mode == ModeProxy {
		if up, err = startUpstream(); err != nil {
			return nil, err
		}
		defer up.close()
		if opts.DestinationRetryPolicies, err = proxy.RetryPolicies(up.proxyUpstreams()); err != nil {
			return nil, err
		}
	}
	l, err := opledger.Open(ctx, dsn, opts)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if cfg.Preload > 0 {
		if err := preload(ctx, dsn, cfg.Preload); err != nil {
			return nil, fmt.Errorf("preload %d operations: %w", cfg.Preload, err)
		}
	}
	base, err := newBaselines(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer base.close()

	op, stop, err := protectedOp(ctx, l, cfg.Mode, cfg.Keys, slices.Max(cfg.Concurrency), up)
	if err != nil {
		return nil, err
	}
	defer stop()
	// library is the library mode's protected operation, the yardstick of
	// the other modes; nil in the library mode itself.
	var library func(context.Context, int, int64) error
	if cfg.Mode != ModeLibrary {
		if library, _, err = protectedOp(ctx, l, ModeLibrary, cfg.Keys, 0, nil); err != nil {
			return nil, err
		}
	}
	var warmed int64
	if cfg.Preload == 0 && !strings.HasPrefix(dsn, "sqlite:") {
		if warmed, err = warmUp(ctx, dsn, op); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}

	total := time.Duration(len(cfg.Concurrency)*cfg.Rounds*phases(cfg.DSN, cfg.Mode)) * cfg.Duration
	var elapsed time.Duration
	measure := func(c int, fn func(context.Context, int, int64) error) (int64, []time.Duration, error) {
		n, lat, err := loop(ctx, c, cfg.Duration, fn, func(d time.Duration) {
			if cfg.Progress != nil {
				cfg.Progress(elapsed+d, total)
			}
		})
		elapsed += cfg.Duration
		return n, lat, err
	}
	var referenceRows int64 // the reference operations of the run so far, one row each
	// round measures every phase of concurrency c once; the n-th round of
	// a concurrency measures the library (in the other modes) before the
	// mode's protected operations when n is even, after them when odd.
	round := func(c, n int) (Cell, error) {
		var floor, batchedFloor, reference, batchedReference measurement
		for _, phase := range []struct {
			name string
			fn   func(context.Context, int, int64) error
			into *measurement
		}{
			{"floor", base.floor, &floor},
			{"batched floor", base.batchedFloor, &batchedFloor},
			{"reference", base.reference, &reference},
			{"batched reference", base.batchedReference, &batchedReference},
		} {
			if phase.fn == nil {
				continue
			}
			ops, lat, err := measure(c, phase.fn)
			if err != nil {
				return Cell{}, fmt.Errorf("%s at c=%d: %w", phase.name, c, err)
			}
			*phase.into = measurement{ops: ops, lat: lat}
		}
		referenceRows += reference.ops + batchedReference.ops
		rows, done, err := base.countReference(ctx)
		if err != nil {
			return Cell{}, fmt.Errorf("reference at c=%d: %w", c, err)
		}
		if rows != referenceRows || done != referenceRows {
			return Cell{}, fmt.Errorf("reference at c=%d: bench_reference holds %d rows, %d of them done, for %d reference operations", c, rows, done, referenceRows)
		}
		var libraryOps measurement
		measureLibrary := func() error {
			if library == nil {
				return nil
			}
			ops, lat, err := measure(c, library)
			if err != nil {
				return fmt.Errorf("library at c=%d: %w", c, err)
			}
			libraryOps = measurement{ops: ops, lat: lat}
			return nil
		}
		if n%2 == 0 {
			if err := measureLibrary(); err != nil {
				return Cell{}, err
			}
		}
		var forwarded int64
		if up != nil {
			forwarded = up.requests.Load()
		}
		work, _ := l.WriterWork()
		start := time.Now()
		ops, lat, err := measure(c, op)
		if err != nil {
			return Cell{}, fmt.Errorf("protected operations at c=%d: %w", c, err)
		}
		writerBusy, writesPerBatch := writerShare(l, work, time.Since(start))
		if up != nil {
			forwarded = up.requests.Load() - forwarded
			if forwarded != ops {
				return Cell{}, fmt.Errorf("proxy at c=%d: the upstream received %d requests for %d protected operations", c, forwarded, ops)
			}
		}
		if n%2 == 1 {
			if err := measureLibrary(); err != nil {
				return Cell{}, err
			}
		}
		secs := cfg.Duration.Seconds()
		cell := Cell{Mode: cfg.Mode, Keys: cfg.Keys, Store: l.StoreName(), Concurrency: c, Ops: ops, OpsPerSec: float64(ops) / secs,
			P50ms: Quantile(lat, 0.50), P99ms: Quantile(lat, 0.99), FloorOps: floor.ops, FloorOpsPerSec: float64(floor.ops) / secs,
			FloorP99ms: Quantile(floor.lat, 0.99), RatioToFloor: ratio(ops, floor.ops),
			ReferenceOpsPerSec: float64(reference.ops) / secs, ReferenceP99ms: Quantile(reference.lat, 0.99), RatioToReference: ratio(ops, reference.ops),
			WriterBusy: writerBusy, WritesPerBatch: writesPerBatch,
			UpstreamRequests: forwarded, Preload: cfg.Preload, WarmUpOps: warmed, RSSMB: rssMB(), DurationSeconds: secs, MeasuredSeconds: secs, Rounds: 1}
		if base.batchedFloor != nil {
			cell.BatchedFloorOpsPerSec = float64(batchedFloor.ops) / secs
			cell.BatchedFloorP99ms = Quantile(batchedFloor.lat, 0.99)
			cell.RatioToBatchedFloor = ratio(ops, batchedFloor.ops)
		}
		if base.batchedReference != nil {
			cell.BatchedReferenceOpsPerSec = float64(batchedReference.ops) / secs
			cell.BatchedReferenceP99ms = Quantile(batchedReference.lat, 0.99)
			cell.RatioToBatchedReference = ratio(ops, batchedReference.ops)
		}
		if library != nil {
			cell.LibraryOpsPerSec = float64(libraryOps.ops) / secs
			cell.LibraryP99ms = Quantile(libraryOps.lat, 0.99)
			cell.RatioToLibrary = ratio(ops, libraryOps.ops)
		}
		return cell, nil
	}
	var cells []Cell
	for _, c := range cfg.Concurrency {
		rounds := make([]Cell, 0, cfg.Rounds)
		for n := range cfg.Rounds {
			cell, err := round(c, n)
			if err != nil {
				return nil, err
			}
			rounds = append(rounds, cell)
		}
		cells = append(cells, medianCell(rounds))
	}
	return cells, nil
}

// medianCell combines the rounds of one concurrency as Cell describes.
func medianCell(rounds []Cell) Cell {
	if len(rounds) == 1 {
		return rounds[0]
	}
	cell := rounds[len(rounds)-1] // what does not vary by round, and RSSMB
	cell.Rounds = len(rounds)
	cell.Ops, cell.FloorOps, cell.UpstreamRequests, cell.MeasuredSeconds = 0, 0, 0, 0
	for _, r := range rounds {
		cell.Ops += r.Ops
		cell.FloorOps += r.FloorOps
		cell.UpstreamRequests += r.UpstreamRequests
		cell.MeasuredSeconds += r.MeasuredSeconds
		cell.RatioToFloorRounds = append(cell.RatioToFloorRounds, r.RatioToFloor)
		if r.LibraryOpsPerSec > 0 {
			cell.RatioToLibraryRounds = append(cell.RatioToLibraryRounds, r.RatioToLibrary)
		}
	}
	for _, f := range []func(*Cell) *float64{
		func(c *Cell) *float64 { return &c.OpsPerSec },
		func(c *Cell) *float64 { return &c.P50ms },
		func(c *Cell) *float64 { return &c.P99ms },
		func(c *Cell) *float64 { return &c.FloorOpsPerSec },
		func(c *Cell) *float64 { return &c.FloorP99ms },
		func(c *Cell) *float64 { return &c.RatioToFloor },
		func(c *Cell) *float64 { return &c.BatchedFloorOpsPerSec },
		func(c *Cell) *float64 { return &c.BatchedFloorP99ms },
		func(c *Cell) *float64 { return &c.RatioToBatchedFloor },
		func(c *Cell) *float64 { return &c.ReferenceOpsPerSec },
		func(c *Cell) *float64 { return &c.ReferenceP99ms },
		func(c *Cell) *float64 { return &c.RatioToReference },
		func(c *Cell) *float64 { return &c.BatchedReferenceOpsPerSec },
		func(c *Cell) *float64 { return &c.BatchedReferenceP99ms },
		func(c *Cell) *float64 { return &c.RatioToBatchedReference },
		func(c *Cell) *float64 { return &c.LibraryOpsPerSec },
		func(c *Cell) *float64 { return &c.LibraryP99ms },
		func(c *Cell) *float64 { return &c.RatioToLibrary },
		func(c *Cell) *float64 { return &c.WriterBusy },
		func(c *Cell) *float64 { return &c.WritesPerBatch },
	} {
		values := make([]float64, len(rounds))
		for i := range rounds {
			values[i] = *f(&rounds[i])
		}
		*f(&cell) = median(values)
	}
	return cell
}

// writerShare is the share of elapsed that l's SQLite writer spent on
// batches since it counted before, and the writes per batch; zeros on
// PostgreSQL or when no batch ran.
func writerShare(l *opledger.Ledger, before opledger.WriterWork, elapsed time.Duration) (busy, writesPerBatch float64) {
	after, ok := l.WriterWork()
	if !ok || after.Batches == before.Batches || elapsed <= 0 {
		return 0, 0
	}
	return (after.Busy - before.Busy).Seconds() / elapsed.Seconds(),
		float64(after.Writes-before.Writes) / float64(after.Batches-before.Batches)
}

// median is the middle of values, or the mean of the two middle ones when
// there is an even number of them. It sorts values.
func median(values []float64) float64 {
	slices.Sort(values)
	n := len(values)
	if n%2 == 1 {
		return values[n/2]
	}
	return (values[n/2-1] + values[n/2]) / 2
}

// measurement is what one phase of a cell counted: the operations completed
// and their latencies.
type measurement struct {
	ops int64
	lat []time.Duration
}

// ratio is ops over the operations a baseline completed in the same
// duration, or 0 when it completed none.
func ratio(ops, baselineOps int64) float64 {
	if baselineOps == 0 {
		return 0
	}
	return float64(ops) / float64(baselineOps)
}

// phases is how many measurements each round takes on the store named by
// dsn in mode: the floor, the reference and the protected operations, on
// SQLite the batched floor and the batched reference too, and outside the
// library mode the library's protected operations.
func phases(dsn string, mode Mode) int {
	n := 3
	if dsn == "" || strings.HasPrefix(dsn, "sqlite:") {
		n += 2
	}
	if mode != ModeLibrary {
		n++
	}
	return n
}

// preload fills the ledger at dsn with n operations of the default tenant,
// with SQL, as the store benchmarks do.
func preload(ctx context.Context, dsn string, n int) error {
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		return sqlitestore.LoadSynthetic(ctx, path, opledger.DefaultTenant, n, true)
	}
	return pgstore.LoadSynthetic(ctx, dsn, opledger.DefaultTenant, n, true)
}

// warmUpOps is how many protected operations run, unmeasured, on a fresh
// PostgreSQL ledger before it is analyzed.
const warmUpOps = 2000

// warmUp brings a fresh PostgreSQL ledger to the state every deployment
// reaches within its first minute: it runs warmUpOps protected operations
// and ANALYZEs the tables, as autovacuum does once the first rows are
// written. Without statistics, the plans PostgreSQL caches for the
// statements while the tables are nearly empty may look an operation up
// through a list index instead of the primary key, and keep that plan
// (scanning ever more entries) until statistics arrive; a run of a few
// seconds would measure only that first minute. It returns the operations
// run.
func warmUp(ctx context.Context, dsn string, op func(context.Context, int, int64) error) (int64, error) {
	if _, err := loopN(ctx, 8, warmUpOps, func(ctx context.Context) error { return op(ctx, 0, 0) }, func() {}); err != nil {
		return 0, err
	}
	conn, err := pgx.Connect(ctx, withoutPoolParams(dsn))
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ANALYZE operations; ANALYZE attempts; ANALYZE timeline; ANALYZE tombstones`); err != nil {
		return 0, err
	}
	return warmUpOps, nil
}

// loop runs fn closed-loop on c goroutines for d and returns the count
// and the latencies.
func loop(ctx context.Context, c int, d time.Duration, fn func(ctx context.Context, worker int, seq int64) error, tick func(time.Duration)) (int64, []time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		n    atomic.Int64
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
		errs = make(chan error, c)
	)
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local []time.Duration
			for seq := int64(0); ctx.Err() == nil; seq++ {
				t0 := time.Now()
				if err := fn(ctx, w, seq); err != nil {
					if ctx.Err() != nil {
						break // the run ended mid-operation: not counted
					}
					errs <- err
					return
				}
				local = append(local, time.Since(t0))
				n.Add(1)
			}
			mu.Lock()
			lats = append(lats, local...)
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-done:
			close(errs)
			if err := <-errs; err != nil {
				return 0, nil, err
			}
			return n.Load(), lats, nil
		case <-t.C:
			tick(min(time.Since(start), d))
		}
	}
}

// Quantile is the q-quantile of lats in milliseconds, by nearest rank:
// the smallest latency that at least q of them do not exceed (the
// ceil(q·n)-th smallest), so that p99 of 10 latencies is the largest, not
// the 9th. 0 without latencies. It sorts lats.
func Quantile(lats []time.Duration, q float64) float64 {
	n := len(lats)
	if n == 0 {
		return 0
	}
	slices.Sort(lats)
	i := min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)
	return float64(lats[i].Microseconds()) / 1000
}

// benchPayload is the intent payload of every protected operation the
// bench runs.
var benchPayload = json.RawMessage(`{"units":2,"order":"BENCH"}`)

// ProtectedOperation runs one protected operation on l, as the library
// mode does: a claim of key with its intent inline (a no-op action), then
// a success report, which runs to its end even if ctx is cancelled. The
// store benchmarks run it too.
func ProtectedOperation(ctx context.Context, l *opledger.Ledger, key string) error {
	c, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "noop", Destination: "bench", Payload: benchPayload}})
	if err != nil {
		return err
	}
	_, err = l.Report(context.WithoutCancel(ctx), key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "noop"})
	return err
}

// protectedOp returns the function that runs one protected operation, for
// up to maxConc callers at once, with keys in the order keys names; up is
// the upstream of the proxy mode.
func protectedOp(ctx context.Context, l *opledger.Ledger, mode Mode, keys Keys, maxConc int, up *upstream) (func(context.Context, int, int64) error, func(), error) {
	run := randomHex(4)
	var next atomic.Int64
	keyOf := func(int, int64) string { return "bench:" + run + ":" + strconv.FormatInt(next.Add(1), 10) }
	if keys == KeysRandom {
		keyOf = func(int, int64) string { return "bench:" + randomHex(24) }
	}
	switch mode {
	case ModeLibrary:
		return func(ctx context.Context, w int, seq int64) error {
			return ProtectedOperation(ctx, l, keyOf(w, seq))
		}, func() {}, nil
	case ModeHTTP:
		token, _, err := l.CreateToken(ctx, "bench", opledger.ReadWrite)
		if err != nil {
			return nil, nil, err
		}
		srv, err := server.New(l, server.Config{Addr: "127.0.0.1:0", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, nil, err
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { _ = srv.Run(sctx); close(done) }()
		viaAPI := apiOperation(client.New(srv.URL(), token, httpClient(maxConc)), benchPayload)
		return func(ctx context.Context, w int, seq int64) error {
				return viaAPI(ctx, keyOf(w, seq))
			}, func() {
				cancel()
				<-done
			}, nil
	case ModeProxy:
		p, err := proxy.New(l, proxy.Config{Upstreams: up.proxyUpstreams(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			return nil, nil, err
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			p.Close()
			return nil, nil, err
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { _ = p.Run(sctx, ln, 0); close(done) }()
		target := "http://" + ln.Addr().String() + "/orders"
		hc := httpClient(maxConc)
		return func(ctx context.Context, w int, seq int64) error {
				// Not cancelled when the measurement ends: a request the
				// proxy has forwarded is always answered and counted, so
				// that the upstream's count must equal the bench's.
				req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, target, bytes.NewReader(benchPayload))
				if err != nil {
					return err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(proxy.HeaderIdempotencyKey, keyOf(w, seq))
				resp, err := hc.Do(req)
				if err != nil {
					return err
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					return err
				}
				if resp.StatusCode != http.StatusOK || resp.Header.Get(proxy.HeaderReplayed) != "" {
					return fmt.Errorf("proxy answered %s (replayed: %q): %s", resp.Status, resp.Header.Get(proxy.HeaderReplayed), body)
				}
				return nil
			}, func() {
				cancel()
				<-done
				hc.CloseIdleConnections()
				p.Close()
			}, nil
	}
	return nil, nil, fmt.Errorf("unknown mode %q", mode)
}

// apiOperation returns one protected operation through the HTTP API of cl:
// claim of key with the intent inline, then a success outcome. The outcome
// is sent even when ctx ends after the claim, so that no claim is left
// open.
func apiOperation(cl *client.Client, payload json.RawMessage) func(ctx context.Context, key string) error {
	in := client.Intent{Action: "noop", Destination: "bench", Payload: payload}
	return func(ctx context.Context, key string) error {
		c, err := cl.Claim(ctx, key, client.ClaimRequest{Intent: &in})
		if err != nil {
			return err
		}
		_, err = cl.Report(context.WithoutCancel(ctx), key, c.AttemptID, client.Report{FencingToken: c.FencingToken,
			Outcome: opledger.OutcomeSucceeded, DestinationRef: "noop"})
		return err
	}
}

// httpClient is the bench's HTTP client: it keeps an idle connection for
// each of up to conc concurrent callers, so that the bench measures the
// server, not TCP connects (net/http keeps 2 per host by default).
func httpClient(conc int) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(conc, 2)
	tr.MaxIdleConns = max(tr.MaxIdleConns, conc)
	return &http.Client{Timeout: 30 * time.Second, Transport: tr}
}

// upstream is the API behind the proxy in proxy mode: it answers every
// request at once with 200 and a tiny JSON body, and counts the requests.
type upstream struct {
	url      string
	requests atomic.Int64
	srv      *http.Server
	done     chan struct{}
}

func startUpstream() (*upstream, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	u := &upstream{url: "http://" + ln.Addr().String(), done: make(chan struct{})}
	answer := []byte(`{"id":"bench"}`)
	u.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		u.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})}
	go func() { _ = u.srv.Serve(ln); close(u.done) }()
	return u, nil
}

// proxyUpstreams is the proxy's configuration: this upstream, with the
// defaults.
func (u *upstream) proxyUpstreams() []proxy.Upstream {
	return []proxy.Upstream{{Name: "bench", URL: u.url}}
}

func (u *upstream) close() {
	_ = u.srv.Close()
	<-u.done
}

// baselines are what the protected operations are measured against, on the
// same store and with its durability settings: the floor (one plain INSERT
// per operation), the reference (a naive claim + complete per operation, in
// two durable transactions, no opledger code involved) and, on SQLite, the
// batched floor and the batched reference (the same writes from concurrent
// callers batched into shared transactions).
type baselines struct {
	floor func(ctx context.Context, worker int, seq int64) error
	// batchedFloor (SQLite only) inserts the floor's rows with concurrent
	// callers' INSERTs sharing transactions.
	batchedFloor func(ctx context.Context, worker int, seq int64) error
	// reference claims a fresh key (INSERT of a claimed row into
	// bench_reference) and completes it (UPDATE of that row to done), each
	// statement its own transaction. An operation that has begun is
	// finished even when ctx ends, so that no row stays claimed.
	reference func(ctx context.Context, worker int, seq int64) error
	// batchedReference (SQLite only) runs the reference's claim and
	// complete as two writes of the batcher, one after the other.
	batchedReference func(ctx context.Context, worker int, seq int64) error
	// countReference returns how many rows bench_reference holds and how
	// many of them are done.
	countReference func(ctx context.Context) (rows, done int64, err error)
	close          func()
}

// The statements of the reference on SQLite. k is the primary key, so that
// the claim inserts one row or none and the complete updates one row or
// none.
const (
	sqliteReferenceTable    = `CREATE TABLE IF NOT EXISTS bench_reference (k TEXT PRIMARY KEY, state TEXT NOT NULL, worker TEXT NOT NULL, claimed_at INTEGER NOT NULL, result TEXT, completed_at INTEGER)`
	sqliteReferenceClaim    = `INSERT INTO bench_reference (k, state, worker, claimed_at) VALUES (?, 'claimed', ?, ?) ON CONFLICT (k) DO NOTHING`
	sqliteReferenceComplete = `UPDATE bench_reference SET state = 'done', result = ?, completed_at = ? WHERE k = ? AND state = 'claimed'`
)

// The same on PostgreSQL.
const (
	pgReferenceTable    = `CREATE TABLE IF NOT EXISTS bench_reference (k text PRIMARY KEY, state text NOT NULL, worker text NOT NULL, claimed_at timestamptz NOT NULL, result text, completed_at timestamptz)`
	pgReferenceClaim    = `INSERT INTO bench_reference (k, state, worker, claimed_at) VALUES ($1, 'claimed', $2, $3) ON CONFLICT (k) DO NOTHING`
	pgReferenceComplete = `UPDATE bench_reference SET state = 'done', result = $1, completed_at = $2 WHERE k = $3 AND state = 'claimed'`
)

// referenceCount counts the rows of bench_reference, and those done.
const referenceCount = `SELECT count(*), count(*) FILTER (WHERE state = 'done') FROM bench_reference`

// The values the baselines write: the floor's row, and the result the
// reference records at completion.
const (
	floorValue      = `{"units":2,"order":"BENCH"}`
	referenceResult = `{"destination_ref":"noop"}`
)

// errNoRowChanged is the error of a reference statement that inserted or
// updated no row: a claim of a key already claimed, or a complete of a key
// not claimed.
var errNoRowChanged = errors.New("no row changed")

// changedOneRow returns the error of a statement that must change exactly
// one row, given what it returned.
func changedOneRow(n int64, err error) error {
	switch {
	case err != nil:
		return err
	case n == 0:
		return errNoRowChanged
	case n != 1:
		return fmt.Errorf("%d rows changed, want 1", n)
	}
	return nil
}

// referenceKeys hands out the reference's keys: fresh in every phase and
// cell of a run.
type referenceKeys struct{ next atomic.Int64 }

func (r *referenceKeys) key() string { return "ref:" + strconv.FormatInt(r.next.Add(1), 10) }

// operation runs one reference operation on a fresh key: claim, then
// complete.
func (r *referenceKeys) operation(claim, complete func(k string) error) error {
	k := r.key()
	if err := claim(k); err != nil {
		return fmt.Errorf("claim %s: %w", k, err)
	}
	if err := complete(k); err != nil {
		return fmt.Errorf("complete %s: %w", k, err)
	}
	return nil
}

// floorKey is the floor's row key of a worker's seq-th call.
func floorKey(w int, seq int64) string { return strconv.Itoa(w) + ":" + strconv.FormatInt(seq, 10) }

func workerName(w int) string { return "bench-" + strconv.Itoa(w) }

func newBaselines(ctx context.Context, dsn string) (*baselines, error) {
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		return newSQLiteBaselines(ctx, path)
	}
	return newPostgresBaselines(ctx, dsn)
}

// openSQLiteWriter opens the SQLite file at path as the baselines use it:
// one connection (SQLite has one writer), WAL, synchronous=FULL, write
// transactions begun IMMEDIATE. The path is taken literally, as the
// ledger's store takes it (sqlitestore.FileURI): a '#' or '?' in it is
// part of the file's name.
func openSQLiteWriter(path string) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	db, err := sql.Open("sqlite", sqlitestore.FileURI(path)+"?"+q.Encode()+"&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

func newSQLiteBaselines(ctx context.Context, path string) (_ *baselines, err error) {
	db, err := openSQLiteWriter(path)
	if err != nil {
		return nil, err
	}
	var stmts []*sql.Stmt
	closeAll := func() {
		for _, st := range stmts {
			st.Close()
		}
		db.Close()
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	for _, ddl := range []string{`CREATE TABLE IF NOT EXISTS bench_floor (id INTEGER PRIMARY KEY, k TEXT NOT NULL, v TEXT NOT NULL)`, sqliteReferenceTable} {
		if _, err := db.ExecContext(ctx, ddl); err != nil {
			return nil, err
		}
	}
	prepare := func(query string) (st *sql.Stmt) {
		if err == nil {
			if st, err = db.PrepareContext(ctx, query); err == nil {
				stmts = append(stmts, st)
			}
		}
		return st
	}
	insert := prepare(`INSERT INTO bench_floor (k, v) VALUES (?, ?)`)
	claim := prepare(sqliteReferenceClaim)
	complete := prepare(sqliteReferenceComplete)
	if err != nil {
		return nil, err
	}
	b := newBatcher(db)
	var keys referenceKeys
	return &baselines{
		floor: func(ctx context.Context, w int, seq int64) error {
			_, err := insert.ExecContext(ctx, floorKey(w, seq), floorValue)
			return err
		},
		batchedFloor: func(_ context.Context, w int, seq int64) error {
			return b.write(insert, floorKey(w, seq), floorValue)
		},
		reference: func(ctx context.Context, w int, _ int64) error {
			ctx = context.WithoutCancel(ctx)
			return keys.operation(func(k string) error {
				return changedOneRow(rowsAffected(claim.ExecContext(ctx, k, workerName(w), time.Now().UnixMicro())))
			}, func(k string) error {
				return changedOneRow(rowsAffected(complete.ExecContext(ctx, referenceResult, time.Now().UnixMicro(), k)))
			})
		},
		batchedReference: func(_ context.Context, w int, _ int64) error {
			return keys.operation(func(k string) error {
				return b.write(claim, k, workerName(w), time.Now().UnixMicro())
			}, func(k string) error {
				return b.write(complete, referenceResult, time.Now().UnixMicro(), k)
			})
		},
		countReference: func(ctx context.Context) (rows, done int64, err error) {
			err = db.QueryRowContext(ctx, referenceCount).Scan(&rows, &done)
			return rows, done, err
		},
		close: closeAll,
	}, nil
}

// rowsAffected is what res says it changed, or err.
func rowsAffected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func newPostgresBaselines(ctx context.Context, dsn string) (*baselines, error) {
	// The same pool size as the ledger's store: pgxpool's own default (4 on
	// this machine class) would queue 32 callers on 4 connections.
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		pcfg.MaxConns = pgstore.DefaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS bench_floor (id bigserial PRIMARY KEY, k text NOT NULL, v text NOT NULL); `+pgReferenceTable); err != nil {
		pool.Close()
		return nil, err
	}
	exec := func(ctx context.Context, query string, args ...any) error {
		tag, err := pool.Exec(ctx, query, args...)
		return changedOneRow(tag.RowsAffected(), err)
	}
	var keys referenceKeys
	return &baselines{
		floor: func(ctx context.Context, w int, seq int64) error {
			_, err := pool.Exec(ctx, `INSERT INTO bench_floor (k, v) VALUES ($1, $2)`, floorKey(w, seq), floorValue)
			return err
		},
		reference: func(ctx context.Context, w int, _ int64) error {
			ctx = context.WithoutCancel(ctx)
			return keys.operation(func(k string) error {
				return exec(ctx, pgReferenceClaim, k, workerName(w), time.Now())
			}, func(k string) error {
				return exec(ctx, pgReferenceComplete, referenceResult, time.Now(), k)
			})
		},
		countReference: func(ctx context.Context) (rows, done int64, err error) {
			err = pool.QueryRow(ctx, referenceCount).Scan(&rows, &done)
			return rows, done, err
		},
		close: pool.Close,
	}, nil
}

// batcher is the group commit of the SQLite baselines: every write queued
// while a commit is in flight is written in the next shared transaction by
// whichever caller takes the writer first, and each caller returns once the
// COMMIT covering its write has returned. A write is one statement that
// must change exactly one row. One that changes none wrote nothing: that is
// its caller's error alone, and the other writes of its batch commit. Any
// other failure (of a statement, or of BEGIN or COMMIT) rolls the batch
// back and is the error of each of its callers.
type batcher struct {
	db    *sql.DB
	lock  chan struct{} // held by the caller writing batches
	mu    sync.Mutex
	queue []*batchedWrite
}

// batchedWrite is one caller's statement, queued or in a batch.
type batchedWrite struct {
	st   *sql.Stmt
	args []any
	done chan error // buffered: the writer never blocks on it
}

func newBatcher(db *sql.DB) *batcher {
	return &batcher{db: db, lock: make(chan struct{}, 1)}
}

// write runs st, prepared on the batcher's database, with args in a shared
// transaction, and returns once that transaction has committed or failed.
func (b *batcher) write(st *sql.Stmt, args ...any) error {
	w := &batchedWrite{st: st, args: args, done: make(chan error, 1)}
	b.mu.Lock()
	b.queue = append(b.queue, w)
	b.mu.Unlock()
	select {
	case err := <-w.done:
		return err
	case b.lock <- struct{}{}:
	}
	defer func() { <-b.lock }()
	for {
		select {
		case err := <-w.done:
			return err
		default:
		}
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		b.mu.Unlock()
		b.commit(batch)
	}
}

// commit writes batch in one transaction and answers each of its writes.
func (b *batcher) commit(batch []*batchedWrite) {
	if len(batch) == 0 {
		return
	}
	errs := make([]error, len(batch))
	err := b.commitErrs(batch, errs)
	for i, w := range batch {
		if errs[i] == nil {
			errs[i] = err
		}
		w.done <- errs[i]
	}
}

// commitErrs writes batch in one transaction, setting errs[i] for a write
// that changed no row, and returns the error that failed the whole batch.
func (b *batcher) commitErrs(batch []*batchedWrite, errs []error) error {
	ctx := context.Background() // the transaction belongs to no single caller
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	inTx := map[*sql.Stmt]*sql.Stmt{}
	for i, w := range batch {
		st, ok := inTx[w.st]
		if !ok {
			st = tx.StmtContext(ctx, w.st)
			inTx[w.st] = st
		}
		err := changedOneRow(rowsAffected(st.ExecContext(ctx, w.args...)))
		if errors.Is(err, errNoRowChanged) {
			errs[i] = err
			continue
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
	}
	return tx.Commit()
}

// ErrNotFresh is returned when a sqlite: DSN given to the bench names a
// file that already exists: the bench measures a fresh ledger and removes
// its file afterwards, so it never opens one it did not create.
var ErrNotFresh = errors.New("bench needs a fresh ledger")

// freshStore returns the DSN of an empty store and how to remove it. A
// sqlite: DSN must name a file that does not exist yet (read as
// opledger.Open reads it, sqlitestore.DSNPath): the bench writes tables of
// its own into it and removes it afterwards, so an existing file, a
// ledger or anything else, is refused before anything is opened.
func freshStore(ctx context.Context, dsn string) (string, func(), error) {
	if dsn == "" {
		dir, err := os.MkdirTemp("", "opledger-bench-")
		if err != nil {
			return "", nil, err
		}
		return "sqlite:" + filepath.Join(dir, "bench.db"), func() { os.RemoveAll(dir) }, nil
	}
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		if path == "" {
			return "", nil, fmt.Errorf("%s names no file: give sqlite:PATH of a file that does not exist yet", dsn)
		}
		if _, err := os.Lstat(path); err == nil {
			return "", nil, fmt.Errorf("%w: %s exists", ErrNotFresh, path)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", nil, fmt.Errorf("bench needs a fresh ledger: %w", err)
		}
		return dsn, func() {
			for _, suffix := range []string{"", "-wal", "-shm", sqlitestore.WriteLockSuffix} {
				os.Remove(path + suffix)
			}
		}, nil
	}
	if !pgstore.IsDSN(dsn) {
		return "", nil, errors.New("dsn must start with sqlite: or postgres://")
	}
	schema := "opledger_bench_" + randomHex(6)
	admin := withoutPoolParams(dsn)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return "", nil, fmt.Errorf("create bench schema: %w", err)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), func() {
		c, err := pgx.Connect(context.Background(), admin)
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			c.Close(context.Background())
		}
	}, nil
}

// withoutPoolParams drops pgxpool's settings (pool_max_conns, …) from dsn
// for a single connection, which would send them to the server as runtime
// parameters.
func withoutPoolParams(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	for k := range q {
		if strings.HasPrefix(k, "pool_") {
			q.Del(k)
		}
	}
	u.RawQuery = q.Encode()
	return u.String()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// rssMB is the process's resident memory, from /proc (0 where unavailable).
func rssMB() float64 { return procStatusMB(os.Getpid(), "VmRSS") }
