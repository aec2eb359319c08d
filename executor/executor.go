// Package executor runs the operations of configured destinations: a pool
// of workers that claim due operations of every tenant
// (opledger.Ledger.ClaimNext), mark the dispatch, call the destination and
// report the outcome. It settles expired leases on the way, and shuts down
// gracefully: it stops claiming first, lets calls in flight finish, and
// gives back (opledger.Ledger.Release) any claim it has not dispatched, so
// that no claim is left for its lease to expire.
//
// RunOnce makes one attempt synchronously; tests and simulations use it to
// drive the executor step by step.
//
// A destination call that ignores its context is not waited for past its
// limit (Config.CallTimeout) and a short grace: it is abandoned, and
// counted (AbandonedCalls) until it returns, its claim kept (the lease
// extended) meanwhile so that no process sends the operation again beside
// it; see Config.CallTimeout.
//
// Logs carry the tenant, destination, attempt id, outcome and state, never
// operation keys, idempotency keys, payloads or credentials.
//
// Allowed imports: opledger, opledger/destination, internal/advance (a
// succeeded step moves its workflow on), internal/periodic,
// internal/redact, internal/textcut, the standard library.
package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/advance"
	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/textcut"
)

// ErrStopping is the cause with which the executor cancels what it must
// interrupt when it stops.
var ErrStopping = errors.New("executor stopping")

// Config configures an Executor. Zero values take the documented defaults;
// negative counts and durations are refused (SweepInterval aside, where a
// negative value disables the sweep).
type Config struct {
	// Destinations are the destinations whose operations this executor
	// runs. Required.
	Destinations *destination.Set
	// Workers is the number of concurrent attempts. Default 4.
	Workers int
	// Worker names this executor in attempts and timelines; each worker
	// goroutine appends "/<n>". Default "executor@<host>:<pid>".
	Worker string
	// Lease is how long a claim holds an operation. Default 30 s.
	Lease time.Duration
	// CallTimeout bounds one destination call, counted from the claim
	// (so a slow dispatch shortens the call rather than outlasting the
	// lease); it must be shorter than Lease so that the report arrives
	// while the claim still holds. Default two thirds of Lease. Every
	// destination that bounds its calls itself (destination.Timed, e.g.
	// an HTTP destination's timeout, 10 s by default) must bound them
	// below it: see CheckConfig. A dispatch mark that took the whole
	// CallTimeout (a busy store) leaves no call to make: the call is not
	// started, and the attempt is recorded retryable, nothing sent. A
	// mark that has not landed by the end of the lease (a store that
	// hangs: a row lock another session holds while the PostgreSQL DSN
	// sets no lock_timeout) is given up, as is a release or report
	// after it that takes a lease: nothing is sent, and the claim is
	// left to its lease.
	//
	// A call that ignores its context and has not returned half the
	// time between CallTimeout and Lease (at most 2 s) after its
	// deadline, or after Stop cancelled it, is abandoned: the worker
	// stops waiting and goes on, an ERROR line says so once, and so
	// does the operation's timeline (opledger.Ledger.NoteCallAbandoned). The
	// call's goroutine runs on, counted by AbandonedCalls, and the
	// attempt keeps its claim: the executor extends its lease (by Lease,
	// every third of it) until the call returns, so the operation stays
	// in progress and no worker of any process sharing the store claims
	// it and sends it again meanwhile, nor does a lease sweep make it
	// uncertain. What the call returns at last is reported under the
	// claim, as any outcome. A process that exits (or closes its ledger)
	// meanwhile leaves the operation to its lease, which makes it
	// uncertain (a closed ledger is logged at WARN); a store that does
	// not take the extensions for a whole lease loses the claim the same
	// way (logged at WARN), and the call's outcome is then kept as a late
	// report (a late success still settles the operation), while this
	// executor does not claim any retry of it before the call returns
	// (ClaimNextOptions.Skip). A destination with 16 abandoned calls
	// still running has none of its operations claimed by this executor
	// until one returns (they stay pending; other destinations' are
	// claimed as before): each holds a goroutine, what the call holds and
	// a lease to extend, and a destination whose calls never return
	// would otherwise add one every call limit and grace, per worker.
	CallTimeout time.Duration
	// PollInterval is how long a worker waits after finding nothing due.
	// Default 1 s. After a claim the store could not take
	// (opledger.ErrStoreUnavailable, opledger.ErrStoreBusy,
	// opledger.ErrStoreFull) a worker waits longer: PollInterval,
	// doubled at each such failure in a row, up to 30 s (or
	// PollInterval, if longer), less up to a quarter at random; its
	// first claim the store answers brings it back to PollInterval. The
	// log says so at WARN ("store unavailable, backing off", with
	// problem=unavailable, store_busy or store_full) at the first
	// failure and as their count doubles, and at INFO ("store reachable
	// again") when the store answers, rather than an ERROR at every
	// poll. A claim the store has not answered within Lease (a LOCK
	// TABLE held elsewhere while the PostgreSQL DSN sets no lock_timeout,
	// a connection that stopped answering) is given up and counts as
	// such a failure (opledger.ErrStoreBusy, problem=store_busy): a claim
	// answered later would have expired already.
	PollInterval time.Duration
	// SweepInterval is how often expired leases are settled, the first
	// time when the executor starts. Default 5 s; negative disables the
	// sweep (when something else runs Ledger.ExpireLeases). A turn of
	// the sweep the store has not answered within the interval (5 s at
	// least) is given up as store_busy and logged by the outage rule,
	// as Ledger.Maintain's lease sweep is.
	SweepInterval time.Duration
	// Logger receives one line per attempt and per problem. Default
	// slog.Default().
	Logger *slog.Logger
}

// Executor runs attempts for configured destinations. Start and Stop run
// the worker pool; RunOnce makes one attempt.
type Executor struct {
	ledger *opledger.Ledger
	dests  *destination.Set
	names  []string
	cfg    Config
	log    *slog.Logger

	mu          sync.Mutex
	started     bool
	stopped     bool
	stopClaims  context.CancelCauseFunc
	cancelCalls context.CancelCauseFunc
	cancelStore context.CancelCauseFunc
	wg          sync.WaitGroup
	// calling counts the workers whose destination call is running, so
	// that a Stop cut off at its deadline says whether it cut off calls.
	calling atomic.Int64
	// callGrace is how long a worker waits for a call past its deadline
	// (or its cancellation by Stop) before it abandons it.
	callGrace time.Duration
	// abandonedMu guards abandoned: the calls abandoned and still
	// running, by operation (tenant, key), so that none is sent again
	// while one runs even when its claim was lost. AbandonedCalls counts
	// them.
	abandonedMu sync.Mutex
	abandoned   map[operationRef]int
	// abandonedByDest counts the same calls by destination: one with
	// maxAbandoned of them still running is not claimed for (claimable).
	abandonedByDest map[string]int
	// maxAbandoned is maxAbandonedPerDestination but in tests.
	maxAbandoned int

	// stopping is closed when Stop begins.
	stopping chan struct{}
	// olderRelease logs, once, that a newer release has migrated the
	// ledger under this process (see noteSchemaNewer).
	olderRelease sync.Once
	// Test hooks: beforeDispatch runs between claim and dispatch,
	// afterSweep after each lease sweep.
	beforeDispatch func(stop context.Context)
	afterSweep     func(settled int, err error)
	abandonedEnded func()
	leaseKept      func()
	claimNotKept   func()
	keepStopped    func()
	// pause, when set, replaces a worker's wait between polls: it is
	// given the pause and returns when the worker may go on (or stop has
	// ended).
	pause func(stop context.Context, d time.Duration)

	// outageMu guards outage: the store's failures, across workers,
	// since it last answered (storeFailed, storeAnswered).
	outageMu sync.Mutex
	outage   storeOutage
	// inOutage is whether outage counts failures; written under outageMu,
	// read without it by storeAnswered, which every successful step
	// calls: with no outage under way it takes no lock.
	inOutage atomic.Bool
	// leaseRenewal is how often the lease of an abandoned call still
	// running is extended: a third of the lease.
	leaseRenewal time.Duration
}

// storeOutage is a run of store failures (storeDown) with no answer of
// the store between them.
type storeOutage struct {
	// failures counts them; 0 when the store answers.
	failures int
	// since is when the first of them came.
	since time.Time
}

// New returns an executor for l; it runs nothing until Start or RunOnce.
// It refuses what CheckConfig refuses, and a nil l.
func New(l *opledger.Ledger, cfg Config) (*Executor, error) {
	cfg, err := cfg.checked()
	if err != nil {
		return nil, err
	}
	if l == nil {
		return nil, errors.New("executor: a ledger is required: New was given a nil *opledger.Ledger")
	}
	if cfg.Worker == "" {
		host, _ := os.Hostname()
		cfg.Worker = "executor@" + host + ":" + strconv.Itoa(os.Getpid())
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Executor{ledger: l, dests: cfg.Destinations, names: cfg.Destinations.Names(), cfg: cfg,
		log: cfg.Logger.With("component", "executor"), stopping: make(chan struct{}),
		callGrace: min(maxCallGrace, (cfg.Lease-cfg.CallTimeout)/2), abandoned: map[operationRef]int{}, abandonedByDest: map[string]int{},
		maxAbandoned: maxAbandonedPerDestination, leaseRenewal: cfg.Lease / 3}, nil
}

// maxCallGrace bounds how long a worker waits for a destination call
// past its deadline before it abandons it: the time left between the
// call limit and the lease, halved, so that the abandoned attempt's
// outcome is recorded while the claim still holds, but never more than
// this.
const maxCallGrace = 2 * time.Second

// maxAbandonedPerDestination bounds the abandoned calls still running of
// one destination: while it has that many, the executor claims none of
// its operations (they stay pending, due), so that a destination whose
// calls never return does not pile up goroutines, calls, and claims to
// keep (a lease extension each, every third of the lease) without end,
// one more every call limit and grace per worker. Its other destinations
// are claimed for as before.
const maxAbandonedPerDestination = 16

// operationRef names an operation of any tenant.
type operationRef struct{ tenant, key string }

// AbandonedCalls is the number of destination calls this executor
// abandoned that are still running: calls that ignored their context
// and did not return within the call limit (CallTimeout) and a short
// grace after it (or after Stop cancelled them). Each keeps its claim,
// its operation in progress, until it returns; what it returns at last
// is reported then. A number that does not come back to 0 means a
// destination whose calls never return: each holds a goroutine, what
// the call holds (a connection, memory) and its operation, in progress
// for as long as this process runs.
func (e *Executor) AbandonedCalls() int {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	n := 0
	for _, c := range e.abandoned {
		n += c
	}
	return n
}

// stillRunning reports whether a call of op that this executor
// abandoned is still running.
func (e *Executor) stillRunning(op *opledger.Operation) bool {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	return e.abandoned[operationRef{op.Tenant, op.Key}] > 0
}

// stillCalling lists the operations of the calls this executor abandoned
// that are still running, for ClaimNext to skip: a claim lost meanwhile
// (a store that did not take keepClaim's extensions for a whole lease)
// lets the operation come due again, and it must not be sent beside the
// call, nor claimed at every poll only to be given back.
func (e *Executor) stillCalling() []opledger.OperationRef {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	if len(e.abandoned) == 0 {
		return nil
	}
	refs := make([]opledger.OperationRef, 0, len(e.abandoned))
	for ref := range e.abandoned {
		refs = append(refs, opledger.OperationRef{Tenant: ref.tenant, Key: ref.key})
	}
	return refs
}

// claimable lists the destinations whose operations may be claimed: the
// configured ones but those with maxAbandoned abandoned calls still
// running. Empty when none may.
func (e *Executor) claimable() []string {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	if len(e.abandonedByDest) == 0 {
		return e.names
	}
	names := make([]string, 0, len(e.names))
	for _, n := range e.names {
		if e.abandonedByDest[n] < e.maxAbandoned {
			names = append(names, n)
		}
	}
	return names
}

// countAbandoned adds d to the abandoned calls of op still running and
// returns how many calls are abandoned and running in all.
func (e *Executor) countAbandoned(op *opledger.Operation, d int) int {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	ref := operationRef{op.Tenant, op.Key}
	e.abandoned[ref] += d
	if e.abandoned[ref] <= 0 {
		delete(e.abandoned, ref)
	}
	e.abandonedByDest[op.Destination] += d
	if e.abandonedByDest[op.Destination] <= 0 {
		delete(e.abandonedByDest, op.Destination)
	}
	n := 0
	for _, c := range e.abandoned {
		n += c
	}
	return n
}

// abandonedOf is the number of abandoned calls of dest still running.
func (e *Executor) abandonedOf(dest string) int {
	e.abandonedMu.Lock()
	defer e.abandonedMu.Unlock()
	return e.abandonedByDest[dest]
}

// CheckConfig reports the first problem New would find with cfg, without
// a ledger, so that a command can refuse a configuration before it opens
// (and perhaps creates) the store: no destinations; a negative Workers,
// Lease, CallTimeout or PollInterval (0 means the default); a CallTimeout
// not shorter than the Lease; or a destination that bounds its calls
// itself (destination.Timed, as HTTP destinations do with their timeout)
// with a bound not shorter than the CallTimeout. The executor's deadline
// would end such a call first: the destination's timeout would be cut
// short, and a call that may have had its effect would end uncertain.
func CheckConfig(cfg Config) error {
	_, err := cfg.checked()
	return err
}

// maxWorkerName is the longest worker name the ledger records.
const maxWorkerName = 200

// checked returns cfg with the defaults of the limits filled in, or the
// first problem with it.
func (cfg Config) checked() (Config, error) {
	if cfg.Destinations == nil || cfg.Destinations.Len() == 0 {
		return cfg, errors.New("executor: no destinations configured")
	}
	// 0 is "not set" and takes the default; a negative value is a
	// mistake, never silently replaced.
	switch {
	case cfg.Workers < 0:
		return cfg, fmt.Errorf("executor: Workers is %d: it must be positive (0 means the default, 4)", cfg.Workers)
	case cfg.Lease < 0:
		return cfg, fmt.Errorf("executor: the lease is %s: it must be positive (0 means the default, 30s)", cfg.Lease)
	case cfg.CallTimeout < 0:
		return cfg, fmt.Errorf("executor: the call timeout is %s: it must be positive (0 means the default, two thirds of the lease)", cfg.CallTimeout)
	case cfg.PollInterval < 0:
		return cfg, fmt.Errorf("executor: the poll interval is %s: it must be positive (0 means the default, 1s)", cfg.PollInterval)
	}
	if cfg.Workers == 0 {
		cfg.Workers = 4
	}
	if suffix := len("/") + len(strconv.Itoa(cfg.Workers)); len(cfg.Worker)+suffix > maxWorkerName {
		return cfg, fmt.Errorf("executor: the Worker name is %d bytes: each worker is named after it with /N, and the ledger takes worker names of at most %d bytes, so it must be at most %d",
			len(cfg.Worker), maxWorkerName, maxWorkerName-suffix)
	}
	if cfg.Lease == 0 {
		cfg.Lease = 30 * time.Second
	}
	if cfg.Lease > opledger.MaxLease {
		return cfg, fmt.Errorf("executor: the lease is %s: it must be at most %s (opledger.MaxLease)", cfg.Lease, opledger.MaxLease)
	}
	derived := cfg.CallTimeout == 0
	if derived {
		cfg.CallTimeout = cfg.Lease * 2 / 3
	}
	if cfg.CallTimeout >= cfg.Lease {
		return cfg, fmt.Errorf("executor: call timeout %s must be shorter than the lease %s", cfg.CallTimeout, cfg.Lease)
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = time.Second
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 5 * time.Second
	}
	for _, name := range cfg.Destinations.Names() {
		d, _ := cfg.Destinations.Get(name)
		td, ok := d.(destination.Timed)
		if !ok || td.Timeout() < cfg.CallTimeout {
			continue
		}
		t := td.Timeout()
		if derived {
			// The smallest whole-second lease whose two thirds exceed t.
			lease := (t * 3 / 2).Truncate(time.Second) + time.Second
			return cfg, &DestinationTimeoutError{Destination: name, msg: fmt.Sprintf("executor: destination %s: its timeout %s is not shorter than the executor's call limit %s "+
				"(two thirds of the lease %s), which would cut its calls short and leave them uncertain: "+
				"raise the lease (serve --lease) to %s or more, or lower the destination's timeout below %s",
				name, t, cfg.CallTimeout.Round(time.Millisecond), cfg.Lease, lease, cfg.CallTimeout.Round(time.Millisecond))}
		}
		return cfg, &DestinationTimeoutError{Destination: name, msg: fmt.Sprintf("executor: destination %s: its timeout %s is not shorter than the executor's call limit %s "+
			"(CallTimeout; the lease is %s), which would cut its calls short and leave them uncertain: "+
			"raise the call timeout (and the lease above it) or lower the destination's timeout below %s",
			name, t, cfg.CallTimeout.Round(time.Millisecond), cfg.Lease, cfg.CallTimeout.Round(time.Millisecond))}
	}
	return cfg, nil
}

// DestinationTimeoutError is CheckConfig's refusal of a destination whose
// timeout is not shorter than the executor's call limit; Destination
// names it, so that a caller can say where it is configured.
type DestinationTimeoutError struct {
	Destination string
	msg         string
}

// Error says which destination, its timeout and the call limit, and what
// to change.
func (e *DestinationTimeoutError) Error() string { return e.msg }

// run is the pair of contexts one attempt runs under.
type run struct {
	// stop is cancelled when no new attempt may start: a claim not yet
	// dispatched is then given back.
	stop context.Context
	// calls is cancelled when calls in flight must end.
	calls context.Context
	// store carries the store writes (claims, dispatch marks, reports,
	// releases). Stopping does not cancel it: a claim whose result went
	// unseen would be left for its lease, an outcome unrecorded to a
	// lookup or a person. Only a Stop whose ctx has ended, stopGrace
	// later, cancels it, so that a store that no longer answers cannot
	// hold Stop forever.
	store context.Context
}

// stopCutOff is Stop's error when its deadline (cause) came with work in
// flight: calls is how many destination calls were running then, and were
// cancelled; storeCut says whether writes to the store were cut off
// stopGrace later. Nil when neither: the rest ended within the grace.
func stopCutOff(calls int64, storeCut bool, cause error) error {
	var what []string
	if calls > 0 {
		what = append(what, fmt.Sprintf("%d call%s in flight cancelled (recorded uncertain, or retryable if the request never left)", calls, plural(calls)))
	}
	if storeCut {
		what = append(what, fmt.Sprintf("writes to the store still waiting %s later cut off (an outcome not recorded leaves its operation to its lease)", stopGrace))
	}
	if len(what) == 0 {
		return nil // what was in flight ended within the grace: nothing cut off
	}
	return fmt.Errorf("stop executor: at the deadline, %s: %w", strings.Join(what, "; "), cause)
}

// plural is "s" unless n is 1.
func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// stopGrace is how long Stop waits, after its ctx has ended and the calls
// in flight were cancelled, for their outcomes to be recorded before it
// cancels the store writes still waiting.
const stopGrace = 5 * time.Second

// RunOnce claims one due operation of the configured destinations and
// makes its attempt: dispatch, call, report. It returns the operation as
// the report left it, or nil when nothing was due (or the claim was given
// back because ctx ended before dispatch). Cancelling ctx during the call
// cancels the call; the outcome is reported regardless (a call that
// ignores the cancel is abandoned, as in Config.CallTimeout: RunOnce then
// returns the operation in progress, its claim kept until the call
// returns, and its outcome reported then). A destination
// whose Call panics does not panic RunOnce: the attempt is recorded
// uncertain ("destination panicked: …"), as Start's workers do.
func (e *Executor) RunOnce(ctx context.Context) (*opledger.Operation, error) {
	op, _, _, err := e.step(run{stop: ctx, calls: ctx, store: context.WithoutCancel(ctx)}, e.cfg.Worker)
	return op, err
}

// Start starts the worker pool and the lease sweep. Cancelling ctx stops
// claiming, like Stop, but only Stop waits for the workers and can cancel
// calls in flight; call Stop in any case. An executor starts once, and
// never after Stop (even a Stop before any Start): Start then returns an
// error and starts nothing.
//
// A destination whose Call panics does not stop the pool: the panic is
// recovered, logged at ERROR with its stack, and the attempt recorded
// uncertain ("destination panicked: …"; the dispatch mark precedes the
// call, so the request may have gone out); the worker goes on with the
// next operation. A Prepare that panics ends its attempt rejected, with
// nothing sent.
func (e *Executor) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return errors.New("executor: already started")
	}
	if e.stopped {
		return errors.New("executor: stopped: an executor does not start after Stop; create a new one")
	}
	e.started = true
	stop, stopClaims := context.WithCancelCause(ctx)
	calls, cancelCalls := context.WithCancelCause(context.WithoutCancel(ctx))
	store, cancelStore := context.WithCancelCause(context.WithoutCancel(ctx))
	e.stopClaims, e.cancelCalls, e.cancelStore = stopClaims, cancelCalls, cancelStore
	r := run{stop: stop, calls: calls, store: store}
	for i := range e.cfg.Workers {
		e.wg.Add(1)
		go e.work(r, e.cfg.Worker+"/"+strconv.Itoa(i+1))
	}
	if e.cfg.SweepInterval > 0 {
		e.wg.Add(1)
		go e.sweep(stop)
	}
	// The worker names its attempts carry ("executor@host:pid/n"): which
	// process, on which machine, made an attempt.
	e.log.Info("executor started", "workers", e.cfg.Workers, "worker", e.cfg.Worker+"/1…"+strconv.Itoa(e.cfg.Workers),
		"destinations", strings.Join(e.names, ","))
	return nil
}

// Stop shuts the executor down: no new claim is made, a claim not yet
// dispatched is given back (the operation is pending again at once), and
// calls in flight run to their end and are reported. If ctx ends first,
// the calls still in flight are cancelled with ErrStopping as the cause,
// reported (as uncertain, or retryable if the request never left). A
// store that does not answer within 5 seconds after that (a lock held
// elsewhere, a partition) has its writes cancelled: an outcome not
// recorded then leaves its operation to its lease, which makes it
// uncertain, never lost. A call that ignores the cancel is abandoned as
// in Config.CallTimeout: Stop does not wait for it, and its claim is kept
// while the ledger stays open (a process that exits leaves it to its
// lease). Stop returns when
// every worker goroutine has ended: with an error wrapping ctx's that says what was cut off (calls,
// writes to the store), or nil when nothing was.
//
// Stop is final: a later Start is refused. A Stop before Start starts
// nothing and returns nil; a second Stop returns nil at once.
func (e *Executor) Stop(ctx context.Context) error {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	started := e.started
	e.mu.Unlock()

	close(e.stopping)
	if !started {
		return nil
	}
	e.stopClaims(ErrStopping)
	done := make(chan struct{})
	go func() {
		e.wg.Wait()
		close(done)
	}()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		calls := e.calling.Load()
		e.cancelCalls(fmt.Errorf("%w: %w", ErrStopping, context.Cause(ctx)))
		grace := time.NewTimer(stopGrace)
		storeCut := false
		select {
		case <-done:
		case <-grace.C:
			storeCut = true
			e.cancelStore(fmt.Errorf("%w: the store did not answer within %s of the deadline", ErrStopping, stopGrace))
			<-done
		}
		grace.Stop()
		err = stopCutOff(calls, storeCut, context.Cause(ctx))
	}
	e.cancelCalls(ErrStopping)
	e.cancelStore(ErrStopping)
	e.log.Info("executor stopped")
	return err
}

// work is one worker goroutine: attempts until nothing is due, then a
// pause, until stopped. While the store is unavailable, busy or full
// (storeDown) the pause doubles at each consecutive failure of the
// worker, up to maxStoreBackoff, and the log says so as the failures
// add up rather than at each (storeFailed); the first answer of the
// store ends it (storeAnswered).
func (e *Executor) work(r run, worker string) {
	defer e.wg.Done()
	timer := time.NewTimer(e.cfg.PollInterval)
	defer timer.Stop()
	failures := 0 // this worker's consecutive store failures
	for {
		pause := e.cfg.PollInterval
		for r.stop.Err() == nil {
			_, claimed, answered, err := e.step(r, worker)
			down := storeDown(err)
			if err != nil && (claimed || !down) {
				// An attempt that lost its dispatch or its outcome to the
				// store is said as before: it is one of its own, not one
				// more failed claim.
				e.log.Error("attempt failed", "worker", worker, "error", err)
			}
			if down {
				failures++
				pause = e.storeBackoff(failures)
				e.storeFailed(worker, failures, pause, err)
				break
			}
			if err == nil && answered {
				// Only a step that asked the store: one that found
				// nothing it may claim asked nothing, and says nothing
				// of the store.
				failures = 0
				e.storeAnswered()
			}
			if !claimed || err != nil {
				// Nothing due, or a problem: pause before the next try.
				// A claim that ended without an attempt to show (lost,
				// given back, held at its dispatch) goes straight on.
				break
			}
		}
		if !e.wait(r.stop, timer, pause) {
			return
		}
	}
}

// wait pauses a worker for d; it returns false, at once, when stop ends.
func (e *Executor) wait(stop context.Context, timer *time.Timer, d time.Duration) bool {
	if e.pause != nil {
		e.pause(stop, d)
		return stop.Err() == nil
	}
	timer.Reset(d)
	select {
	case <-stop.Done():
		return false
	case <-timer.C:
		return true
	}
}

// maxStoreBackoff bounds a worker's pause while the store is unavailable
// (or the poll interval, if longer).
const maxStoreBackoff = 30 * time.Second

// storeDown reports an error of a store that could not be reached
// (opledger.ErrStoreUnavailable), held a lock past its wait
// (opledger.ErrStoreBusy) or has a full disk (opledger.ErrStoreFull):
// nothing was recorded, and the next try soon after would most likely
// fail the same way. periodic.StoreProblem names them, for every loop
// of the process alike.
func storeDown(err error) bool {
	return periodic.StoreProblem(err) != ""
}

// storeBackoff is a worker's pause after its nth consecutive store
// failure: the poll interval, doubled at each failure after the first,
// up to maxStoreBackoff (or the poll interval, if longer), less up to a
// quarter at random so that workers, and processes, do not come back
// all at once.
func (e *Executor) storeBackoff(n int) time.Duration {
	limit := max(maxStoreBackoff, e.cfg.PollInterval)
	d := e.cfg.PollInterval
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	d = min(d, limit)
	return d - rand.N(d/4+1)
}

// storeFailed counts a store failure (storeDown) of worker, its nth in a
// row, after which it pauses for pause. The executor's first failure
// since the store last answered is logged at WARN, and so is each count
// of failures (of all its workers) that doubles past the number of
// workers (a pool failing together says it once, not once per worker);
// the others at DEBUG.
func (e *Executor) storeFailed(worker string, n int, pause time.Duration, err error) {
	e.outageMu.Lock()
	if e.outage.failures == 0 {
		e.outage = storeOutage{since: time.Now()}
	}
	e.outage.failures++
	e.inOutage.Store(true)
	total, since := e.outage.failures, e.outage.since
	e.outageMu.Unlock()
	problem := periodic.StoreProblem(err)
	level := slog.LevelDebug
	if total == 1 || (total > e.cfg.Workers && total&(total-1) == 0) {
		level = slog.LevelWarn
	}
	e.log.Log(context.Background(), level, "store unavailable, backing off", "problem", problem, "failures", total,
		"outage", time.Since(since).Round(time.Millisecond), "worker", worker, "worker_failures", n, "pause", pause.Round(time.Millisecond),
		"error", err)
}

// storeAnswered ends the outage under way, if any: the store answered
// a worker's claim (never called for a step that asked it nothing). It
// logs, at INFO, how many failures and how long the outage lasted.
// The other workers still pausing go on at the end of their pause, each
// back to the poll interval at its first success.
func (e *Executor) storeAnswered() {
	if !e.inOutage.Load() {
		return // the common case, on every step: no lock
	}
	e.outageMu.Lock()
	o := e.outage
	e.outage = storeOutage{}
	e.inOutage.Store(false)
	e.outageMu.Unlock()
	if o.failures == 0 {
		return
	}
	e.log.Info("store reachable again", "failures", o.failures, "outage", time.Since(o.since).Round(time.Millisecond))
}

// sweep settles expired leases at once and then periodically. Each turn
// is bounded as Maintain's lease sweep is (periodic.TurnBound), so that a store
// that holds it (a LOCK TABLE held elsewhere while the PostgreSQL DSN
// sets no lock_timeout, a SQLite lock held past a long
// SQLiteBusyTimeout) ends the turn as store_busy, logged by the outage
// rule, rather than stalling the sweep in silence.
func (e *Executor) sweep(stop context.Context) {
	defer e.wg.Done()
	var n int
	turn := periodic.Bounded(periodic.TurnBound(e.cfg.SweepInterval), func(ctx context.Context) error {
		var err error
		n, err = e.ledger.ExpireLeases(ctx)
		if n > 0 {
			e.log.Info("settled expired leases", "count", n)
		}
		return err
	})
	periodic.Run(stop, e.cfg.SweepInterval, e.log, "expire leases", func(ctx context.Context) error {
		err := turn(ctx)
		if e.afterSweep != nil {
			e.afterSweep(n, err)
		}
		return err
	})
}

// step claims one operation and makes its attempt. claimed says whether
// it claimed one; op is nil when that claim ended with no attempt to
// show (lost before its dispatch mark, given back, held at its dispatch).
// answered says whether the store answered its claim (with an operation,
// or with nothing due): false when it failed, and when the step asked
// the store nothing (stopping, or no destination it may claim for).
func (e *Executor) step(r run, worker string) (op *opledger.Operation, claimed, answered bool, err error) {
	if r.stop.Err() != nil {
		return nil, false, false, nil
	}
	// Store writes run to completion even when stopping (run.store).
	bg := r.store
	claimedAt := time.Now() // no later than the lease's start
	// A protected retry whose window closes before a call claimed now
	// could end is held by the claim, not claimed only to be refused; an
	// operation whose abandoned call still runs here is not claimed, nor
	// one of a destination with maxAbandoned of them.
	dests := e.claimable()
	if len(dests) == 0 {
		return nil, false, false, nil // as if nothing were due: the calls may yet return
	}
	// The claim is bounded by the lease: one answered later would have
	// expired already, and one that hangs (a LOCK TABLE held elsewhere
	// while the DSN sets no lock_timeout, a connection that stopped
	// answering) would hold the worker, and Stop, for as long as it
	// hangs. A claim that landed unseen is left to its lease (it was not
	// dispatched: the sweep makes it pending again).
	claimCtx, cancelClaim := context.WithDeadline(bg, claimedAt.Add(e.cfg.Lease))
	c, err := e.ledger.ClaimNext(claimCtx, opledger.ClaimNextOptions{
		Worker: worker, Lease: e.cfg.Lease, Destinations: dests, AllTenants: true, CallTimeout: e.cfg.CallTimeout,
		Skip: e.stillCalling()})
	// A store that held the claim a whole lease is busy: a lock the claim
	// needs is held elsewhere past the executor's wait. The worker backs
	// off and logs it as a store outage.
	err = periodic.Cut(bg, claimCtx, "the lease ("+e.cfg.Lease.String()+")", err)
	cancelClaim()
	if errors.Is(err, opledger.ErrNothingDue) {
		return nil, false, true, nil
	}
	if err != nil {
		err = fmt.Errorf("claim next: %w", err)
	}
	if err != nil {
		e.noteSchemaNewer(err)
		return nil, false, false, err
	}
	if e.stillRunning(c.Operation) {
		// A call of an earlier attempt, abandoned at its limit just after
		// the claim skipped what still ran, may still act: nothing is
		// sent beside it. The claim is given back and the worker pauses,
		// as when nothing is due.
		tl, err := e.ledger.WithTenant(c.Operation.Tenant)
		if err != nil {
			return nil, false, true, fmt.Errorf("attempt %s: %w", c.AttemptID, err)
		}
		log := e.log.With("tenant", c.Operation.Tenant, "destination", c.Operation.Destination, "attempt_id", c.AttemptID)
		return nil, false, true, e.release(bg, tl, c, log,
			"a call of an earlier attempt, abandoned at its time limit, is still running in this executor")
	}
	op, err = e.attempt(r, bg, c, claimedAt)
	e.noteSchemaNewer(err)
	return op, true, true, err
}

// noteSchemaNewer logs at ERROR, once per executor, when err says that a
// newer release has migrated the ledger's schema under this process
// (opledger.ErrSchemaNewer): from then on the store refuses every write
// of this process (claims, dispatch marks, outcomes), so it must be
// stopped and replaced by the newer release. Each refusal is still
// returned (and a worker logs it as a failed attempt); this line says
// why they will not stop.
func (e *Executor) noteSchemaNewer(err error) {
	if !errors.Is(err, opledger.ErrSchemaNewer) {
		return
	}
	e.olderRelease.Do(func() {
		e.log.Error("this process's release is older than the ledger's schema: a newer release migrated it, and the ledger "+
			"refuses every write of this process from now on (claims, dispatch marks, outcomes of calls in flight): "+
			"stop this process and run the newer release (docs/operations.md, \"Upgrading\")",
			"problem", "schema_newer", "error", err)
	})
}

// attempt dispatches, calls and reports one claimed operation.
func (e *Executor) attempt(r run, bg context.Context, c *opledger.Claim, claimed time.Time) (*opledger.Operation, error) {
	op := c.Operation
	log := e.log.With("tenant", op.Tenant, "destination", op.Destination, "attempt_id", c.AttemptID)
	tl, err := e.ledger.WithTenant(op.Tenant)
	if err != nil {
		return nil, fmt.Errorf("attempt %s: %w", c.AttemptID, err)
	}
	if e.beforeDispatch != nil {
		e.beforeDispatch(r.stop)
	}
	dest, ok := e.dests.Get(op.Destination)
	if !ok {
		return nil, e.release(bg, tl, c, log, "destination "+op.Destination+" is not configured in this executor")
	}
	if cause := context.Cause(r.stop); cause != nil {
		return nil, e.release(bg, tl, c, log, "given back before dispatch: "+cause.Error())
	}
	if !destination.Serves(dest, op.Tenant) {
		// Its credentials are not this tenant's to use: the attempt ends
		// here, with nothing sent and no dispatch mark.
		return e.finish(r, bg, tl, c, unsendable(opledger.Rejected(errors.New("destination "+op.Destination+" does not serve tenant "+op.Tenant))), log)
	}
	call := opledger.Call{Operation: op, AttemptID: c.AttemptID, IdempotencyKey: c.IdempotencyKey, Protected: c.Protected,
		ProtectedUntil: c.ProtectedUntil}
	if p, ok := dest.(destination.Preparer); ok {
		if err := prepare(p, call, log); err != nil {
			// Content the destination cannot be sent: the attempt ends
			// here, with nothing sent and no dispatch mark.
			return e.finish(r, bg, tl, c, unsendable(err), log)
		}
	}
	// A protected retry's call fits in its window: the claim holds one
	// whose window closes within CallTimeout of the claim (ClaimNext's
	// CallTimeout), and the call's deadline counts from the claim too.
	//
	// The mark is bounded by the claim's lease: one that hangs (a
	// PostgreSQL connection that stopped answering, a row lock another
	// session holds while the DSN sets no lock_timeout) would otherwise
	// hold the worker, and the claim, for as long as it hangs, and past
	// the lease another worker may claim the operation anyway. A mark
	// that lands after the call's deadline still leaves no call to make
	// (below).
	markCtx, cancelMark := context.WithDeadline(bg, claimed.Add(e.cfg.Lease))
	dispatched, err := tl.Dispatch(markCtx, op.Key, c.AttemptID, c.FencingToken)
	cancelMark()
	if err != nil {
		if errors.Is(err, opledger.ErrStaleFencingToken) {
			log.Warn("claim lost before dispatch; nothing was sent")
			return nil, nil
		}
		var se *opledger.StateError
		if errors.As(err, &se) {
			// The ledger moved the operation instead (a protected retry
			// whose window closed is held): nothing was sent.
			log.Warn("dispatch refused; nothing was sent", "state", se.State)
			return nil, nil
		}
		// Nothing was sent. Whether the mark landed is unknown: give the
		// claim back, or, if it did land, report that nothing went out,
		// each bounded by a lease as the mark is (a store that hangs
		// leaves the claim to its lease).
		err = fmt.Errorf("dispatch attempt %s: %w", c.AttemptID, err)
		relCtx, cancelRel := context.WithTimeout(bg, e.cfg.Lease)
		_, rerr := tl.Release(relCtx, op.Key, c.AttemptID, c.FencingToken, "dispatch mark failed; nothing was sent")
		cancelRel()
		if errors.Is(rerr, opledger.ErrAlreadyDispatched) {
			repCtx, cancelRep := context.WithTimeout(bg, e.cfg.Lease)
			_, rerr = tl.Report(repCtx, op.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable,
				Error: "the call was not made: recording the dispatch failed"})
			cancelRep()
		}
		if rerr != nil && !errors.Is(rerr, opledger.ErrStaleFencingToken) {
			err = errors.Join(err, fmt.Errorf("settle attempt %s: %w", c.AttemptID, rerr))
		}
		return nil, redact.Keys(op.Key, err)
	}

	// CallTimeout counts from the claim, not from the call: time spent
	// dispatching (a busy store) must not push the call's end past the
	// lease, which would turn its answer into a late report. A dispatch
	// that took all of it leaves no call to make: the attempt is then
	// retryable, with nothing sent.
	callCtx, cancel := context.WithDeadline(r.calls, claimed.Add(e.cfg.CallTimeout))
	defer cancel()
	if cause := context.Cause(callCtx); cause != nil {
		// The dispatch took the call's whole time (or Stop cancelled the
		// calls meanwhile): a call started now could only fail, and an
		// error a destination made of its ended context would read as
		// uncertain. Nothing was sent.
		return e.finish(r, bg, tl, c, opledger.Report{Outcome: opledger.OutcomeRetryable,
			Error: "the call was not made: " + cause.Error() + " before it could start (the call limit counts from the claim); nothing was sent"}, log)
	}
	e.calling.Add(1)
	done := make(chan callOutcome, 1)
	go func() {
		returned := false
		defer func() {
			if !returned { // runtime.Goexit in the call
				done <- callOutcome{err: opledger.Uncertain(errors.New("destination call did not return (runtime.Goexit)"))}
			}
		}()
		res, err := callDest(callCtx, dest, call, log)
		returned = true
		done <- callOutcome{res, err}
	}()
	out, ok := e.awaitCall(callCtx, done)
	// Read at once: a Stop whose deadline comes after the call returned
	// cut nothing.
	stopCause := context.Cause(r.calls)
	e.calling.Add(-1)
	if !ok {
		return e.abandon(bg, tl, c, dispatched, callCtx, done, stopCause, log)
	}
	return e.finish(r, bg, tl, c, reportFor(out.res, out.err, stopCause), log)
}

// callOutcome is what a destination call returned.
type callOutcome struct {
	res opledger.Result
	err error
}

// awaitCall waits for the call that sends its outcome to done; ok is
// false when the call did not return within callGrace of the end of its
// context (its deadline, or Stop's cancel): it ignores its context, and
// waiting longer could hold the worker for ever.
func (e *Executor) awaitCall(callCtx context.Context, done <-chan callOutcome) (out callOutcome, ok bool) {
	select {
	case out = <-done:
		return out, true
	case <-callCtx.Done():
	}
	grace := time.NewTimer(e.callGrace)
	defer grace.Stop()
	select {
	case out = <-done:
		return out, true
	case <-grace.C:
		return callOutcome{}, false
	}
}

// abandon stops waiting for a call that did not return within its limit
// and the grace after it (it ignores its context), and returns op, the
// operation as its dispatch mark left it (in progress). The worker goes
// on; the call's goroutine runs on, counted by AbandonedCalls. The claim
// is kept while it runs: its lease is extended (keepClaim), so that no
// worker of any process, sharing the store, claims the operation and
// sends it again beside the call, and no lease sweep makes it uncertain.
// What the call returns at last is reported under the claim, as any
// outcome is; a claim lost meanwhile (a store that did not take the
// extensions for a whole lease) makes it a late report, and a late
// success still settles the operation.
func (e *Executor) abandon(bg context.Context, tl *opledger.Ledger, c *opledger.Claim, op *opledger.Operation,
	callCtx context.Context, done <-chan callOutcome, stopCause error, log *slog.Logger) (*opledger.Operation, error) {
	running := e.countAbandoned(op, 1)
	log.Error("destination call abandoned: it ignored its context and did not return in time; its claim is kept, the lease extended, until it returns, so that the operation is not sent again meanwhile",
		"call_limit", e.cfg.CallTimeout, "grace", e.callGrace, "abandoned_calls", running, "cause", context.Cause(callCtx))
	if e.abandonedOf(op.Destination) >= e.maxAbandoned {
		log.Error("this destination has as many abandoned calls still running as the executor allows: none of its operations is claimed until one of them returns; its calls ignore their context: fix the destination",
			"abandoned_calls_of_destination", e.maxAbandoned)
	}
	// Stop may end the store's context meanwhile: the claim is still
	// worth keeping, and the outcome recording, while the ledger is open.
	store := context.WithoutCancel(bg)
	stopKeeping := e.keepClaim(store, tl, c, fmt.Sprintf("the destination call ignored its context and did not return within %s of its end "+
		"(the call limit is %s, counted from the claim; or the executor's stop cancelled it): its worker stopped waiting, and it still runs; "+
		"its claim is kept, the lease extended, until it returns, and what it returns is reported then",
		e.callGrace, e.cfg.CallTimeout), log)
	go func() {
		out := <-done
		stopKeeping()
		report := reportFor(out.res, out.err, stopCause)
		// Tried again, as any outcome is, when the store fails for a moment.
		after, err := e.report(run{store: store}, store, tl, c, report, log)
		running := e.countAbandoned(op, -1)
		var stale *opledger.StaleError
		switch {
		case err == nil:
			log.Info("abandoned destination call returned; its outcome is reported", "outcome", report.Outcome,
				"state", after.State, "abandoned_calls", running)
			e.advanceWorkflow(store, tl, after, log)
		case errors.As(err, &stale):
			log.Warn("abandoned destination call returned after its claim was lost; its outcome is kept as a late report",
				"outcome", report.Outcome, "state", stale.Operation.State, "abandoned_calls", running)
			e.advanceWorkflow(store, tl, stale.Operation, log)
		case errors.Is(err, opledger.ErrClosed):
			log.Warn("an abandoned destination call returned after the ledger closed; its outcome was not recorded (its lease will make the operation uncertain)",
				"outcome", report.Outcome, "abandoned_calls", running)
		default:
			log.Warn("an abandoned destination call returned, and recording its outcome failed (its lease will make the operation uncertain)",
				"outcome", report.Outcome, "abandoned_calls", running, "error", redact.Keys(op.Key, err))
		}
		if e.abandonedEnded != nil {
			e.abandonedEnded()
		}
	}()
	return op, nil
}

// keepClaim extends the lease of c, at once and then every third of the
// lease, until the returned stop is called: the claim of an abandoned
// call still running. First it notes on the operation's timeline, with
// why, that the call was abandoned and still runs, so that the console
// and the API show why the operation stays in progress. It gives up when
// the claim is lost (a *StaleError: the lease ran out before an
// extension landed) or the ledger closes; a store that failed for a
// moment is tried again at the next turn, the note too.
//
// Each store call is bounded by a third of the lease (the renewal
// interval, which tests shorten; the bound stays): one that hangs (a
// connection that stopped answering, a lock held elsewhere) is given up
// in time for the next turn to try again, on another connection. stop
// cancels the store call in flight, if any: the call has returned, and
// its outcome's report must not wait behind an extension of its claim.
func (e *Executor) keepClaim(ctx context.Context, tl *opledger.Ledger, c *opledger.Claim, why string, log *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	bound := e.cfg.Lease / 3
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(e.leaseRenewal)
		defer tick.Stop()
		noted := false
		for {
			if !noted {
				// A lost claim or a closed ledger refuses the note as the
				// extension below does: that says so.
				callCtx, cancelCall := context.WithTimeout(ctx, bound)
				_, err := tl.NoteCallAbandoned(callCtx, c.Operation.Key, c.AttemptID, c.FencingToken, why)
				cancelCall()
				if ctx.Err() != nil {
					return // stopped: the call returned
				}
				noted = err == nil
				if err != nil && !errors.Is(err, opledger.ErrStaleFencingToken) && !errors.Is(err, opledger.ErrClosed) {
					log.Warn("noting the abandoned destination call on its operation's timeline failed; trying again",
						"error", redact.Keys(c.Operation.Key, err))
				}
			}
			callCtx, cancelCall := context.WithTimeout(ctx, bound)
			_, err := tl.ExtendLease(callCtx, c.Operation.Key, c.AttemptID, c.FencingToken, e.cfg.Lease)
			cancelCall()
			if ctx.Err() != nil {
				return // stopped: the call returned
			}
			var stale *opledger.StaleError
			switch {
			case err == nil:
				if e.leaseKept != nil {
					e.leaseKept()
				}
			case errors.Is(err, opledger.ErrClosed):
				log.Warn("the ledger closed: the claim of an abandoned destination call still running is no longer kept; " +
					"its lease will make the operation uncertain, unless another process's ledger receives its outcome")
				e.claimNotKeptHook()
				return
			case errors.As(err, &stale):
				log.Warn("the claim of an abandoned destination call still running was lost: the operation may be claimed and sent again beside it",
					"error", redact.Keys(c.Operation.Key, err))
				e.claimNotKeptHook()
				return
			default:
				log.Warn("extending the lease of an abandoned destination call still running failed; trying again",
					"error", redact.Keys(c.Operation.Key, err))
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		cancel()
		<-ended
		if e.keepStopped != nil {
			e.keepStopped()
		}
	}
}

// claimNotKeptHook runs the test hook claimNotKept, if set.
func (e *Executor) claimNotKeptHook() {
	if e.claimNotKept != nil {
		e.claimNotKept()
	}
}

// maxPanicText bounds the text of a recovered panic's value in the
// attempt's error and the log.
const maxPanicText = 200

// callDest calls dest. A panic in the call is recovered and logged (at
// ERROR, with its stack), and returned as an uncertain error: the dispatch
// mark precedes the call, so the request may have gone out. One bad
// destination must not take the executor, or its other operations, down.
func callDest(ctx context.Context, dest destination.Destination, call opledger.Call, log *slog.Logger) (res opledger.Result, err error) {
	defer func() {
		if v := recover(); v != nil {
			why := panicText("destination panicked", v, call)
			log.Error("destination panicked; the attempt is recorded uncertain", "error", why, "stack", string(debug.Stack()))
			res, err = opledger.Result{}, opledger.Uncertain(errors.New(why))
		}
	}()
	return dest.Call(ctx, call)
}

// prepare asks p whether call can be sent. A panic in Prepare is
// recovered and logged like one in Call, and returned as a rejection:
// nothing was marked dispatched, nothing sent.
func prepare(p destination.Preparer, call opledger.Call, log *slog.Logger) (err error) {
	defer func() {
		if v := recover(); v != nil {
			why := panicText("destination panicked in Prepare", v, call)
			log.Error("destination panicked before the dispatch; nothing was sent", "error", why, "stack", string(debug.Stack()))
			err = opledger.Rejected(errors.New(why))
		}
	}()
	return p.Prepare(call)
}

// panicText describes a recovered panic value v for the attempt's error
// and the log: what panicked and the value's text, without the
// operation's key, idempotency key and sensitive values, cut to
// maxPanicText bytes.
func panicText(what string, v any, call opledger.Call) string {
	text := call.Operation.MaskText(fmt.Sprint(v))
	if k := call.IdempotencyKey; k != "" {
		text = strings.ReplaceAll(text, k, "<idempotency key>")
	}
	text = textcut.Valid(redact.Keys(call.Operation.Key, errors.New(text)).Error())
	if len(text) > maxPanicText {
		text = textcut.Prefix(text, maxPanicText) + "…"
	}
	return what + ": " + text
}

// finish reports the attempt's outcome and, once its operation has
// succeeded, records its workflow's next step.
func (e *Executor) finish(r run, bg context.Context, tl *opledger.Ledger, c *opledger.Claim, report opledger.Report, log *slog.Logger) (*opledger.Operation, error) {
	op := c.Operation
	after, err := e.report(r, bg, tl, c, report, log)
	var stale *opledger.StaleError
	if errors.As(err, &stale) {
		log.Warn("late report kept as evidence", "outcome", report.Outcome, "state", stale.Operation.State)
		e.advanceWorkflow(bg, tl, stale.Operation, log)
		return stale.Operation, nil
	}
	if err != nil {
		return nil, redact.Keys(op.Key, fmt.Errorf("report attempt %s: %w", c.AttemptID, err))
	}
	log.Info("attempt reported", "outcome", report.Outcome, "state", after.State, "protected", c.Protected,
		"attempt", after.AttemptCount)
	e.advanceWorkflow(bg, tl, after, log)
	return after, nil
}

// advanceWorkflow records the next step of the workflow op is a step of,
// once op has succeeded, rather than leaving it to the server's periodic
// sweep. A failure is logged: the sweep still advances the workflow. The
// write is bounded by a lease, as the executor's other writes are: one
// that hangs (a lock on the workflow another session holds while the
// DSN sets no lock_timeout) is given up, logged at WARN, rather than
// hold the worker for as long as it hangs.
func (e *Executor) advanceWorkflow(ctx context.Context, tl *opledger.Ledger, op *opledger.Operation, log *slog.Logger) {
	if op.State != opledger.StateSucceeded {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Lease)
	defer cancel()
	advance.WorkflowOf(ctx, tl, op.Key, log)
}

// release gives back a claim that was not dispatched. The write is
// bounded by a lease, as the dispatch mark is: one that hangs (a row
// lock another session holds while the DSN sets no lock_timeout) leaves
// the claim to its lease rather than hold the worker for ever.
func (e *Executor) release(bg context.Context, tl *opledger.Ledger, c *opledger.Claim, log *slog.Logger, reason string) error {
	ctx, cancel := context.WithTimeout(bg, e.cfg.Lease)
	defer cancel()
	if _, err := tl.Release(ctx, c.Operation.Key, c.AttemptID, c.FencingToken, reason); err != nil {
		if errors.Is(err, opledger.ErrStaleFencingToken) {
			return nil // the lease already ran out and was settled
		}
		return redact.Keys(c.Operation.Key, fmt.Errorf("release attempt %s: %w", c.AttemptID, err))
	}
	log.Info("claim given back before dispatch", "reason", reason)
	return nil
}

// reportRetryBudget bounds how long the executor keeps trying to record
// an outcome the store failed to take; reportBackoff is its first wait,
// doubled after each failure up to maxReportBackoff.
const (
	reportRetryBudget = 2 * time.Minute
	reportBackoff     = 50 * time.Millisecond
	maxReportBackoff  = 5 * time.Second
)

// report records the call's outcome. The call has happened: an outcome
// lost to a store that failed for a moment (a dropped connection, a busy
// database) would leave the operation to expire into uncertain, and a
// success to a lookup or a person. So a report the store failed to take
// is tried again, with backoff, for reportRetryBudget, even while the
// executor stops (until Stop gives up on the store): past the lease it is
// still kept, as a late report, and a late success still settles the
// operation. A refusal the ledger decided (a stale claim, a bad report)
// is returned at once, and so are opledger.ErrSchemaNewer (once a newer
// release has migrated the schema, the store refuses every write of this
// process for good) and opledger.ErrClosed (the ledger was closed, an
// abandoned call returning after it): trying again would only delay the
// error.
//
// Each try is bounded by the lease (and by what is left of the budget):
// a write that hangs (a PostgreSQL connection that stopped answering, a
// row lock another session holds while the DSN sets no lock_timeout)
// would otherwise hold the worker, and the claim, for as long as it
// hangs; past the lease another worker may claim the operation anyway.
// It is then tried again, on another connection, as any failed write is.
func (e *Executor) report(r run, bg context.Context, tl *opledger.Ledger, c *opledger.Claim, report opledger.Report,
	log *slog.Logger) (*opledger.Operation, error) {
	deadline := time.Now().Add(reportRetryBudget)
	wait := reportBackoff
	for try := 1; ; try++ {
		tryEnd := time.Now().Add(e.cfg.Lease)
		if tryEnd.After(deadline) {
			tryEnd = deadline
		}
		tryCtx, cancel := context.WithDeadline(bg, tryEnd)
		after, err := tl.Report(tryCtx, c.Operation.Key, c.AttemptID, c.FencingToken, report)
		cancel()
		if err == nil || ledgerDecided(err) || errors.Is(err, opledger.ErrSchemaNewer) || errors.Is(err, opledger.ErrClosed) ||
			time.Now().Add(wait).After(deadline) {
			return after, err
		}
		log.Warn("recording the outcome failed; trying again", "outcome", report.Outcome, "try", try,
			"error", redact.Keys(c.Operation.Key, err))
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.store.Done(): // Stop gave up on the store
			t.Stop()
			return after, err
		}
		wait = min(2*wait, maxReportBackoff)
	}
}

// ledgerDecided reports an error the ledger itself returned about the
// request (as opposed to a failure of the store): trying again would get
// the same answer.
func ledgerDecided(err error) bool {
	for _, target := range []error{opledger.ErrStaleFencingToken, opledger.ErrInvalidState, opledger.ErrInvalidInput,
		opledger.ErrInvalidKey, opledger.ErrNotFound, opledger.ErrFingerprintMismatch} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// reportFor is the report of a call that returned res and err
// (opledger.ReportOf: a reference that comes back with an error is kept on
// the attempt, a retryable error with one counts as uncertain), noting
// stopCause, the cause with which the executor cancelled calls in flight
// before this one returned (nil: it did not), when the cancel cut the
// call. A call that ended with the destination's answer was not cut,
// even if the cancel came before it returned: a refusal (rejected), or an
// answer with a status (destination.StatusError: a 429, a 5xx) that
// arrived before it.
func reportFor(res opledger.Result, err error, stopCause error) opledger.Report {
	r := opledger.ReportOf(res, err)
	_, answered := errors.AsType[*destination.StatusError](err)
	if stopCause != nil && !answered && r.Outcome != opledger.OutcomeSucceeded && r.Outcome != opledger.OutcomeRejected {
		r = r.WithNote(" (call cancelled: " + stopCause.Error() + ")")
	}
	return r
}

// unsendable is the report of an attempt whose call a destination's
// Prepare refused: rejected, or retryable if the destination says the
// condition may pass, never uncertain, since nothing was sent.
func unsendable(err error) opledger.Report {
	outcome, after := opledger.OutcomeOf(err)
	if outcome != opledger.OutcomeRetryable {
		outcome, after = opledger.OutcomeRejected, 0
	}
	return opledger.Report{Outcome: outcome, Error: "not sent: " + opledger.ErrorText(err), RetryAfter: after}
}
