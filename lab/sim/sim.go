package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/reconciler"
)

// Config configures one run. Zero values take the documented defaults.
type Config struct {
	// Seed chooses the schedule: one seed, one exact run.
	Seed int64
	// Workers is the number of simulated workers. Default 3.
	Workers int
	// Operations is the number of operations, each produced by one
	// webhook event. Default 20.
	Operations int
	// Steps is the length of the fault phase. Default 12 per operation.
	Steps int
	// FaultRate is the probability that a call gets a fault. Default 0.3.
	FaultRate float64
	// CrashRate is the probability that an attempt's worker crashes at
	// one of the crash points. Default 0.1.
	CrashRate float64
	// DuplicateRate is the probability that an event is delivered twice
	// (or more). Default 0.2.
	DuplicateRate float64
	// DSN is the store: empty for a fresh SQLite file in Dir (removed
	// afterwards). A PostgreSQL DSN must name an empty database or schema.
	DSN string
	// Dir is where the SQLite file is made. Default a new temporary
	// directory.
	Dir string
	// KeepTrace keeps the event trace in Report.Trace (the digest is
	// always computed).
	KeepTrace bool
}

// Simulated durations.
const (
	// Lease of every claim.
	Lease = 30 * time.Second
	// VisibilityDelay of the CRM's lookups.
	VisibilityDelay = 20 * time.Second
	// PaymentRetention is the payment's idempotency key retention: short,
	// so that clock jumps cross it.
	PaymentRetention = 10 * time.Minute
	// maxDrainRounds bounds the drain phase (one simulated minute each).
	maxDrainRounds = 300
)

// testHookBeforeCheck, set by tests only, tampers with a finished run to
// show that the invariants catch it.
var testHookBeforeCheck func(ctx context.Context, w *world)

// epoch is the simulated clock's start.
var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// world is one run in progress.
type world struct {
	cfg    Config
	rng    *rand.Rand
	now    time.Time
	ledger *opledger.Ledger
	recon  *reconciler.Reconciler
	dests  map[string]simDest
	names  []string
	source *lab.WebhookSource

	workers []*worker
	hash    digest
	report  *Report
	// keys are the operation keys the events should produce, with their
	// destination.
	keys map[string]string
	// order lists keys in event order.
	order []string
	// callAt is when each attempt's call reached its destination.
	callAt map[string]time.Time
	// totals are the figures of the last checkTotals.
	totals map[string]int
	// faulting: the fault phase is running, so the CRM's lookups may fail
	// (lookupCRM); the drain injects nothing.
	faulting bool
	// failedLookups are the keys whose lookup failed in the reconciler's
	// pass running, for checkFailedLookups.
	failedLookups []string
}

// simDest is what the simulation needs of a lab destination.
type simDest interface {
	destination.Destination
	Inject(...lab.Fault) error
	Counters() lab.Counters
	EffectsFor(key string) int
	RefsFor(key string) []string
}

func withDefaults(c Config) Config {
	if c.Workers <= 0 {
		c.Workers = 3
	}
	if c.Operations <= 0 {
		c.Operations = 20
	}
	if c.Steps <= 0 {
		c.Steps = 12 * c.Operations
	}
	if c.FaultRate == 0 {
		c.FaultRate = 0.3
	}
	if c.CrashRate == 0 {
		c.CrashRate = 0.1
	}
	if c.DuplicateRate == 0 {
		c.DuplicateRate = 0.2
	}
	return c
}

// Run runs one simulation and checks its invariants. The error is about
// the run itself (the store failed, a ledger call failed unexpectedly);
// invariant violations are in Report.Violations.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = withDefaults(cfg)
	w := &world{cfg: cfg, now: epoch, keys: map[string]string{}, callAt: map[string]time.Time{},
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x6f706c6564676572))}
	w.report = newReport(cfg)
	w.hash = newDigest()

	dsn := cfg.DSN
	if dsn == "" {
		dir := cfg.Dir
		if dir == "" {
			d, err := os.MkdirTemp("", "opledger-sim-")
			if err != nil {
				return nil, fmt.Errorf("sim: make a directory: %w", err)
			}
			defer os.RemoveAll(d)
			dir = d
		}
		dsn = "sqlite:" + filepath.Join(dir, fmt.Sprintf("sim-%d.db", cfg.Seed))
	}
	policy := opledger.RetryPolicy{MaxAttempts: 5, Deadline: 24 * time.Hour}
	l, err := opledger.Open(ctx, dsn, opledger.Options{
		Worker: "sim", Lease: Lease, RetryPolicy: &policy,
		Clock: func(time.Time) time.Time { return w.now },
		// The simulation is about decisions, not power cuts.
		SQLiteSynchronousNormal: true,
	})
	if err != nil {
		return nil, fmt.Errorf("sim: open the ledger: %w", err)
	}
	defer l.Close()
	w.ledger = l
	w.report.Store = l.StoreName()

	now := func() time.Time { return w.now }
	crm := lab.NewCRM(lab.CRMOptions{Now: now, VisibilityDelay: VisibilityDelay})
	email := lab.NewEmail(lab.EmailOptions{Now: now})
	pay := lab.NewPayment(lab.PaymentOptions{Now: now, Retention: PaymentRetention})
	w.dests = map[string]simDest{"crm": crm, "email": email, "payment": pay}
	w.names = []string{"crm", "email", "payment"}
	// The reconciler looks the CRM up through lookupCRM, which may fail
	// the lookup; the workers call the CRM itself.
	set, err := destination.NewSet(lookupCRM{CRM: crm, w: w}, email, pay)
	if err != nil {
		return nil, err
	}
	w.recon, err = reconciler.New(l, reconciler.Config{Destinations: set, Concurrency: 1,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	if err := w.setupEvents(); err != nil {
		return nil, err
	}
	for i := range cfg.Workers {
		w.workers = append(w.workers, &worker{name: fmt.Sprintf("w%d", i+1)})
	}

	if err := w.faultPhase(ctx); err != nil {
		return nil, w.fail(err)
	}
	if err := w.drain(ctx); err != nil {
		return nil, w.fail(err)
	}
	if testHookBeforeCheck != nil {
		testHookBeforeCheck(ctx, w)
	}
	if err := w.check(ctx); err != nil {
		return nil, w.fail(err)
	}
	w.report.Digest = w.hash.sum()
	w.report.SimulatedTime = w.now.Sub(epoch)
	return w.report, nil
}

// fail adds the run's position to an error of the run itself.
func (w *world) fail(err error) error {
	return fmt.Errorf("sim seed %d at +%s: %w", w.cfg.Seed, w.now.Sub(epoch), err)
}

// setupEvents emits one webhook event per operation, some delivered more
// than once, in a shuffled order.
func (w *world) setupEvents() error {
	var rules []opledger.Rule
	for _, d := range w.names {
		rules = append(rules, opledger.Rule{Name: d, Source: "sim", Type: d + ".requested",
			Operations: []opledger.OperationRule{{Key: "sim:{data.n}:" + d, Action: d + ".create", Destination: d,
				Owner: "sim", Payload: map[string]any{"n": "{data.n}", "amount": "{data.amount}"}}}})
	}
	rs, err := opledger.NewRules(rules...)
	if err != nil {
		return err
	}
	// One source per destination type would do as well; one source with
	// three event types keeps the counters in one place.
	w.source = lab.NewWebhookSource(lab.WebhookOptions{Source: "sim", Rules: rs, Now: func() time.Time { return w.now }})
	for i := range w.cfg.Operations {
		d := w.names[w.rng.IntN(len(w.names))]
		id := fmt.Sprintf("ev%d", i)
		payload, _ := json.Marshal(map[string]any{"n": i, "amount": 100 + i})
		w.source.EmitType(id, d+".requested", payload)
		key := fmt.Sprintf("sim:%d:%s", i, d)
		w.keys[key] = d
		w.order = append(w.order, key)
		for w.rng.Float64() < w.cfg.DuplicateRate {
			if err := w.source.Duplicate(id); err != nil {
				return err
			}
		}
	}
	q := len(w.source.Queued())
	for i := q - 1; i > 0; i-- {
		if err := w.source.Reorder(i, w.rng.IntN(i+1)); err != nil {
			return err
		}
	}
	w.log("setup: %d events, %d deliveries queued", w.cfg.Operations, q)
	return nil
}

// log appends a line to the trace.
func (w *world) log(format string, args ...any) {
	line := fmt.Sprintf("+%s ", w.now.Sub(epoch)) + fmt.Sprintf(format, args...)
	w.hash.add(line)
	if w.cfg.KeepTrace {
		w.report.Trace = append(w.report.Trace, line)
	}
}

// clockJumps are the clock's possible moves in the fault phase: small
// steps, past a lease, past the CRM's visibility delay, past the payment
// key's retention.
var clockJumps = []time.Duration{time.Second, 5 * time.Second, 10 * time.Second, Lease + time.Second,
	VisibilityDelay, 2 * time.Minute, PaymentRetention + time.Second}

// faultPhase runs the random steps.
func (w *world) faultPhase(ctx context.Context) error {
	w.faulting = true
	defer func() { w.faulting = false }()
	for range w.cfg.Steps {
		r := w.rng.IntN(20)
		switch {
		case r < 3:
			if err := w.deliver(ctx); err != nil {
				return err
			}
		case r < 13:
			wk := w.workers[w.rng.IntN(len(w.workers))]
			if err := w.step(ctx, wk, true); err != nil {
				return err
			}
		case r < 15:
			if err := w.reconcile(ctx); err != nil {
				return err
			}
		case r < 16:
			if err := w.expire(ctx); err != nil {
				return err
			}
		default:
			// Big jumps are rare: they skip most of what is pending.
			i := w.rng.IntN(len(clockJumps))
			if i == len(clockJumps)-1 && w.rng.IntN(4) != 0 {
				i = 0
			}
			w.advance(clockJumps[i])
		}
		if err := w.checkTotals(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) advance(d time.Duration) {
	w.now = w.now.Add(d)
	w.log("clock +%s", d)
}

// deliver makes the next queued webhook delivery.
func (w *world) deliver(ctx context.Context) error {
	res, err := w.source.DeliverNext(ctx, w.ledger)
	if err != nil {
		return fmt.Errorf("deliver an event: %w", err)
	}
	if res == nil {
		return nil
	}
	keys := make([]string, len(res.Operations))
	for i, op := range res.Operations {
		keys[i] = op.Key
	}
	w.log("event %s delivered: duplicate=%t status=%s ops=%s", res.Event.EventID, res.Duplicate, res.Status, strings.Join(keys, ","))
	return nil
}

// reconcile runs one reconciler pass, then checks that no lookup that
// failed in it decided anything (checkFailedLookups).
func (w *world) reconcile(ctx context.Context) error {
	w.failedLookups = w.failedLookups[:0]
	pass, err := w.recon.RunOnce(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	if err := w.checkFailedLookups(ctx); err != nil {
		return err
	}
	if pass.Errors > 0 {
		return fmt.Errorf("reconcile: %d operations could not be examined", pass.Errors)
	}
	if pass.Examined > 0 {
		w.log("reconciler: examined %d: %s", pass.Examined, decisions(pass.Decisions))
	}
	return nil
}

func decisions(m map[reconciler.Decision]int) string {
	var parts []string
	for _, d := range []reconciler.Decision{reconciler.Succeeded, reconciler.Held, reconciler.Retry, reconciler.Failed, reconciler.Wait, reconciler.Skipped} {
		if m[d] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", d, m[d]))
		}
	}
	return strings.Join(parts, " ")
}

// expire runs the lease sweep.
func (w *world) expire(ctx context.Context) error {
	n, err := w.ledger.ExpireLeases(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		w.log("lease sweep: settled %d", n)
	}
	return nil
}

// drain injects nothing more and runs everything until nothing is due.
func (w *world) drain(ctx context.Context) error {
	w.log("drain")
	for _, wk := range w.workers {
		wk.crash = lab.CrashNone
	}
	for round := 0; ; round++ {
		for {
			res, err := w.source.DeliverNext(ctx, w.ledger)
			if err != nil {
				return fmt.Errorf("deliver an event: %w", err)
			}
			if res == nil {
				break
			}
			w.log("event %s delivered: duplicate=%t", res.Event.EventID, res.Duplicate)
		}
		if err := w.expire(ctx); err != nil {
			return err
		}
		if err := w.reconcile(ctx); err != nil {
			return err
		}
		// Every worker finishes what it holds, then takes what is due.
		for {
			busy := false
			for _, wk := range w.workers {
				if err := w.step(ctx, wk, false); err != nil {
					return err
				}
				busy = busy || wk.state != idle || wk.didWork
			}
			if !busy {
				break
			}
		}
		if err := w.checkTotals(ctx); err != nil {
			return err
		}
		counts, err := w.ledger.CountByState(ctx)
		if err != nil {
			return err
		}
		open := counts[opledger.StatePending] + counts[opledger.StateInProgress] + counts[opledger.StateUncertain]
		if open == 0 {
			w.report.DrainRounds = round
			return nil
		}
		if round >= maxDrainRounds {
			w.report.DrainRounds = round
			w.log("drain gave up with %d operations open", open)
			return nil // the unsettled invariant reports them
		}
		w.advance(time.Minute)
	}
}

// lookupCRM is the CRM as the reconciler sees it. In the fault phase a
// lookup gets lab.FaultLookupError at the fault rate, injected into the
// CRM just before the lookup that takes it, as a call's fault is just
// before its call: the CRM's lookup then answers 503 and searches
// nothing. Every failed lookup is noted for checkFailedLookups.
type lookupCRM struct {
	*lab.CRM
	w *world
}

// Lookup looks op up at the CRM, failing the lookup at the fault rate in
// the fault phase. The reconciler runs it on a goroutine of its own, but
// waits for it: the world is never used by two goroutines at once.
func (c lookupCRM) Lookup(ctx context.Context, op *opledger.Operation, refs []string) (destination.LookupResult, error) {
	w := c.w
	fault := lab.FaultNone
	if w.faulting && w.rng.Float64() < w.cfg.FaultRate {
		fault = lab.FaultLookupError
		if err := c.CRM.Inject(fault); err != nil {
			return destination.LookupResult{}, err
		}
		w.report.Faults[fault.String()]++
	}
	res, err := c.CRM.Lookup(ctx, op, refs)
	if err != nil {
		w.failedLookups = append(w.failedLookups, op.Key)
		w.report.FailedLookups++
		w.log("reconciler looked %s up: fault=%s failed: %v", op.Key, fault, err)
	} else {
		w.log("reconciler looked %s up: fault=%s found=%t matches=%t", op.Key, fault, res.Found, res.Matches)
	}
	return res, err
}

// digest hashes the trace line by line.
type digest struct{ h hash.Hash }

func newDigest() digest { return digest{h: sha256.New()} }

func (d digest) add(line string) {
	_, _ = d.h.Write([]byte(line))
	_, _ = d.h.Write([]byte{'\n'})
}

func (d digest) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }
