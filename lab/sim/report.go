package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger/lab"
)

// Report is what one run did and which invariants it broke.
type Report struct {
	Seed       int64  `json:"seed"`
	Workers    int    `json:"workers"`
	Operations int    `json:"operations"`
	Steps      int    `json:"steps"`
	Store      string `json:"store"`
	// Digest is the SHA-256 of the event trace: equal for two runs of
	// one seed.
	Digest string `json:"digest"`
	// SimulatedTime is how far the simulated clock moved.
	SimulatedTime time.Duration `json:"simulated_time"`
	// DrainRounds is how many simulated minutes the drain took.
	DrainRounds int `json:"drain_rounds"`

	// States counts the operations by final state.
	States map[string]int `json:"states"`
	// Faults counts the injected destination faults by name.
	Faults map[string]int `json:"faults"`
	// Crashes counts the worker crashes by crash point.
	Crashes map[string]int `json:"crashes"`
	// Destinations are each destination's counters.
	Destinations map[string]lab.Counters `json:"destinations"`

	// Calls the workers made to destinations.
	Calls int `json:"calls"`
	// LateCalls are calls made after their attempt's lease had expired (a
	// worker paused between dispatch mark and call).
	LateCalls int `json:"late_calls"`
	// DispatchedAttempts are the ledger's attempts with a dispatch mark.
	DispatchedAttempts int `json:"dispatched_attempts"`
	// DispatchedNotCalled are attempts whose worker crashed between the
	// dispatch mark and the call, or skipped the call because the claim's
	// protection window (Claim.ProtectedUntil) had closed.
	DispatchedNotCalled int `json:"dispatched_not_called"`
	// FailedLookups are the CRM's lookups that failed
	// (lab.FaultLookupError): each left its operation uncertain or held
	// (DecidedOnFailedLookup).
	FailedLookups int `json:"failed_lookups"`
	// StaleReports are reports refused for a stale fencing token (kept as
	// evidence).
	StaleReports int `json:"stale_reports"`
	// Effects the destinations made; ConfirmedEffects are the succeeded
	// operations; DuplicatesDetected the duplicate effects the ledger
	// recorded from late reports.
	Effects            int `json:"effects"`
	ConfirmedEffects   int `json:"confirmed_effects"`
	DuplicatesDetected int `json:"duplicates_detected"`
	// Events, Deliveries and DuplicateDeliveries as the ledger counted them.
	Events              int `json:"events"`
	Deliveries          int `json:"deliveries"`
	DuplicateDeliveries int `json:"duplicate_deliveries"`

	// Violations are the broken invariants; empty for a good run.
	Violations []*Violation `json:"violations"`
	// Trace is the event trace, when Config.KeepTrace was set.
	Trace []string `json:"trace,omitempty"`
}

func newReport(c Config) *Report {
	return &Report{Seed: c.Seed, Workers: c.Workers, Operations: c.Operations, Steps: c.Steps,
		States: map[string]int{}, Faults: map[string]int{}, Crashes: map[string]int{},
		Destinations: map[string]lab.Counters{}, Violations: []*Violation{}}
}

// OK reports whether every invariant held.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Unknown are the violations that are not known bugs (see KnownBugs).
func (r *Report) Unknown() []*Violation {
	var out []*Violation
	for _, v := range r.Violations {
		if !v.Known() {
			out = append(out, v)
		}
	}
	return out
}

// Err joins the violations, nil when every invariant held. errors.Is
// matches each violated Invariant.
func (r *Report) Err() error {
	errs := make([]error, len(r.Violations))
	for i, v := range r.Violations {
		errs[i] = v
	}
	return errors.Join(errs...)
}

// ReplayCommand is the command that replays this run.
func (r *Report) ReplayCommand() string {
	return fmt.Sprintf("go test ./lab/sim -run 'TestSim$' -seed %d -workers %d -ops %d   (or: opledger lab sim --seed %d --workers %d --ops %d)",
		r.Seed, r.Workers, r.Operations, r.Seed, r.Workers, r.Operations)
}

// JSON encodes the report.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

// String summarizes the report for people.
func (r *Report) String() string {
	var b strings.Builder
	verdict := "ok"
	if !r.OK() {
		verdict = fmt.Sprintf("%d VIOLATIONS", len(r.Violations))
	}
	fmt.Fprintf(&b, "seed %d: %s (%d workers, %d operations, %s store, %s simulated, digest %.12s)\n",
		r.Seed, verdict, r.Workers, r.Operations, r.Store, r.SimulatedTime, r.Digest)
	fmt.Fprintf(&b, "  states: %s\n", counts(r.States))
	fmt.Fprintf(&b, "  faults: %s; crashes: %s\n", counts(r.Faults), counts(r.Crashes))
	fmt.Fprintf(&b, "  calls %d (%d after their lease), dispatched attempts %d (%d crashed before the call), stale reports %d, failed lookups %d\n",
		r.Calls, r.LateCalls, r.DispatchedAttempts, r.DispatchedNotCalled, r.StaleReports, r.FailedLookups)
	fmt.Fprintf(&b, "  effects %d, confirmed %d, duplicates detected by the ledger %d\n", r.Effects, r.ConfirmedEffects, r.DuplicatesDetected)
	fmt.Fprintf(&b, "  events %d, deliveries %d (%d duplicates)\n", r.Events, r.Deliveries, r.DuplicateDeliveries)
	for _, v := range r.Violations {
		mark := ""
		if v.Known() {
			mark = " [known bug]"
		}
		fmt.Fprintf(&b, "  VIOLATION %s%s\n", v.Error(), mark)
	}
	if !r.OK() {
		fmt.Fprintf(&b, "  replay: %s\n", r.ReplayCommand())
	}
	return b.String()
}

// counts writes a map as "a=1 b=2", sorted.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k, n := range m {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return "none"
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
