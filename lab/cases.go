package lab

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// CaseKind says where a case can be shown.
type CaseKind string

// The kinds of case.
const (
	// CaseInteractive: a case a browser demo can play step by step.
	CaseInteractive CaseKind = "interactive"
	// CaseProduction: a check a browser demo cannot make — worker crashes,
	// restarts, concurrent workers — run for real by `opledger lab run`.
	CaseProduction CaseKind = "production"
)

// DestinationKind names the simulated destination a case acts on.
type DestinationKind string

// The destination kinds of the case file.
const (
	// DestCRM is a CRM with a unique reference and a lookup (NewCRM).
	DestCRM DestinationKind = "crm"
	// DestEmail accepts messages and offers no lookup and no key (NewEmail).
	DestEmail DestinationKind = "email"
	// DestPayment honours idempotency keys for 24 hours (NewPayment).
	DestPayment DestinationKind = "payment"
	// DestWebhook: the operation comes from webhook deliveries ("deliver
	// event …" steps, a WebhookSource with a mapping rule) and acts on a
	// CRM.
	DestWebhook DestinationKind = "webhook"
)

// looksUp reports whether the destination of the kind looks records up
// (a CRM, also behind a webhook), so that a lookup fault can be taken.
func (k DestinationKind) looksUp() bool { return k == DestCRM || k == DestWebhook }

// Tally is what the lab counts. The columns of the case file and the
// counters of the interactive scenarios are defined here, once.
type Tally struct {
	// Attempts counts the requests the automation sent to opledger to
	// carry out the operation: every send and retry (answered from the
	// ledger or not), every concurrent worker's try, every claim a worker
	// made. Requests that never reached opledger (a crash before the
	// claim) are not counted.
	Attempts int `json:"attempts"`
	// Actions counts the effects at the destination: records created,
	// messages accepted, charges made.
	Actions int `json:"actions"`
	// Verifications counts the lookups made at the destination to find
	// out what an uncertain attempt did.
	Verifications int `json:"verifications"`
	// Events counts distinct webhook events the ledger recorded.
	Events int `json:"events"`
	// Deliveries counts every arrival of those events, duplicates included.
	Deliveries int `json:"deliveries"`
}

// Case is one row of the case file.
type Case struct {
	// Line is the row's line in the file (1 is the header).
	Line int      `json:"line"`
	ID   string   `json:"id"`
	Kind CaseKind `json:"kind"`
	// Destination is the simulated destination.
	Destination DestinationKind `json:"destination"`
	// Faults are injected into the destination before the first step; each
	// call to it consumes the next one, each lookup the next lookup fault
	// (FaultLookupError), which only a destination with lookups takes.
	Faults []Fault `json:"faults"`
	// Steps are played in order.
	Steps []Step `json:"steps"`
	// Want is what the case expects at the end.
	Want Expectation `json:"want"`
	// TitleEN, TitleES, ExplanationEN and ExplanationES describe the case
	// in English and Spanish.
	TitleEN       string `json:"title_en"`
	TitleES       string `json:"title_es"`
	ExplanationEN string `json:"explanation_en"`
	ExplanationES string `json:"explanation_es"`
}

// Expectation is the expected (or observed) outcome of a case.
type Expectation struct {
	Tally
	// State is the operation's final state ("failed/exhausted" names the
	// failure kind; StateNone when it was never recorded), or for a
	// workflow its status.
	State string `json:"state"`
}

// StateNone is the state column's value for an operation the ledger never
// recorded (e.g. the worker crashed before its claim).
const StateNone = "none"

// StepVerb is the first word of a step.
type StepVerb string

// The step grammar. A step list is steps separated by ";"; each step is a
// verb and its arguments separated by spaces.
const (
	// StepSend: "send [units=N]" — the automation asks opledger to carry
	// out the operation (default 2 units).
	StepSend StepVerb = "send"
	// StepRetry: "retry [units=N]" — the automation sends the same request
	// again.
	StepRetry StepVerb = "retry"
	// StepVerify: "verify" — the reconciler examines the operation once
	// (a lookup where the destination offers one).
	StepVerify StepVerb = "verify"
	// StepCrash: "crash POINT" — a worker takes the operation (or, in a
	// workflow, the next due step) and stops for good at POINT
	// (before_claim, after_claim, after_dispatch, after_effect,
	// after_report) without reporting.
	StepCrash StepVerb = "crash"
	// StepRestart: "restart" — close the ledger and open it again on the
	// same store.
	StepRestart StepVerb = "restart"
	// StepAdvance: "advance DURATION" — move the lab clock forward (Go
	// duration, e.g. 90s, 25h), then settle expired leases as the server's
	// sweeper would.
	StepAdvance StepVerb = "advance"
	// StepWorkers: "workers N" — N workers (goroutines) send the operation
	// at the same moment.
	StepWorkers StepVerb = "workers"
	// StepDeliver: "deliver event ID" — the webhook source delivers event
	// ID to the ledger; the first delivery records the operation its rule
	// asks for (pending: a "run" step carries it out), a repeat is
	// recorded as a duplicate delivery and nothing else.
	StepDeliver StepVerb = "deliver"
	// StepWorkflow: "workflow N [approval]" — record a workflow of N steps
	// (each one operation at the destination), optionally requiring
	// approval of every step's content.
	StepWorkflow StepVerb = "workflow"
	// StepRun: "run [N]" — a worker claims due operations one at a time
	// (at most N) and carries each out, advancing the workflow after each
	// success.
	StepRun StepVerb = "run"
	// StepApprove: "approve" — approve the current workflow step's content
	// exactly as stored.
	StepApprove StepVerb = "approve"
	// StepRevise: "revise units=N" — change the current workflow step's
	// content (a new version, which needs approval again).
	StepRevise StepVerb = "revise"
	// StepResume: "resume" — resume the workflow after a crash or a
	// decision: succeeded steps are skipped, nothing is regenerated.
	StepResume StepVerb = "resume"
)

// Step is one parsed step.
type Step struct {
	Verb StepVerb `json:"verb"`
	// Units is the order's unit count for send, retry and revise (0: the
	// default, 2).
	Units int `json:"units,omitempty"`
	// N is the count of workers, workflow and run.
	N int `json:"n,omitempty"`
	// Approval is set by "workflow N approval".
	Approval bool `json:"approval,omitempty"`
	// Point is the crash point.
	Point CrashPoint `json:"point,omitempty"`
	// Duration is how far advance moves the clock.
	Duration time.Duration `json:"duration,omitempty"`
	// Event is the event id delivered.
	Event string `json:"event,omitempty"`
	// Text is the step as written.
	Text string `json:"text"`
}

// String is the step as written in the file.
func (s Step) String() string { return s.Text }

// FileError reports a malformed case file.
type FileError struct {
	Line int
	Msg  string
}

// Error describes the error.
func (e *FileError) Error() string {
	if e.Line <= 0 {
		return "case file: " + e.Msg
	}
	return fmt.Sprintf("case file line %d: %s", e.Line, e.Msg)
}

// CaseColumns are the case file's columns, in the file's order.
var CaseColumns = []string{"id", "kind", "destination", "faults", "steps",
	"attempts", "actions", "verifications", "events", "deliveries", "state",
	"title_en", "title_es", "explanation_en", "explanation_es"}

// durationShape is a duration time.ParseDuration reads, whatever its
// size: one it refuses in this shape is too long.
var durationShape = regexp.MustCompile(`^\+?([0-9]+(\.[0-9]*)?(ns|us|µs|ms|s|m|h))+$`)

// ParseCases reads a case file: CSV (RFC 4180) with the header CaseColumns,
// one case a row. Blank lines are skipped. Any malformed row is a
// *FileError naming its line.
func ParseCases(r io.Reader) ([]Case, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, &FileError{Line: 1, Msg: "the file is empty; it needs the header " + strings.Join(CaseColumns, ",")}
	}
	if err != nil {
		return nil, csvError(err)
	}
	if len(header) > 0 {
		header[0] = strings.TrimPrefix(header[0], "\ufeff")
	}
	if strings.Join(header, ",") != strings.Join(CaseColumns, ",") {
		return nil, &FileError{Line: 1, Msg: "the header must be exactly " + strings.Join(CaseColumns, ",")}
	}
	var cases []Case
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvError(err)
		}
		line, _ := cr.FieldPos(0)
		for _, field := range rec {
			if !utf8.ValidString(field) {
				// The titles and explanations are shown as text.
				return nil, &FileError{Line: line, Msg: "not UTF-8: the case file is UTF-8 text"}
			}
		}
		if len(rec) != len(CaseColumns) {
			return nil, &FileError{Line: line, Msg: fmt.Sprintf("%d fields, want %d (%s)", len(rec), len(CaseColumns), strings.Join(CaseColumns, ","))}
		}
		c, err := parseCase(line, rec)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[c.ID]; dup {
			return nil, &FileError{Line: line, Msg: fmt.Sprintf("id %q is already used on line %d", c.ID, first)}
		}
		seen[c.ID] = line
		cases = append(cases, c)
	}
	if len(cases) == 0 {
		return nil, &FileError{Line: 2, Msg: "no case: the file has a header and nothing else"}
	}
	return cases, nil
}

func csvError(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return &FileError{Line: pe.Line, Msg: pe.Err.Error()}
	}
	return &FileError{Msg: err.Error()}
}

func parseCase(line int, rec []string) (Case, error) {
	bad := func(col, format string, args ...any) error {
		return &FileError{Line: line, Msg: col + ": " + fmt.Sprintf(format, args...)}
	}
	for i := range rec {
		rec[i] = strings.TrimSpace(rec[i])
	}
	c := Case{Line: line, ID: rec[0], Kind: CaseKind(rec[1]), Destination: DestinationKind(rec[2]),
		TitleEN: rec[11], TitleES: rec[12], ExplanationEN: rec[13], ExplanationES: rec[14]}
	if !caseID.MatchString(c.ID) {
		return c, bad("id", "%q must be letters, digits, - and _ (at most 64)", c.ID)
	}
	if c.Kind != CaseInteractive && c.Kind != CaseProduction {
		return c, bad("kind", "%q must be interactive or production", rec[1])
	}
	switch c.Destination {
	case DestCRM, DestEmail, DestPayment, DestWebhook:
	default:
		return c, bad("destination", "%q must be crm, email, payment or webhook", rec[2])
	}
	if rec[3] != "" && rec[3] != "none" {
		for _, f := range strings.Split(rec[3], ";") {
			fault, err := ParseFault(strings.TrimSpace(f))
			if err != nil {
				return c, bad("faults", "%v", err)
			}
			c.Faults = append(c.Faults, fault)
		}
		if err := checkLookupFaults(string(c.Destination), c.Destination.looksUp(), c.Faults); err != nil {
			return c, bad("faults", "%v", err)
		}
	}
	steps, err := ParseSteps(rec[4])
	if err != nil {
		return c, bad("steps", "%v", err)
	}
	c.Steps = steps
	nums := []*int{&c.Want.Attempts, &c.Want.Actions, &c.Want.Verifications, &c.Want.Events, &c.Want.Deliveries}
	for i, p := range nums {
		n, err := strconv.Atoi(rec[5+i])
		if err != nil || n < 0 {
			return c, bad(CaseColumns[5+i], "%q is not a count (0, 1, 2, …)", rec[5+i])
		}
		*p = n
	}
	c.Want.State = rec[10]
	if !validExpectedState(c.Want.State) {
		return c, bad("state", "%q is not a state (%s)", rec[10], strings.Join(expectedStates, ", "))
	}
	for i, col := range []string{"title_en", "title_es", "explanation_en", "explanation_es"} {
		if rec[11+i] == "" {
			return c, bad(col, "is empty; every case is described in English and Spanish")
		}
	}
	return c, nil
}

// expectedStates are the values of the state column: every state the
// runner can observe (world.state).
var expectedStates = []string{"awaiting_approval", "pending", "in_progress", "uncertain", "held", "succeeded",
	"failed/rejected", "failed/exhausted", "failed/cancelled", "running", "failed", StateNone}

func validExpectedState(s string) bool {
	for _, v := range expectedStates {
		if s == v {
			return true
		}
	}
	return false
}

// ParseSteps parses a ";"-separated step list (see StepVerb for the
// grammar).
func ParseSteps(s string) ([]Step, error) {
	var (
		steps    []Step
		advanced time.Duration // the advances so far: the lab clock's offset
	)
	for i, raw := range strings.Split(s, ";") {
		text := strings.Join(strings.Fields(raw), " ")
		if text == "" {
			return nil, fmt.Errorf("step %d is empty", i+1)
		}
		st, err := parseStep(text)
		if err != nil {
			return nil, fmt.Errorf("step %d %q: %w", i+1, text, err)
		}
		if st.Verb == StepAdvance {
			// The clock's offset is a duration too: past its range it
			// would wrap around and run backwards.
			if st.Duration > math.MaxInt64-advanced {
				return nil, fmt.Errorf("step %d %q: the advances add up to more than about 2562047h", i+1, text)
			}
			advanced += st.Duration
		}
		steps = append(steps, st)
	}
	return steps, nil
}

func parseStep(text string) (Step, error) {
	f := strings.Fields(text)
	st := Step{Verb: StepVerb(f[0]), Text: text}
	args := f[1:]
	want := func(n int, usage string) error {
		if len(args) != n {
			return fmt.Errorf("usage: %s", usage)
		}
		return nil
	}
	count := func(arg, what string, max int) (int, error) {
		n, err := strconv.Atoi(arg)
		if err != nil || n < 1 || n > max {
			return 0, fmt.Errorf("%s must be a whole number from 1 to %d, got %q", what, max, arg)
		}
		return n, nil
	}
	units := func(usage string, optional bool) error {
		if len(args) == 0 && optional {
			return nil
		}
		if len(args) != 1 || !strings.HasPrefix(args[0], "units=") {
			return fmt.Errorf("usage: %s", usage)
		}
		n, err := count(strings.TrimPrefix(args[0], "units="), "units", 1000)
		st.Units = n
		return err
	}
	var err error
	switch st.Verb {
	case StepSend, StepRetry:
		err = units(string(st.Verb)+" [units=N]", true)
	case StepRevise:
		err = units("revise units=N", false)
	case StepVerify, StepRestart, StepApprove, StepResume:
		err = want(0, string(st.Verb))
	case StepCrash:
		if err = want(1, "crash before_claim|after_claim|after_dispatch|after_effect|after_report"); err == nil {
			st.Point, err = ParseCrashPoint(args[0])
		}
	case StepAdvance:
		if err = want(1, "advance DURATION (e.g. 90s, 25h)"); err == nil {
			st.Duration, err = time.ParseDuration(args[0])
			switch {
			case err != nil && strings.Contains(err.Error(), "invalid duration") && durationShape.MatchString(args[0]):
				err = fmt.Errorf("advance %s is too long: at most about 2562047h", args[0])
			case err == nil && st.Duration <= 0:
				err = errors.New("advance needs a positive duration")
			}
		}
	case StepWorkers:
		if err = want(1, "workers N"); err == nil {
			st.N, err = count(args[0], "workers", 64)
		}
	case StepDeliver:
		if len(args) != 2 || args[0] != "event" {
			return st, errors.New("usage: deliver event ID")
		}
		if !eventID.MatchString(args[1]) {
			return st, fmt.Errorf("event id %q must be letters, digits, - and _", args[1])
		}
		st.Event = args[1]
	case StepWorkflow:
		if len(args) < 1 || len(args) > 2 || (len(args) == 2 && args[1] != "approval") {
			return st, errors.New("usage: workflow N [approval]")
		}
		st.N, err = count(args[0], "workflow steps", 20)
		st.Approval = len(args) == 2
	case StepRun:
		if len(args) > 1 {
			return st, errors.New("usage: run [N]")
		}
		if len(args) == 1 {
			st.N, err = count(args[0], "run", 100)
		}
	default:
		return st, fmt.Errorf("unknown step %q (send, retry, verify, crash, restart, advance, workers, deliver, workflow, run, approve, revise, resume)", f[0])
	}
	return st, err
}

var (
	caseID  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	eventID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
)
