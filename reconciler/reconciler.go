// Package reconciler takes uncertain operations out of uncertainty. For
// each operation that opledger.Ledger.ReconcileQueue says is due, it
// applies DESIGN.md's table with what the operation's destination declares
// (package destination):
//
//   - a lookup finds the record with the intended content → succeeded,
//     with the destination's reference;
//   - a lookup finds other content (or several records) → held;
//   - an authoritative lookup finds nothing once the visibility delay since
//     the last dispatch has passed → pending, retried; unless the
//     destination said it made a record (an attempt's error matched
//     destination.ErrExists, or an attempt reported a reference without a
//     success, which the lookup is given): absence then proves nothing;
//   - a lookup finds nothing within that delay → stays uncertain, checked
//     again later;
//   - the destination's idempotency key is still inside its retention
//     window (from the first dispatch) → pending, the retry marked
//     protected;
//   - otherwise (no lookup, no protection, retention passed) → held for
//     its owner, with a review deadline.
//
// A lookup that fails is tried again with exponential backoff
// (Ledger.DeferReconcile), never before the wait a throttled lookup's
// Retry-After asked for, and, after MaxLookupFailures failures since the
// operation became uncertain, the operation is held. Nothing is ever
// resent because a lookup failed. Reconcilers of several processes may
// share a store: each lookup is taken first (Ledger.ClaimLookup), so one
// process looks an operation up at a time.
//
// Allowed imports: opledger, opledger/destination, internal/advance,
// internal/marker, internal/periodic (the rule for logging a store
// outage), internal/redact, internal/textcut, the standard library.
package reconciler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/advance"
	"github.com/opledger/opledger/internal/marker"
	"github.com/opledger/opledger/internal/periodic"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/internal/textcut"
)

// Config configures a Reconciler. Zero values take the documented defaults.
type Config struct {
	// Destinations declare what each destination guarantees. Required,
	// with at least one destination.
	// RunOnce takes only the uncertain operations of these destinations
	// from the store; the others are left for whoever reconciles them
	// (Reconcile, called with one, waits UnknownRecheck).
	Destinations *destination.Set
	// Interval is the pause between passes over the queue. Default 5 s.
	Interval time.Duration
	// BatchSize is how many operations one pass takes. Default 100; at
	// most opledger.MaxListLimit (the most ReconcileQueue returns), New
	// refuses more.
	BatchSize int
	// Concurrency is how many operations are examined at once. Default 4.
	Concurrency int
	// LookupTimeout bounds one lookup. Default 30 s. A destination that
	// bounds its calls and lookups itself (destination.Timed, as an HTTP
	// destination's timeout does) has its own bound when that is longer:
	// its timeout says how long one of its lookups may take. The lookup's
	// context ends then; a lookup that does not return within
	// LookupGrace after that is abandoned (see Reconcile).
	LookupTimeout time.Duration
	// LookupBackoff is the wait after the first failed lookup; it doubles
	// with each further failure up to MaxLookupBackoff. Defaults 10 s and
	// 15 min. A lookup that failed with a wait the destination asked for
	// (opledger.Retryable with a Retry-After, as an HTTP destination's
	// throttled lookup does) waits that long if it is longer, up to
	// MaxLookupWait.
	LookupBackoff, MaxLookupBackoff time.Duration
	// MaxLookupFailures is how many failed lookups, since the operation
	// became uncertain (Ledger.LookupFailures), hold it for a person.
	// Default 8.
	MaxLookupFailures int
	// RecheckInterval is how often a lookup that found nothing is repeated
	// while the destination's visibility delay runs: a lookup begun within
	// the delay is made again when the delay ends (by the ledger's clock,
	// however long the lookup took), or after RecheckInterval if that is
	// sooner. Default 1 min.
	RecheckInterval time.Duration
	// UnknownRecheck is how long an operation of a destination that is not
	// configured here, or does not serve the operation's tenant
	// (destination.Serves), waits before it is looked at again. Default
	// 10 min. Its timeline keeps one "reconcile deferred" entry for these
	// waits (Ledger.DeferReconcile), not one per recheck.
	UnknownRecheck time.Duration
	// Tenant limits the reconciler to one tenant's operations, as an
	// opledger proxy does with its own: its lookups carry its upstream's
	// credentials, which must not answer for another tenant's operations.
	// Empty means every tenant's.
	Tenant string
	// Logger receives one line per decision. Default slog.Default().
	Logger *slog.Logger
}

// Reconciler applies lookups and declared protections to uncertain
// operations of every tenant, or of Config.Tenant.
type Reconciler struct {
	ledger *opledger.Ledger
	dests  *destination.Set
	cfg    Config
	log    *slog.Logger

	// abandoned holds the operations (tenant, key) whose lookup was
	// abandoned after its timeout and is still running.
	mu        sync.Mutex
	abandoned map[abandonedKey]struct{}

	// outageMu guards outage: the operations of the passes (of RunOnce,
	// across passes) that the store could not take since it last took
	// one, logged by the outage rule (logOperation).
	outageMu sync.Mutex
	outage   periodic.Outage

	// leaseMargin is lookupLeaseMargin (tests shorten it).
	leaseMargin time.Duration
}

// abandonedKey names an operation whose lookup was abandoned.
type abandonedKey struct{ tenant, key string }

// LookupGrace is how long after its timeout the reconciler still waits for
// a lookup that has not returned (a Go lookup that does not heed its
// context's end). Then the lookup is abandoned: it counts as a failed
// lookup, timed out, and the pass goes on; its goroutine is left to end
// by itself (Reconciler.AbandonedLookups counts it until then), and no
// other lookup of the operation is started by this reconciler meanwhile.
const LookupGrace = 2 * time.Second

// AbandonedLookups returns how many lookups this reconciler abandoned
// (LookupGrace) are still running: each is a goroutine kept by a
// destination's lookup that ignored its context. It stays above 0 while
// such a lookup hangs (opledger serve's and opledger proxy's /metrics
// serve it as opledger_reconciler_abandoned_lookups); each of their operations is
// meanwhile counted as a failed lookup at each of its checks, and held
// after MaxLookupFailures.
func (r *Reconciler) AbandonedLookups() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.abandoned)
}

// New returns a reconciler for l. It refuses a nil l, a nil or empty
// Config.Destinations, and a Config.BatchSize above
// opledger.MaxListLimit (opledger.ErrInvalidInput).
func New(l *opledger.Ledger, cfg Config) (*Reconciler, error) {
	if cfg.Destinations == nil {
		return nil, errors.New("reconciler: no destinations configured")
	}
	if cfg.Destinations.Len() == 0 {
		// Its queue would name no destination, which the ledger reads as
		// any (ReconcileQueueOptions): it would take, and put off, the
		// operations of destinations other processes reconcile.
		return nil, errors.New("reconciler: no destinations configured: the set is empty, and a reconciler takes only its own destinations' operations")
	}
	if l == nil {
		return nil, errors.New("reconciler: a ledger is required: New was given a nil *opledger.Ledger")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Interval, 5*time.Second)
	def(&cfg.LookupTimeout, 30*time.Second)
	def(&cfg.LookupBackoff, 10*time.Second)
	def(&cfg.MaxLookupBackoff, 15*time.Minute)
	def(&cfg.RecheckInterval, time.Minute)
	def(&cfg.UnknownRecheck, 10*time.Minute)
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = 100
	}
	if cfg.BatchSize > opledger.MaxListLimit {
		// ReconcileQueue would refuse every pass's batch.
		return nil, fmt.Errorf("reconciler: %w: BatchSize is %d: it must be at most %d (opledger.MaxListLimit)",
			opledger.ErrInvalidInput, cfg.BatchSize, opledger.MaxListLimit)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 4
	}
	if cfg.MaxLookupFailures <= 0 {
		cfg.MaxLookupFailures = 8
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Tenant != "" {
		if err := opledger.ValidateKey(cfg.Tenant); err != nil {
			return nil, fmt.Errorf("reconciler: tenant: %w", err)
		}
	}
	return &Reconciler{ledger: l, dests: cfg.Destinations, cfg: cfg, log: cfg.Logger.With("component", "reconciler"),
		abandoned: map[abandonedKey]struct{}{}, leaseMargin: lookupLeaseMargin}, nil
}

// Decision is what one examination of an uncertain operation led to.
type Decision string

// The decisions.
const (
	// Succeeded: a lookup found the intended record. The operation
	// succeeded; or, when a retry was claimed while the lookup ran, the
	// record is kept for it, and it ends the operation succeeded
	// without sending.
	Succeeded Decision = "succeeded"
	// Held: a person must decide (other content, no means of deciding,
	// retention passed, lookups kept failing).
	Held Decision = "held"
	// Retry: the operation is pending again, protected or after proven
	// absence.
	Retry Decision = "retry"
	// Failed: a lookup proved absence, but the destination's retry
	// policy allows no further attempt (attempt limit or deadline): the
	// operation failed, exhausted, and nothing is sent again.
	Failed Decision = "failed"
	// Wait: still uncertain; looked at again later (visibility delay,
	// failed lookup, unknown destination).
	Wait Decision = "wait"
	// Skipped: someone else decided meanwhile. A record the lookup
	// found then is noted on the operation's timeline (Ledger.Reconcile
	// says it did not decide), and logged as noted, not reconciled.
	Skipped Decision = "skipped"
)

// Pass summarizes one pass over the queue.
type Pass struct {
	// Examined counts the operations taken from the queue.
	Examined int
	// Decisions counts what they led to.
	Decisions map[Decision]int
	// Errors counts operations that could not be examined (the store
	// failed). They are examined again on a later pass: at once if the
	// store failed before the lookup was claimed, otherwise once the
	// claim's lease (the lookup's timeout plus 30 s) has passed.
	Errors int
	// LookupsAbandoned counts the lookups of this pass that had not
	// returned LookupGrace after their timeout: each counted as a failed
	// lookup, and its goroutine is left running
	// (Reconciler.AbandonedLookups says how many still run).
	LookupsAbandoned int
}

// Run reconciles until ctx ends, pausing Interval between passes (none
// when a pass found a full batch). It returns nil when ctx ends, once the
// lookups in flight have returned (they are given ctx's end), or
// LookupGrace later for one that does not heed it (abandoned).
//
// A pass that fails is logged at ERROR ("reconcile pass"), but one the
// store could not take (opledger.ErrStoreUnavailable, ErrStoreBusy,
// ErrStoreFull) is logged as every loop of the process logs a store
// outage (periodic.Outage): at WARN at the first and as their count
// doubles, at DEBUG between, and once at INFO ("reconcile pass: store
// reachable again") at the first pass after them. An operation of a pass
// (RunOnce) that fails is logged by the same rules as "reconcile", its
// store failures counted apart, across passes: an outage that starts
// mid-pass, or a store that reads the queue but takes no write, says so
// in a few lines ("reconcile: store reachable again" at its end) rather
// than an ERROR per operation of every batch.
func (r *Reconciler) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var outage periodic.Outage
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		pass, err := r.RunOnce(ctx)
		if ctx.Err() != nil {
			return nil
		}
		outage.Log(r.log, "reconcile pass", err, false)
		if err == nil && pass.Errors == 0 && pass.Examined == r.cfg.BatchSize {
			timer.Reset(0) // more are waiting
			continue
		}
		timer.Reset(r.cfg.Interval)
	}
}

// RunOnce examines the uncertain operations that are due, at most
// BatchSize, and returns what became of them. A queue the store has not
// read within 30 s fails the pass with an error matching
// opledger.ErrStoreBusy and context.DeadlineExceeded.
func (r *Reconciler) RunOnce(ctx context.Context) (Pass, error) {
	pass := Pass{Decisions: map[Decision]int{}}
	// Only the destinations this reconciler knows: another process (an
	// opledger proxy, a serve with other destinations) may share the store.
	queue := opledger.ReconcileQueueOptions{Limit: r.cfg.BatchSize, Destinations: r.cfg.Destinations.Names(), AllTenants: true}
	l := r.ledger
	if r.cfg.Tenant != "" {
		var err error
		if l, err = l.WithTenant(r.cfg.Tenant); err != nil {
			return pass, err
		}
		queue.AllTenants = false
	}
	// The read is bounded as an examination's writes are (leaseMargin):
	// one that hangs (a LOCK TABLE held elsewhere while the DSN sets no
	// lock_timeout) would hold Run for as long as it hangs. Cut there,
	// it is a store_busy failure, which Run logs by the outage rule.
	qctx, cancel := context.WithTimeout(ctx, r.leaseMargin)
	ops, err := l.ReconcileQueue(qctx, queue)
	err = periodic.Cut(ctx, qctx, r.leaseMargin.String(), err)
	cancel()
	if err != nil {
		return pass, fmt.Errorf("read reconcile queue: %w", err)
	}
	pass.Examined = len(ops)
	work := make(chan *opledger.Operation)
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range min(r.cfg.Concurrency, len(ops)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for op := range work {
				abandoned := false
				d, err := r.reconcile(ctx, op, &abandoned)
				mu.Lock()
				if abandoned {
					pass.LookupsAbandoned++
				}
				if err != nil {
					pass.Errors++
				} else {
					pass.Decisions[d]++
				}
				mu.Unlock()
				r.logOperation(ctx, op, err)
			}
		}()
	}
	for _, op := range ops {
		work <- op
	}
	close(work)
	wg.Wait()
	return pass, nil
}

// logOperation logs the outcome, err, of one operation of a pass by the
// outage rule (periodic.Outage), its count kept across passes: an
// operation the store could not take (unavailable, busy, full) at WARN
// at the first and as their count doubles, at DEBUG between, and once at
// INFO ("reconcile: store reachable again") at the next operation it
// takes; any other error at ERROR, every time. An outage that starts
// mid-pass, or a store that reads the queue but takes no write (a full
// disk), is thus said in a few lines rather than an ERROR per operation
// of every batch. Nothing is logged once ctx has ended.
func (r *Reconciler) logOperation(ctx context.Context, op *opledger.Operation, err error) {
	log := r.log
	if err != nil {
		log = log.With("tenant", op.Tenant, "destination", op.Destination)
		err = redact.Keys(op.Key, err)
	}
	r.outageMu.Lock()
	defer r.outageMu.Unlock()
	r.outage.Log(log, "reconcile", err, ctx.Err() != nil)
}

// lookupLeaseMargin is how much longer than its lookup's timeout an operation
// is taken for a lookup (ClaimLookup): the time to record what it found.
// It bounds the store calls of an examination without a lookup too.
const lookupLeaseMargin = 30 * time.Second

// maxEvidence bounds the evidence a lookup adds to the timeline.
const maxEvidence = 1000

// Reconcile examines one uncertain operation (as returned by
// Ledger.ReconcileQueue) and records the decision in the ledger. With
// Config.Tenant it refuses another tenant's operation; it refuses a nil
// op. A lookup that panics counts as a failed lookup (logged at ERROR
// with its stack): backoff, then held; never a resend. So does a lookup
// that has not returned LookupGrace after its timeout, which is
// abandoned (logged once at WARN, counted by AbandonedLookups while it
// runs), and, while an abandoned lookup of op still runs, the check of op
// that finds it so: no second lookup of op is started meanwhile.
//
// The store calls of a lookup (taking op for it, Ledger.ClaimLookup, and
// recording what it found) are bounded by the lookup's lease, its
// timeout plus 30 s, and those of an examination without a lookup (a
// decision, a deferral) by 30 s: one the store has not answered by then
// fails with an error matching opledger.ErrStoreBusy and
// context.DeadlineExceeded, and leaves op uncertain, to be examined
// again (once the lease has passed, if it was taken for a lookup).
// Recording the next step of a workflow whose step op settled is
// bounded alike, afresh; one given up is logged at WARN ("advance
// workflow"), and the workflow sweep records the step later.
func (r *Reconciler) Reconcile(ctx context.Context, op *opledger.Operation) (Decision, error) {
	var abandoned bool
	return r.reconcile(ctx, op, &abandoned)
}

// reconcile is Reconcile; it sets *abandonedHere when it abandoned op's
// lookup.
func (r *Reconciler) reconcile(ctx context.Context, op *opledger.Operation, abandonedHere *bool) (_ Decision, err error) {
	if op == nil {
		return "", errors.New("reconciler: no operation to reconcile: Reconcile was given nil")
	}
	if r.cfg.Tenant != "" && op.Tenant != r.cfg.Tenant {
		return "", fmt.Errorf("reconciler: operation of tenant %s; this reconciler looks up for tenant %s only", op.Tenant, r.cfg.Tenant)
	}
	tl, err := r.ledger.WithTenant(op.Tenant)
	if err != nil {
		return "", err
	}
	log := r.log.With("tenant", op.Tenant, "destination", op.Destination)
	dest, ok := r.dests.Get(op.Destination)
	served := ok && destination.Serves(dest, op.Tenant)
	var caps destination.Capabilities
	if served {
		caps = dest.Capabilities()
	}
	timeout := r.cfg.LookupTimeout
	if td, ok := dest.(destination.Timed); ok && td.Timeout() > timeout {
		timeout = td.Timeout()
	}
	// Every store call of op's turn but the lookup (which has its own
	// timeout) is made with sctx, bounded, from before the first of them,
	// by the lookup's lease (timeout + leaseMargin) when op is looked up,
	// and otherwise by leaseMargin, the time that lease gives to record
	// what a lookup found: one that hangs (a row or table lock another
	// session holds while the DSN sets no lock_timeout, a SQLite busy
	// timeout longer than a writer outside opledger holds the file) would
	// hold the pass for as long as it hangs. The lookup's claim, and the
	// reads and writes after it (the finding, a deferral, a hold), are
	// bounded by the claim's own lease, counted no later than its start:
	// a finding recorded after it could meet another process's lookup of
	// op, taken once the lease ran out. The reconcile interval would be
	// no bound: it may be shorter than a busy store's answer (a proxy's
	// is any positive duration), and giving up then would call a store
	// busy that is only slow. A call cut at its bound counts as
	// ErrStoreBusy (periodic.Cut; logged by the outage rule: logOperation),
	// as the executor's claim cut at its lease does, and leaves op as it
	// was: uncertain, taken until the lease ends (if the claim landed),
	// then examined again.
	lease := timeout + r.leaseMargin
	bound, boundName := r.leaseMargin, r.leaseMargin.String()
	if caps.Lookup != nil {
		bound, boundName = lease, fmt.Sprintf("the lookup's lease (%s)", lease)
	}
	sctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	defer func() { err = periodic.Cut(ctx, sctx, boundName, err) }()
	if !ok {
		return r.wait(sctx, tl, op, r.cfg.UnknownRecheck,
			"destination "+op.Destination+" is not configured in this reconciler; it declares nothing here")
	}
	if !served {
		return r.wait(sctx, tl, op, r.cfg.UnknownRecheck,
			"destination "+op.Destination+" does not serve tenant "+op.Tenant+" in this reconciler; nothing was looked up")
	}
	// The finding is about the attempts op has: if another is made while
	// the lookup runs, the ledger refuses it (ErrStaleFinding).
	f := opledger.Finding{AttemptCount: op.AttemptCount}
	if k := caps.IdempotencyKey; k != nil {
		f.ProtectionRetention = k.Retention
	}

	if lk := caps.Lookup; lk != nil {
		// One lookup at a time across the processes sharing the store:
		// each would count its failure against the operation's limit.
		// The lease outlasts the lookup; its finding or deferral sets the
		// next check.
		taken, err := tl.ClaimLookup(sctx, op, lease)
		if err != nil {
			return "", fmt.Errorf("claim the lookup: %w", err)
		}
		if !taken {
			log.Debug("lookup left to another process, or the operation changed")
			return Skipped, nil
		}
		running := abandonedKey{op.Tenant, op.Key}
		if r.stillRunning(running) {
			return r.lookupFailed(sctx, tl, op, fmt.Errorf("the lookup abandoned at an earlier check, after its timeout of %s, is still running: no other lookup was started", timeout))
		}
		attempts, err := tl.Attempts(sctx, op.Key)
		if err != nil {
			return "", fmt.Errorf("read attempts: %w", err)
		}
		// A destination that refused a create as a duplicate, in any
		// attempt's answer (a late one too, which never became the last
		// error), said the record exists: a lookup that cannot see it
		// proves nothing.
		exists := strings.Contains(op.LastError, destination.ErrExists.Error())
		for _, a := range attempts {
			exists = exists || strings.Contains(a.Error, destination.ErrExists.Error())
		}
		// An attempt that reported a reference without a success said the
		// destination made a record: the lookup is given the reference to
		// fetch it by, and finding nothing proves no absence.
		refs := reportedRefs(attempts)
		// Absence is judged by when the lookup began, not when it ended:
		// a slow lookup begun within the visibility delay proves nothing.
		if f.LookedAt, err = tl.Now(sctx); err != nil {
			return "", err
		}
		res, abandoned, err := r.lookUp(ctx, log, running, timeout, func(lctx context.Context) (res destination.LookupResult, err error) {
			// A panicking lookup is a failed one: it must not take the
			// reconciler down, nor decide anything.
			defer func() {
				if v := recover(); v != nil {
					// Masked and redacted whole, then cut: a value or key
					// across the cut would be kept in part, unmasked.
					text := textcut.Valid(redact.Keys(op.Key, errors.New(op.MaskText(fmt.Sprint(v)))).Error())
					why := errors.New("lookup panicked: " + textcut.Prefix(text, 200))
					log.Error("lookup panicked", "error", why, "stack", string(debug.Stack()))
					res, err = destination.LookupResult{}, why
				}
			}()
			return dest.(destination.Lookuper).Lookup(lctx, op, refs)
		})
		if abandoned {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			*abandonedHere = true
			return r.lookupFailed(sctx, tl, op, err)
		}
		if err == nil && res.Found && res.Matches && strings.TrimSpace(res.Ref) == "" {
			err = errors.New("the lookup matched a record without a reference")
		}
		if err == nil && res.Found && res.Ref != "" {
			if cerr := opledger.CheckDestinationRef(res.Ref); cerr != nil {
				// Reconcile would refuse the finding as invalid input, and
				// looking again finds the same record: held at once.
				err = fmt.Errorf("%w (%s)", errUnstorableRef, opledger.InvalidInputDetail(cerr))
			}
		}
		if err != nil {
			if ctx.Err() != nil {
				return "", ctx.Err()
			}
			return r.lookupFailed(sctx, tl, op, err)
		}
		f.Found, f.Matches, f.DestinationRef, f.Evidence = res.Found, res.Matches, res.Ref, res.Evidence
		if !res.Found {
			f.Authoritative = lk.Authoritative && !exists && len(refs) == 0
			f.VisibilityDelay = lk.VisibilityDelay
			if exists {
				f.Evidence = join(f.Evidence, "the destination had answered that the record exists, so its absence proves nothing")
			}
			if len(refs) > 0 {
				f.Evidence = join(f.Evidence, fmt.Sprintf("an attempt had reported reference %s without a success, so the record's absence proves nothing", quoteRefs(refs)))
			}
			if visible := visibleAt(attempts, op, lk.VisibilityDelay); f.LookedAt.Before(visible) {
				// Begun within the delay: nothing proven. Looked up again
				// when the delay ends (at once if it ended while this
				// lookup ran), or at the next recheck if that is sooner.
				now, err := tl.Now(sctx)
				if err != nil {
					return "", err
				}
				return r.wait(sctx, tl, op, min(max(visible.Sub(now), 0), r.cfg.RecheckInterval), join(f.Evidence,
					fmt.Sprintf("nothing found, but a record may stay invisible for %s after the last call ended", lk.VisibilityDelay)))
			}
		}
	} else if f.ProtectionRetention <= 0 {
		f.Evidence = "destination " + op.Destination + " declares no lookup and no idempotency key"
	}

	if len(f.Evidence) > maxEvidence {
		// Masked before it is cut, as the ledger would mask it after: a
		// sensitive value across the cut would be kept in part.
		f.Evidence = textcut.Prefix(op.MaskText(f.Evidence), maxEvidence)
	}
	after, decided, err := tl.Reconcile(sctx, op.Key, f)
	switch {
	case errors.Is(err, opledger.ErrInvalidState), errors.Is(err, opledger.ErrStaleFinding):
		// Decided or tried again meanwhile: the next pass looks anew.
		return Skipped, nil
	case errors.Is(err, opledger.ErrInvalidInput):
		return r.lookupFailed(sctx, tl, op, err)
	case err != nil:
		return "", fmt.Errorf("reconcile: %w", err)
	case !decided && after.State != opledger.StateUncertain:
		// Someone else decided it while the lookup ran (a person, a late
		// report): the record found is on its timeline, but the decision
		// is not this reconciler's.
		log.Info("lookup's finding noted; the operation was decided meanwhile", "state", after.State, "capabilities", caps.String())
		return Skipped, nil
	}
	var d Decision
	switch after.State {
	case opledger.StateSucceeded:
		d = Succeeded
		// The next step of a workflow, if this is one, now rather than
		// at the server's next sweep (which still advances it if this
		// fails). Bounded as the turn's other store calls are, afresh
		// (the operation is decided: the lease no longer matters), as
		// the executor bounds its advance by a lease: one that hangs (a
		// lock on the workflows table held elsewhere) is given up and
		// logged at WARN rather than hold the pass.
		actx, cancelAdvance := context.WithTimeout(ctx, bound)
		advance.WorkflowOf(actx, tl, op.Key, log)
		cancelAdvance()
	case opledger.StateHeld:
		d = Held
	case opledger.StatePending:
		d = Retry
	case opledger.StateFailed:
		d = Failed
	case opledger.StateInProgress:
		// The record found is kept for the retry that holds the operation
		// (Ledger.Reconcile decided): that retry is not sent, and ends
		// the operation succeeded with the record.
		d = Succeeded
	case opledger.StateUncertain:
		// The ledger's own visibility check kept it uncertain (an attempt's
		// call ended later than the attempts read here said), and set the
		// next check to when absence counts. That time is kept unless a
		// recheck is due sooner, as for the reconciler's own check above.
		now, err := tl.Now(sctx)
		if err != nil {
			return "", err
		}
		if after.NotBefore != nil && after.NotBefore.Sub(now) <= r.cfg.RecheckInterval {
			log.Debug("reconcile deferred until the visibility delay ends")
			return Wait, nil
		}
		// The recheck is sooner. The ledger's "lookup empty within
		// visibility delay" is this check's timeline entry: the next
		// check is moved to the recheck as a lookup is taken
		// (ClaimLookup, if the operation is still as the ledger left
		// it), which writes none, not with DeferReconcile's second one.
		taken, err := tl.ClaimLookup(sctx, after, r.cfg.RecheckInterval)
		if err != nil {
			return "", fmt.Errorf("schedule the recheck: %w", err)
		}
		if !taken {
			return Skipped, nil // changed meanwhile: the next pass looks anew
		}
		log.Debug("reconcile deferred until the next recheck, within the visibility delay", "delay", r.cfg.RecheckInterval)
		return Wait, nil
	default:
		d = Skipped
	}
	log.Info("reconciled", "decision", d, "state", after.State, "protected", after.Protected, "capabilities", caps.String())
	return d, nil
}

// reportedRefs returns the references the attempts reported without a
// success, newest attempt first, each once. A rejected attempt's is left
// out: a refusal says nothing was made, and a destination may put a
// request's id there.
func reportedRefs(attempts []*opledger.Attempt) []string {
	var refs []string
	for i := len(attempts) - 1; i >= 0; i-- {
		a := attempts[i]
		if a.DestinationRef == "" || a.Outcome == string(opledger.OutcomeRejected) || slices.Contains(refs, a.DestinationRef) {
			continue
		}
		refs = append(refs, a.DestinationRef)
	}
	return refs
}

// quoteRefs names refs for the timeline: the newest, and how many more.
func quoteRefs(refs []string) string {
	s := strconv.Quote(refs[0])
	if len(refs) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(refs)-1)
	}
	return s
}

// visibleAt returns when the visibility delay ends, counted from the end
// of the latest call (opledger.LastCallEnd): a later attempt may have
// created the record just now, however long ago the first one was, and a
// destination may finish a request after its caller gave up waiting. A
// lookup begun before then proves no absence, and the next one is worth
// making then (as the ledger schedules it: Ledger.Reconcile). Zero
// without a delay.
func visibleAt(attempts []*opledger.Attempt, op *opledger.Operation, delay time.Duration) time.Time {
	if delay <= 0 {
		return time.Time{}
	}
	return opledger.LastCallEnd(op, attempts).Add(delay)
}

// errUnstorableRef: a lookup found the record, but with a reference the
// ledger cannot store (opledger.CheckDestinationRef). Every lookup would
// find the same, so the operation is held at once.
var errUnstorableRef = errors.New("the lookup found the record, but its reference is not one the ledger can store")

// lookupFailed backs off after a failed lookup, or holds the operation
// once lookups have failed MaxLookupFailures times since it became
// uncertain (at once for a lookup that cannot be made for it, or a
// reference the ledger cannot store).
func (r *Reconciler) lookupFailed(ctx context.Context, tl *opledger.Ledger, op *opledger.Operation, lookupErr error) (Decision, error) {
	text := opledger.ErrorText(lookupErr)
	if len(text) > 300 {
		// Masked first, as for the evidence (Reconcile's).
		text = textcut.Prefix(op.MaskText(text), 300)
	}
	// Counted from the entries since the operation became uncertain,
	// not its whole timeline.
	failures, err := tl.LookupFailures(ctx, op.Key)
	if err != nil {
		return "", fmt.Errorf("count failed lookups: %w", err)
	}
	failures++
	// A lookup that cannot be made for this operation (its content does
	// not fill the lookup's request) fails the same way every time: hold
	// it now, not after MaxLookupFailures backed-off tries.
	impossible := errors.Is(lookupErr, destination.ErrNoLookup) || errors.Is(lookupErr, errUnstorableRef)
	if impossible || failures >= r.cfg.MaxLookupFailures {
		reason := fmt.Sprintf("%d lookups failed since the operation became uncertain; nothing was resent; last error: %s", failures, text)
		if impossible {
			reason = text + "; nothing was resent"
		}
		_, err := tl.Hold(ctx, op.Key, reason)
		if errors.Is(err, opledger.ErrInvalidState) {
			return Skipped, nil
		}
		if err != nil {
			return "", fmt.Errorf("hold: %w", err)
		}
		if impossible {
			r.log.Warn("held: no lookup can settle the operation", "tenant", op.Tenant, "destination", op.Destination)
		} else {
			r.log.Warn("held after failed lookups", "tenant", op.Tenant, "destination", op.Destination, "failures", failures)
		}
		return Held, nil
	}
	delay := r.cfg.LookupBackoff
	for i := 1; i < failures && delay < r.cfg.MaxLookupBackoff; i++ {
		delay *= 2
	}
	delay = min(delay, r.cfg.MaxLookupBackoff)
	why := fmt.Sprintf("%s%s (failure %d of %d)", marker.LookupFailed, text, failures, r.cfg.MaxLookupFailures)
	// A destination that asked to wait (a throttled lookup's Retry-After)
	// is not looked up again before then, whatever the backoff says.
	if o, after := opledger.OutcomeOf(lookupErr); o == opledger.OutcomeRetryable && after > delay {
		why += fmt.Sprintf("; the destination asked to wait %s", after)
		if after > MaxLookupWait {
			// Weeks unexamined would leave the operation unresolved and
			// quiet: look again, and count the failure, after a day.
			after = MaxLookupWait
			why += fmt.Sprintf(", waiting %s", after)
		}
		delay = after
	}
	return r.wait(ctx, tl, op, delay, why)
}

// lookUp runs lookup with a context that ends after timeout, or with ctx,
// and waits for it LookupGrace longer at most. A lookup that has not
// returned by then is abandoned: abandoned is true, err says it timed
// out, and until it returns the operation named by running is counted by
// AbandonedLookups and stillRunning reports it. It is logged once, at
// WARN, without the operation's key.
func (r *Reconciler) lookUp(ctx context.Context, log *slog.Logger, running abandonedKey, timeout time.Duration,
	lookup func(context.Context) (destination.LookupResult, error)) (res destination.LookupResult, abandoned bool, err error) {
	lctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		res destination.LookupResult
		err error
	}
	// Run apart, so that a lookup that does not heed its context's end
	// holds up its own operation only, and only until its grace ends.
	answered := make(chan answer, 1)
	var finished, left bool // under r.mu
	go func() {
		var a answer
		a.res, a.err = lookup(lctx)
		r.mu.Lock()
		finished = true
		if left {
			delete(r.abandoned, running)
		}
		r.mu.Unlock()
		answered <- a
	}()
	grace := time.NewTimer(timeout + LookupGrace)
	defer grace.Stop()
	select {
	case a := <-answered:
		return a.res, false, a.err
	case <-grace.C:
	case <-ctx.Done():
		// Stopping: a lookup that heeds its context's end returns now;
		// it is waited for, LookupGrace at most, as it would be after
		// its timeout.
		stop := time.NewTimer(LookupGrace)
		defer stop.Stop()
		select {
		case a := <-answered:
			return a.res, false, a.err
		case <-stop.C:
		case <-grace.C:
		}
	}
	r.mu.Lock()
	if finished {
		// It returned after all, just now.
		r.mu.Unlock()
		a := <-answered
		return a.res, false, a.err
	}
	left = true
	r.abandoned[running] = struct{}{}
	r.mu.Unlock()
	if ctx.Err() == nil {
		log.Warn("lookup abandoned: it did not return within its timeout and grace; it is left running, and counted as a failed lookup",
			"timeout", timeout, "grace", LookupGrace)
	}
	return destination.LookupResult{}, true, fmt.Errorf("the lookup did not return within its timeout of %s and %s of grace (it ignored its context's end): abandoned, nothing was decided from it", timeout, LookupGrace)
}

// stillRunning reports whether a lookup of the operation named by running,
// abandoned earlier (lookUp), has not returned yet.
func (r *Reconciler) stillRunning(running abandonedKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.abandoned[running]
	return ok
}

// MaxLookupWait bounds the wait a throttled lookup's Retry-After asks
// for: a longer one is taken as a day, and the lookup, made again then,
// counts towards MaxLookupFailures if it is throttled again.
const MaxLookupWait = 24 * time.Hour

// wait keeps the operation uncertain and schedules its next examination.
func (r *Reconciler) wait(ctx context.Context, tl *opledger.Ledger, op *opledger.Operation, delay time.Duration, evidence string) (Decision, error) {
	_, err := tl.DeferReconcile(ctx, op.Key, delay, evidence)
	if errors.Is(err, opledger.ErrInvalidState) {
		return Skipped, nil
	}
	if err != nil {
		return "", fmt.Errorf("defer reconcile: %w", err)
	}
	r.log.Debug("reconcile deferred", "tenant", op.Tenant, "destination", op.Destination, "delay", delay)
	return Wait, nil
}

func join(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	return a + "; " + b
}
