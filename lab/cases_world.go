package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/reconciler"
)

// The fictional order every scenario and case works on.
const (
	// OperationKey is the operation key of the order's preparation.
	OperationKey = "DEMO-OP-017"
	// OrderRef is the order.
	OrderRef = "DEMO-ORDER-017"
	// WorkflowKey is the key of the workflow cases' workflow; its steps
	// are DEMO-WF-017/part-1, part-2, ….
	WorkflowKey = "DEMO-WF-017"
	// DefaultUnits is the unit count of a send without units=N.
	DefaultUnits = 2
	// webhookSource names the webhook sender in "deliver event" steps.
	webhookSource = "lab-webhook"
)

// simDestination is what the runner needs of a simulated destination.
type simDestination interface {
	destination.Destination
	Inject(faults ...Fault) error
	Counters() Counters
	EffectsFor(key string) int
}

// StepOutcome is what one step did, in a sentence.
type StepOutcome struct {
	// Step is the step as written.
	Step string `json:"step"`
	// State is the operation's (or workflow's) state after the step.
	State string `json:"state"`
	// Ref is the destination reference once known.
	Ref string `json:"ref,omitempty"`
	// Explanation says what happened and why, in one sentence.
	Explanation string `json:"explanation"`
}

// world is one run of a case or of a scenario: a ledger scoped to its own
// tenant, one simulated destination, and the lab's clock and counters.
type world struct {
	dsn    string           // store to reopen on restart; empty when not ours
	opts   opledger.Options // how it was opened
	tenant string
	ledger *opledger.Ledger
	dest   simDestination
	rec    *reconciler.Reconciler

	// start and offset are the lab clock: start moved forward by offset
	// (nanoseconds), which only advance changes. It stands still between
	// steps, so that a case's result never depends on how long a step
	// took (a worker process's start, say).
	start    time.Time
	offset   *atomic.Int64
	attempts atomic.Int64
	webhook  *WebhookSource // created by the first "deliver event"
	workflow bool

	// spawn, when set, is the command of a worker process (RunWorker)
	// that crash steps run in and kill.
	spawn   []string
	destURL string   // the destination served over HTTP, for spawn
	closers []func() // run by close
}

// close releases what the world started besides the ledger.
func (w *world) close() {
	for _, c := range w.closers {
		c()
	}
	w.closers = nil
}

// now is the lab's clock.
func (w *world) now() time.Time { return w.start.Add(time.Duration(w.offset.Load())) }

// labStart is the time a lab clock starts at: now, to the second.
func labStart() time.Time { return time.Now().UTC().Truncate(time.Second) }

// newDestination builds the simulated destination of a kind.
func newDestination(kind DestinationKind, now func() time.Time) simDestination {
	switch kind {
	case DestEmail:
		return NewEmail(EmailOptions{Name: "lab-email", Now: now})
	case DestPayment:
		return NewPayment(PaymentOptions{Name: "lab-payment", Now: now, Retention: 24 * time.Hour})
	}
	return NewCRM(CRMOptions{Name: "lab-crm", Now: now})
}

// setDestination wires the destination and the reconciler that uses it.
func (w *world) setDestination(d simDestination) error {
	set, err := destination.NewSet(d)
	if err != nil {
		return err
	}
	rec, err := reconciler.New(w.ledger, reconciler.Config{Destinations: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	w.dest, w.rec = d, rec
	return nil
}

// intent is the order's preparation with units units.
func (w *world) intent(units int) opledger.Intent {
	if units == 0 {
		units = DefaultUnits
	}
	payload, _ := json.Marshal(map[string]any{"order": OrderRef, "units": units})
	return opledger.Intent{Key: OperationKey, Action: "order.prepare", Destination: w.dest.Name(), Payload: payload, Owner: "lab"}
}

// call is the Action of every attempt: the destination's Call.
func (w *world) call(ctx context.Context, c opledger.Call) (opledger.Result, error) {
	return w.dest.Call(ctx, c)
}

// tally reads the counters.
func (w *world) tally(ctx context.Context) (Tally, error) {
	c := w.dest.Counters()
	ev, err := w.ledger.EventStats(ctx, false)
	if err != nil {
		return Tally{}, err
	}
	return Tally{Attempts: int(w.attempts.Load()), Actions: c.Effects, Verifications: c.Lookups,
		Events: ev.Events, Deliveries: ev.Deliveries}, nil
}

// state is the final state of the operation, or of the workflow.
func (w *world) state(ctx context.Context) (string, string, error) {
	if w.workflow {
		wf, err := w.ledger.GetWorkflow(ctx, WorkflowKey)
		if err != nil {
			return "", "", err
		}
		return string(wf.Status), "", nil
	}
	op, err := w.ledger.Get(ctx, OperationKey)
	if errors.Is(err, opledger.ErrNotFound) {
		return StateNone, "", nil
	}
	if err != nil {
		return "", "", err
	}
	return stateName(op), op.DestinationRef, nil
}

func stateName(op *opledger.Operation) string {
	if op.State == opledger.StateFailed && op.FailureKind != "" {
		return string(op.State) + "/" + string(op.FailureKind)
	}
	return string(op.State)
}

// play runs one step and says what it did.
func (w *world) play(ctx context.Context, st Step) (StepOutcome, error) {
	var (
		msg string
		err error
	)
	switch st.Verb {
	case StepSend, StepRetry:
		msg, err = w.send(ctx, st.Units)
	case StepVerify:
		msg, err = w.verify(ctx)
	case StepCrash:
		msg, err = w.crash(ctx, st.Point)
	case StepRestart:
		msg, err = w.restart(ctx)
	case StepAdvance:
		msg, err = w.advance(ctx, st.Duration)
	case StepWorkers:
		msg, err = w.workers(ctx, st.N)
	case StepDeliver:
		msg, err = w.deliver(ctx, st.Event)
	case StepWorkflow:
		msg, err = w.putWorkflow(ctx, st.N, st.Approval)
	case StepRun:
		msg, err = w.run(ctx, st.N)
	case StepApprove:
		msg, err = w.approve(ctx)
	case StepRevise:
		msg, err = w.revise(ctx, st.Units)
	case StepResume:
		msg, err = w.resume(ctx)
	default:
		err = fmt.Errorf("unknown step %q", st.Verb)
	}
	if err != nil {
		return StepOutcome{}, fmt.Errorf("step %q: %w", st.Text, err)
	}
	state, ref, err := w.state(ctx)
	if err != nil {
		return StepOutcome{}, fmt.Errorf("after step %q: read state: %w", st.Text, err)
	}
	return StepOutcome{Step: st.Text, State: state, Ref: ref, Explanation: msg}, nil
}

// send is one request of the automation to carry out the operation.
func (w *world) send(ctx context.Context, units int) (string, error) {
	w.attempts.Add(1)
	before := w.dest.Counters()
	op, err := w.ledger.Do(ctx, w.intent(units), w.call)
	after := w.dest.Counters()
	return w.explainDo(op, err, after.Attempts-before.Attempts, after.Effects-before.Effects, units)
}

// explainDo turns what Do returned into a sentence, given how many calls
// reached the destination and how many effects it made; errors that are
// not the ledger's answer are returned.
func (w *world) explainDo(op *opledger.Operation, err error, calls, made, units int) (string, error) {
	if units == 0 {
		units = DefaultUnits
	}
	var (
		mismatch *opledger.MismatchError
		state    *opledger.StateError
		attempt  *opledger.AttemptError
	)
	switch {
	case errors.As(err, &mismatch):
		return fmt.Sprintf("Refused: %s is already recorded with other content, so the %d-unit request is not a retry; the original is kept and nothing was sent.", OperationKey, units), nil
	case errors.Is(err, opledger.ErrNotDue) && errors.As(err, &state) && state.Operation != nil && state.Operation.NotBefore != nil:
		// Pending, not due yet: sent once its time has come.
		at := state.Operation.NotBefore.UTC()
		return fmt.Sprintf("Not sent yet: the operation is pending until %s (%s from now), when the %s's Retry-After or the retry policy's backoff ends; opledger sent nothing.",
			at.Format("15:04:05Z"), at.Sub(w.now()).Round(time.Second), w.dest.Name()), nil
	case errors.As(err, &state):
		if state.State == opledger.StateUncertain {
			return fmt.Sprintf("Held back: the operation is uncertain — the %s may already have acted — so opledger sent nothing; it must be verified first.", w.dest.Name()), nil
		}
		if state.State == opledger.StateHeld {
			return fmt.Sprintf("Held back: the operation is held for its owner — the %s may already have acted — so opledger sent nothing; a person decides.", w.dest.Name()), nil
		}
		if state.State == opledger.StateInProgress {
			// Another attempt is under way; it ends with its report or
			// its lease.
			return "Not sent yet: a worker holds the operation (in progress) until it reports or its lease ends; opledger sent nothing.", nil
		}
		return fmt.Sprintf("Not sent: the operation is %s, so opledger refused a second attempt.", state.State), nil
	case errors.As(err, &attempt):
		switch attempt.State {
		case opledger.StateUncertain:
			if made > 0 {
				return fmt.Sprintf("The %s acted but never confirmed it (%s): the operation is uncertain, and nothing will be sent again until it is verified.", w.dest.Name(), shortError(attempt.Err)), nil
			}
			return fmt.Sprintf("The %s did not confirm anything (%s): the operation is uncertain, and nothing will be sent again until it is verified.", w.dest.Name(), shortError(attempt.Err)), nil
		case opledger.StatePending:
			return fmt.Sprintf("The %s refused before acting (%s); the operation is pending and may be retried: at once, or after the Retry-After the destination gave.", w.dest.Name(), attempt.Outcome), nil
		case opledger.StateFailed:
			return fmt.Sprintf("The %s refused before acting (%s) and no further attempt is allowed: the operation failed (%s).", w.dest.Name(), attempt.Outcome, op.FailureKind), nil
		}
		return fmt.Sprintf("The attempt ended %s; the operation is %s.", attempt.Outcome, attempt.State), nil
	case err != nil:
		return "", err
	case made > 0 && w.dest.EffectsFor(op.Key) > made:
		return fmt.Sprintf("opledger sent it again and the %s acted again (%s): a second effect for the same operation — a duplicate.", w.dest.Name(), op.DestinationRef), nil
	case made > 0 && op.AttemptCount > 1:
		// No earlier attempt had acted: the effects are this one's.
		return fmt.Sprintf("opledger sent it again (attempt %d; no earlier attempt had acted); the %s acted once and confirmed %s.", op.AttemptCount, w.dest.Name(), op.DestinationRef), nil
	case made > 0:
		return fmt.Sprintf("opledger recorded the operation and sent it once; the %s confirmed %s.", w.dest.Name(), op.DestinationRef), nil
	case calls > 0:
		return fmt.Sprintf("opledger sent it again under the same idempotency key; the %s recognised the key and returned its original result (%s) without acting again.", w.dest.Name(), op.DestinationRef), nil
	}
	return fmt.Sprintf("Answered from the ledger: the saved result (%s) was returned and nothing was sent again.", op.DestinationRef), nil
}

// verify lets the reconciler examine every uncertain operation of the
// world's tenant once. It never touches other tenants.
func (w *world) verify(ctx context.Context) (string, error) {
	page, err := w.ledger.List(ctx, opledger.ListOptions{States: []opledger.State{opledger.StateUncertain}, Limit: opledger.MaxListLimit})
	if err != nil {
		return "", err
	}
	if len(page.Items) == 0 {
		return "Nothing to verify: no operation is uncertain.", nil
	}
	var parts []string
	for _, op := range page.Items {
		before := w.dest.Counters().Lookups
		failedBefore, err := w.ledger.LookupFailures(ctx, op.Key)
		if err != nil {
			return "", err
		}
		d, err := w.rec.Reconcile(ctx, op)
		if err != nil {
			return "", err
		}
		looked := w.dest.Counters().Lookups > before
		after, err := w.ledger.Get(ctx, op.Key)
		if err != nil {
			return "", err
		}
		tl, err := w.ledger.Timeline(ctx, op.Key)
		if err != nil {
			return "", err
		}
		event := tl[len(tl)-1].Event
		// The reconciler records a failed lookup as a deferral it counts
		// (Ledger.LookupFailures), and the one that reaches its limit as
		// its hold ("held"), which nothing else in the lab makes.
		var failed *lookupFailure
		switch {
		case looked && d == reconciler.Wait:
			n, err := w.ledger.LookupFailures(ctx, op.Key)
			if err != nil {
				return "", err
			}
			if n > failedBefore && after.NotBefore != nil {
				failed = &lookupFailure{count: n, retryIn: after.NotBefore.Sub(w.now())}
			}
		case looked && d == reconciler.Held && event == "held":
			failed = &lookupFailure{count: failedBefore + 1}
		}
		parts = append(parts, explainVerify(w.dest.Name(), w.dest.Capabilities(), d, looked, failed, after, event))
	}
	return strings.Join(parts, " "), nil
}

// lookupFailure is a check whose lookup failed.
type lookupFailure struct {
	// count is how many lookups failed since the operation became
	// uncertain, this one included.
	count int
	// retryIn is how long until the reconciler looks again; 0 when the
	// operation was held.
	retryIn time.Duration
}

// explainVerify tells what a reconciliation decided (d) and why; event is
// the operation's latest timeline event, the ledger's own reason, and
// failed is set when the check's lookup failed.
func explainVerify(dest string, caps destination.Capabilities, d reconciler.Decision, looked bool, failed *lookupFailure, op *opledger.Operation, event string) string {
	switch {
	case failed != nil && d == reconciler.Held:
		return fmt.Sprintf("The lookup at the %s failed again (failed lookup %d since the operation became uncertain): the reconciler has tried as often as it may, so rather than guess or resend, the operation is held for its owner; nothing was sent.", dest, failed.count)
	case failed != nil:
		return fmt.Sprintf("The lookup at the %s failed (failed lookup %d since the operation became uncertain): it proves neither that the record exists nor that it does not, so the operation stays uncertain, nothing is sent, and the reconciler looks again in %s.", dest, failed.count, failed.retryIn)
	case d == reconciler.Succeeded:
		return fmt.Sprintf("A lookup at the %s found record %s with the intended content: the operation is confirmed succeeded, nothing was sent.", dest, op.DestinationRef)
	case d == reconciler.Retry && op.Protected:
		return fmt.Sprintf("The %s's idempotency key is still remembered, so a retry under the same key is safe: the operation is pending, marked protected.", dest)
	case d == reconciler.Retry:
		return fmt.Sprintf("An authoritative lookup at the %s found nothing, and the ledger takes the destination at its word that the attempt had no effect: the operation is pending again.", dest)
	case d == reconciler.Failed:
		return fmt.Sprintf("An authoritative lookup at the %s found nothing, and the ledger takes the destination at its word that the attempt had no effect; its retry policy allows no further attempt, so the operation failed.", dest)
	case d == reconciler.Held && looked && strings.Contains(op.LastError, destination.ErrExists.Error()):
		return fmt.Sprintf("The %s refused the resend as a duplicate, yet its lookup does not show the record: it contradicts itself, so the operation is held for its owner.", dest)
	case d == reconciler.Held && looked:
		return fmt.Sprintf("The %s has a record with other content: the operation is held for its owner.", dest)
	case d == reconciler.Held && event == "exhausted while uncertain":
		return fmt.Sprintf("The %s would take a retry safely, but the retry limit is reached and an earlier attempt may have taken effect: the operation is held for its owner.", dest)
	case d == reconciler.Held && caps.IdempotencyKey != nil:
		return fmt.Sprintf("The %s's idempotency key is no longer remembered, so a retry could act twice: the operation is held for its owner.", dest)
	case d == reconciler.Held:
		return fmt.Sprintf("The %s offers no lookup and no idempotency key, so nobody can tell whether it acted: the operation is held for its owner.", dest)
	case d == reconciler.Wait:
		return fmt.Sprintf("The %s does not show the record yet; the check will be repeated after its visibility delay.", dest)
	}
	return "Someone else decided meanwhile; nothing changed."
}

// nothingDueText explains a crash step whose worker found nothing due:
// no attempt, whether it ran in the runner's process or its own.
const nothingDueText = "The worker found nothing due, so it had nothing to crash on."

// crash is a worker that takes the operation and stops for good at point:
// a process killed there when w.spawn is set, else the same steps in
// process, abandoned there.
func (w *world) crash(ctx context.Context, point CrashPoint) (string, error) {
	if len(w.spawn) > 0 {
		return w.crashProcess(ctx, point)
	}
	if point == CrashBeforeClaim {
		return crashText(point, w.dest.Name(), 0), nil
	}
	var (
		c   *opledger.Claim
		err error
	)
	if w.workflow {
		c, err = w.ledger.ClaimNext(ctx, opledger.ClaimNextOptions{Worker: "lab-worker-crashing"})
		if errors.Is(err, opledger.ErrNothingDue) {
			return nothingDueText, nil
		}
	} else {
		in := w.intent(0)
		c, err = w.ledger.Claim(ctx, OperationKey, opledger.ClaimOptions{Worker: "lab-worker-crashing", Intent: &in})
	}
	w.attempts.Add(1)
	var se *opledger.StateError
	if errors.As(err, &se) {
		return fmt.Sprintf("The worker's claim was refused (the operation is %s), so its crash changed nothing.", se.State), nil
	}
	if err != nil {
		return "", err
	}
	if point == CrashAfterClaim {
		return crashText(point, w.dest.Name(), 0), nil
	}
	if _, err := w.ledger.Dispatch(ctx, c.Operation.Key, c.AttemptID, c.FencingToken); err != nil {
		return "", err
	}
	if point == CrashAfterDispatch {
		return crashText(point, w.dest.Name(), 0), nil
	}
	before := w.dest.Counters().Effects
	res, callErr := w.dest.Call(ctx, opledger.Call{Operation: c.Operation, AttemptID: c.AttemptID, IdempotencyKey: c.IdempotencyKey, Protected: c.Protected})
	made := w.dest.Counters().Effects - before
	if point == CrashAfterEffect {
		return crashText(point, w.dest.Name(), made), nil
	}
	if _, err := w.ledger.Report(ctx, c.Operation.Key, c.AttemptID, c.FencingToken, opledger.ReportOf(res, callErr)); err != nil {
		return "", err
	}
	return crashText(point, w.dest.Name(), made), nil
}

// restart closes the ledger and opens it again on the same store.
func (w *world) restart(ctx context.Context) (string, error) {
	if w.dsn == "" {
		return "", errors.New("restart is not possible on a ledger the lab did not open")
	}
	if err := w.ledger.Close(); err != nil {
		return "", fmt.Errorf("close ledger: %w", err)
	}
	l, err := opledger.Open(ctx, w.dsn, w.opts)
	if err != nil {
		return "", fmt.Errorf("reopen ledger: %w", err)
	}
	if w.ledger, err = l.WithTenant(w.tenant); err != nil {
		return "", err
	}
	if err := w.setDestination(w.dest); err != nil {
		return "", err
	}
	return "The ledger was closed and opened again on the same store; what it had recorded is all it knows.", nil
}

// advance moves the lab clock and settles expired leases, as the
// server's sweeper would.
func (w *world) advance(ctx context.Context, d time.Duration) (string, error) {
	w.offset.Add(int64(d))
	n, err := w.ledger.ExpireLeases(ctx)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return fmt.Sprintf("%s passed; no lease expired.", d), nil
	}
	return fmt.Sprintf("%s passed; %d expired lease(s) were settled: a claim never dispatched is pending again, a dispatched one uncertain.", d, n), nil
}

// shortError is an error's text cut to one short clause.
func shortError(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && i+2 < len(s) {
		s = s[i+2:]
	}
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}

// workers sends the operation from n goroutines at the same moment.
func (w *world) workers(ctx context.Context, n int) (string, error) {
	start := make(chan struct{})
	type result struct {
		op  *opledger.Operation
		err error
	}
	results := make([]result, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			w.attempts.Add(1)
			op, err := w.ledger.Do(ctx, w.intent(0), w.call)
			results[i] = result{op, err}
		}()
	}
	before := w.dest.Counters()
	close(start)
	wg.Wait()
	after := w.dest.Counters()
	// The destination counts the calls that reached it: each worker
	// whose claim was granted made one, whatever the answer (an answer
	// lost, a 503). The others found the operation in progress, got the
	// saved result or were refused.
	calls, made := after.Attempts-before.Attempts, after.Effects-before.Effects
	var busy, succeeded, failedCalls, other int
	for _, r := range results {
		var se *opledger.StateError
		switch {
		case errors.As(r.err, &se) && se.State == opledger.StateInProgress:
			busy++
		case r.err == nil:
			succeeded++
		case errors.As(r.err, new(*opledger.AttemptError)):
			failedCalls++
		case errors.Is(r.err, opledger.ErrInvalidInput), errors.As(r.err, &se):
			other++
		default:
			return "", r.err
		}
	}
	replayed := max(succeeded-(calls-failedCalls), 0)
	return fmt.Sprintf("%d workers sent the operation at once: %d call(s) reached the %s, %d found it in progress, %d got the saved result, %d were refused otherwise; %d effect(s).",
		n, calls, w.dest.Name(), busy, replayed, other, made), nil
}

// deliver has the webhook source deliver event id to the ledger: the
// first delivery of an event records the operation its rule asks for
// (pending, for a worker to "run"); a repeated delivery is recorded as a
// duplicate and records nothing.
func (w *world) deliver(ctx context.Context, id string) (string, error) {
	if w.webhook == nil {
		rules, err := opledger.NewRules(opledger.Rule{Name: "order-accepted", Source: webhookSource, Type: "order.accepted",
			Operations: []opledger.OperationRule{{Key: OperationKey, Action: "order.prepare", Destination: w.dest.Name(), Owner: "lab",
				Payload: map[string]any{"order": "{data.order}", "units": "{data.units}"}}}})
		if err != nil {
			return "", err
		}
		w.webhook = NewWebhookSource(WebhookOptions{Source: webhookSource, Type: "order.accepted", Now: w.now, Rules: rules})
	}
	payload, _ := json.Marshal(map[string]any{"order": OrderRef, "units": DefaultUnits})
	w.webhook.Emit(id, payload) // a known id queues another delivery of it
	res, err := w.webhook.DeliverNext(ctx, w.ledger)
	if err != nil {
		return "", err
	}
	if res.Duplicate {
		return fmt.Sprintf("Event %s arrived again: the ledger recorded the delivery as a duplicate and recorded nothing else.", id), nil
	}
	keys := make([]string, len(res.Operations))
	for i, op := range res.Operations {
		keys[i] = op.Key + " (" + string(op.State) + ")"
	}
	return fmt.Sprintf("Event %s arrived for the first time; its rule recorded %s.", id, strings.Join(keys, ", ")), nil
}

// putWorkflow records the workflow of n steps.
func (w *world) putWorkflow(ctx context.Context, n int, approval bool) (string, error) {
	spec := opledger.WorkflowSpec{Owner: "lab", RequiresApproval: approval}
	for i := 1; i <= n; i++ {
		payload, _ := json.Marshal(map[string]any{"order": OrderRef, "part": i, "units": DefaultUnits})
		spec.Steps = append(spec.Steps, opledger.WorkflowStep{Name: fmt.Sprintf("part-%d", i), Action: "order.prepare_part",
			Destination: w.dest.Name(), Payload: payload})
	}
	wf, _, err := w.ledger.PutWorkflow(ctx, WorkflowKey, spec)
	if err != nil {
		return "", err
	}
	w.workflow = true
	return fmt.Sprintf("Workflow %s recorded with %d steps; it is %s.", WorkflowKey, n, wf.Status), nil
}

// run is a worker taking due operations one at a time.
func (w *world) run(ctx context.Context, limit int) (string, error) {
	if limit == 0 {
		limit = 100
	}
	var done []string
	for range limit {
		c, err := w.ledger.ClaimNext(ctx, opledger.ClaimNextOptions{Worker: "lab-worker"})
		if errors.Is(err, opledger.ErrNothingDue) {
			break
		}
		if err != nil {
			return "", err
		}
		w.attempts.Add(1)
		key := c.Operation.Key
		if _, err := w.ledger.Dispatch(ctx, key, c.AttemptID, c.FencingToken); err != nil {
			return "", err
		}
		res, callErr := w.dest.Call(ctx, opledger.Call{Operation: c.Operation, AttemptID: c.AttemptID, IdempotencyKey: c.IdempotencyKey, Protected: c.Protected})
		op, err := w.ledger.Report(ctx, key, c.AttemptID, c.FencingToken, opledger.ReportOf(res, callErr))
		if err != nil {
			return "", err
		}
		if op.State == opledger.StateSucceeded {
			if _, err := w.ledger.AdvanceWorkflowOf(ctx, key); err != nil {
				return "", err
			}
		}
		done = append(done, key+", now "+stateName(op))
	}
	if len(done) == 0 {
		return "The worker found nothing due.", nil
	}
	return "The worker carried out " + strings.Join(done, "; ") + ".", nil
}

// currentStep is the workflow's first step that has not succeeded.
func (w *world) currentStep(ctx context.Context) (*opledger.WorkflowStepStatus, error) {
	wf, err := w.ledger.GetWorkflow(ctx, WorkflowKey)
	if err != nil {
		return nil, err
	}
	return wf.Step(wf.CurrentStep), nil
}

// approve approves the current step's content exactly as stored.
func (w *world) approve(ctx context.Context) (string, error) {
	s, err := w.currentStep(ctx)
	if err != nil {
		return "", err
	}
	if s == nil || s.Operation == nil || s.Operation.State != opledger.StateAwaitingApproval {
		return "Nothing awaits approval.", nil
	}
	if _, _, err := w.ledger.ApproveWorkflowStep(ctx, WorkflowKey, s.Name, opledger.Approval{Version: s.Operation.Version,
		Fingerprint: s.Operation.Fingerprint, Approver: "lab-approver"}); err != nil {
		return "", err
	}
	return fmt.Sprintf("Step %s approved as stored (version %d).", s.Name, s.Operation.Version), nil
}

// revise changes the current step's content to units units.
func (w *world) revise(ctx context.Context, units int) (string, error) {
	s, err := w.currentStep(ctx)
	if err != nil {
		return "", err
	}
	if s == nil || s.Operation == nil {
		return "No recorded step to revise.", nil
	}
	var p map[string]any
	if err := json.Unmarshal(s.Operation.Payload, &p); err != nil {
		return "", err
	}
	p["units"] = units
	payload, _ := json.Marshal(p)
	_, _, err = w.ledger.ReviseWorkflowStep(ctx, WorkflowKey, s.Name, opledger.Revision{Payload: payload, Version: s.Operation.Version + 1, Actor: "lab"})
	var se *opledger.StateError
	if errors.As(err, &se) {
		return fmt.Sprintf("Revision refused: step %s is %s, its content can no longer change.", s.Name, se.State), nil
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("Step %s now asks for %d units (version %d): the earlier approval no longer applies.", s.Name, units, s.Operation.Version+1), nil
}

// resume resumes the workflow.
func (w *world) resume(ctx context.Context) (string, error) {
	wf, err := w.ledger.ResumeWorkflow(ctx, WorkflowKey)
	if err != nil {
		return "", err
	}
	done := 0
	for _, s := range wf.Steps {
		if s.State == opledger.StepState(opledger.StateSucceeded) {
			done++
		}
	}
	return fmt.Sprintf("Workflow resumed: %d of %d steps had succeeded and were skipped; it is %s (%s).", done, len(wf.Steps), wf.Status, wf.Reason), nil
}
