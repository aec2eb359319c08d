package lab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/opledger/opledger"
)

// ScenarioAction is one button of an interactive scenario: a request the
// automation sends, or a verification.
type ScenarioAction struct {
	// Name identifies the action in Step, e.g. "send".
	Name string `json:"name"`
	// Label is the button's text.
	Label string `json:"label"`
	step  Step
}

// Scenario is an interactive scenario: the fictional order "prepare 2
// units of DEMO-ORDER-017" under the operation key DEMO-OP-017, sent to a
// simulated CRM (NewCRM) with an authoritative lookup.
type Scenario struct {
	// Name is the scenario's id: normal, changed-data, lost-response.
	Name string `json:"name"`
	// Title is a short heading.
	Title string `json:"title"`
	// Summary says what the scenario shows.
	Summary string `json:"summary"`
	// Faults are injected into the CRM when the scenario starts.
	Faults []Fault `json:"faults,omitempty"`
	// Actions are the buttons, each usable any number of times.
	Actions []ScenarioAction `json:"actions"`
	// Script is the sequence of action names Replay plays.
	Script []string `json:"script"`
}

// Action returns the action called name.
func (s Scenario) Action(name string) (ScenarioAction, bool) {
	for _, a := range s.Actions {
		if a.Name == name {
			return a, true
		}
	}
	return ScenarioAction{}, false
}

var (
	actSend    = ScenarioAction{Name: "send", Label: "Send 2 units", step: Step{Verb: StepSend, Units: 2, Text: "send"}}
	actRepeat  = ScenarioAction{Name: "repeat", Label: "Repeat the request", step: Step{Verb: StepRetry, Units: 2, Text: "retry"}}
	actRetry3  = ScenarioAction{Name: "retry-3", Label: "Retry with 3 units", step: Step{Verb: StepRetry, Units: 3, Text: "retry units=3"}}
	actRetry   = ScenarioAction{Name: "retry", Label: "Retry", step: Step{Verb: StepRetry, Units: 2, Text: "retry"}}
	actVerify  = ScenarioAction{Name: "verify", Label: "Verify at the CRM", step: Step{Verb: StepVerify, Text: "verify"}}
	scenarioDB = []Scenario{
		{Name: "normal", Title: "Normal", Summary: "Send the order, then repeat the same request: the repeat is answered from the ledger.",
			Actions: []ScenarioAction{actSend, actRepeat}, Script: []string{"send", "repeat"}},
		{Name: "changed-data", Title: "Changed data", Summary: "Send 2 units, then “retry” with 3 units under the same key: refused, the original kept.",
			Actions: []ScenarioAction{actSend, actRetry3}, Script: []string{"send", "retry-3"}},
		{Name: "lost-response", Title: "Lost response", Summary: "The CRM creates the record but its answer is lost: retries are held back until a lookup confirms the record.",
			Faults: []Fault{FaultLostResponse}, Actions: []ScenarioAction{actSend, actRetry, actVerify}, Script: []string{"send", "retry", "verify", "retry"}},
	}
)

// Scenarios lists the interactive scenarios.
func Scenarios() []Scenario { return append([]Scenario(nil), scenarioDB...) }

// FindScenario returns the scenario called name.
func FindScenario(name string) (Scenario, bool) {
	for _, s := range scenarioDB {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string {
	names := make([]string, len(scenarioDB))
	for i, s := range scenarioDB {
		names[i] = s.Name
	}
	return names
}

// ErrUnknownAction is returned by Step for an action the scenario lacks.
var ErrUnknownAction = errors.New("unknown scenario action")

// ScenarioCounters are the three counters of an interactive scenario.
type ScenarioCounters struct {
	// Attempts: requests the automation sent to opledger (each send,
	// repeat and retry counts, even when the ledger answers it), shown
	// as "requests". They are not the operation's attempts
	// (Ledger.Attempts: opledger's calls to the CRM): a request held back
	// or answered from the ledger makes none.
	Attempts int `json:"attempts"`
	// Actions: effects at the CRM (records created).
	Actions int `json:"actions"`
	// Verifications: lookups made at the CRM.
	Verifications int `json:"verifications"`
}

// MaxHistory is how many steps a Playground keeps: the newest. Steps
// played before them are only counted (Recent), so that a scenario played
// for a long time holds no more memory, and its page no more lines, than
// these.
const MaxHistory = 50

// StepResult is what one action of a scenario did.
type StepResult struct {
	// N numbers the steps from 1 since the last Reset.
	N int `json:"n"`
	// Action and Label name the action played.
	Action string `json:"action"`
	Label  string `json:"label"`
	// Counters after the step.
	Counters ScenarioCounters `json:"counters"`
	// State of DEMO-OP-017 after the step ("none" before it is recorded).
	State string `json:"state"`
	// Ref is the CRM's record, once the ledger knows it.
	Ref string `json:"ref,omitempty"`
	// Explanation says what happened, in one sentence.
	Explanation string `json:"explanation"`
}

// Playground plays one scenario against a real ledger. Each run (from
// NewPlayground or Reset) uses a tenant of its own, "lab-" and random
// hex, so it never touches the operations of other tenants and always
// starts from nothing; the CRM is simulated in memory. A Playground is
// safe for concurrent use; steps run one at a time.
type Playground struct {
	base     *opledger.Ledger
	scenario Scenario

	mu sync.Mutex
	w  *world
	// history holds the newest steps since the last Reset, at most
	// MaxHistory; earlier counts those dropped before them.
	history []StepResult
	earlier int
}

// NewPlayground starts scenario name on l's store.
func NewPlayground(ctx context.Context, l *opledger.Ledger, name string) (*Playground, error) {
	s, ok := FindScenario(name)
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q (want one of %v)", name, ScenarioNames())
	}
	p := &Playground{base: l, scenario: s}
	if err := p.start(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// start opens a fresh run; the caller holds mu (or owns p alone).
func (p *Playground) start(_ context.Context) error {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tenant := "lab-" + hex.EncodeToString(b)
	tl, err := p.base.WithTenant(tenant)
	if err != nil {
		return err
	}
	w := &world{tenant: tenant, ledger: tl, start: labStart(), offset: new(atomic.Int64)}
	d := NewCRM(CRMOptions{Name: "lab-crm", Now: w.now})
	if err := d.Inject(p.scenario.Faults...); err != nil {
		return err
	}
	if err := w.setDestination(d); err != nil {
		return err
	}
	p.w, p.history, p.earlier = w, nil, 0
	return nil
}

// Scenario is the scenario being played.
func (p *Playground) Scenario() Scenario { return p.scenario }

// Tenant is the current run's tenant.
func (p *Playground) Tenant() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.w.tenant
}

// History returns the steps played since the last Reset, oldest first:
// the newest MaxHistory of them when more were played.
func (p *Playground) History() []StepResult {
	steps, _ := p.Recent()
	return steps
}

// Recent returns what History returns, and how many steps played since
// the last Reset came before them and are no longer kept, read together.
func (p *Playground) Recent() (steps []StepResult, earlier int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]StepResult(nil), p.history...), p.earlier
}

// Counters returns the counters now.
func (p *Playground) Counters() ScenarioCounters {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counters()
}

func (p *Playground) counters() ScenarioCounters {
	c := p.w.dest.Counters()
	return ScenarioCounters{Attempts: int(p.w.attempts.Load()), Actions: c.Effects, Verifications: c.Lookups}
}

// Step plays the action called name and returns the counters, the state
// and a one-sentence explanation. An action the scenario lacks is
// ErrUnknownAction.
func (p *Playground) Step(ctx context.Context, name string) (StepResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.step(ctx, name)
}

func (p *Playground) step(ctx context.Context, name string) (StepResult, error) {
	a, ok := p.scenario.Action(name)
	if !ok {
		return StepResult{}, fmt.Errorf("%w %q in scenario %s", ErrUnknownAction, name, p.scenario.Name)
	}
	out, err := p.w.play(ctx, a.step)
	if err != nil {
		return StepResult{}, err
	}
	r := StepResult{N: p.earlier + len(p.history) + 1, Action: a.Name, Label: a.Label, Counters: p.counters(),
		State: out.State, Ref: out.Ref, Explanation: out.Explanation}
	if len(p.history) == MaxHistory {
		// Drop the oldest in place: the slice never grows past MaxHistory.
		copy(p.history, p.history[1:])
		p.history = p.history[:MaxHistory-1]
		p.earlier++
	}
	p.history = append(p.history, r)
	return r, nil
}

// Reset starts the scenario again from nothing: a new tenant, a new CRM.
// An operation the previous run left unresolved is cancelled, with the
// reason, so that it waits for nobody.
func (p *Playground) Reset(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.reset(ctx)
}

func (p *Playground) reset(ctx context.Context) error {
	if op, err := p.w.ledger.Get(ctx, OperationKey); err == nil && !op.State.Final() && op.State != opledger.StateInProgress {
		_, _, err := p.w.ledger.Resolve(ctx, OperationKey, opledger.Decision{Kind: opledger.DecisionCancel,
			Reason: "lab scenario reset: the simulated CRM is discarded", Operator: "lab"})
		if err != nil && !errors.Is(err, opledger.ErrInvalidState) {
			return fmt.Errorf("cancel the previous run's operation: %w", err)
		}
	} else if err != nil && !errors.Is(err, opledger.ErrNotFound) {
		return err
	}
	return p.start(ctx)
}

// Replay resets the scenario and plays its whole script.
func (p *Playground) Replay(ctx context.Context) ([]StepResult, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.reset(ctx); err != nil {
		return nil, err
	}
	for _, name := range p.scenario.Script {
		if _, err := p.step(ctx, name); err != nil {
			return append([]StepResult(nil), p.history...), err
		}
	}
	return append([]StepResult(nil), p.history...), nil
}
