package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/lab/sim"
)

func newLabCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Play the interactive scenarios and run the case file against the real ledger",
		Long: `lab shows what the ledger does when things go wrong, against simulated
destinations (a CRM with a lookup, an e-mail provider without one, a payment
provider with idempotency keys) and the real ledger.

  lab scenario NAME  plays one interactive scenario step by step
  lab run FILE       runs every case of a case file and compares the counters
  lab sim            runs the deterministic simulation for many seeds
  lab destinations   serves the simulated destinations over HTTP, for serve`,
		Example: `  opledger lab scenario lost-response
  opledger lab run lab/cases.csv
  opledger lab run lab/cases.csv --db postgres://postgres@127.0.0.1:5432/test --json
  opledger lab sim --seeds 50`,
	}
	cmd.AddCommand(newLabScenarioCmd(), newLabRunCmd(), newLabSimCmd(), newLabDestinationsCmd(), newLabWorkerCmd())
	return cmd
}

func newLabDestinationsCmd() *cobra.Command {
	var addr, dir string
	cmd := &cobra.Command{
		Use:   "destinations --config-dir DIR",
		Short: "Serve the simulated CRM, e-mail and payment providers over HTTP, with faults on demand, for serve to send to",
		Long: `destinations serves the lab's three simulated destinations on --addr until
Ctrl-C: a CRM with an authoritative lookup and a unique reference, an e-mail
provider with neither, and a payment provider with idempotency keys. It writes
into --config-dir a destinations.yaml that sends to them, and an opledger.yaml
naming it, so that 'opledger serve --config DIR/opledger.yaml' runs its executor
and reconciler against them. POST /NAME/faults with a JSON list of faults makes
the next calls to that destination misbehave (a lost response, a 429, a 5xx
after the effect, …), or, with lookup_error, the CRM's next lookups fail;
GET /NAME/counters says how many calls and lookups it received and how many
effects it made. Files in --config-dir are never overwritten: a run on
the same --addr keeps those an earlier one wrote, another address needs another
directory.`,
		Example: `  opledger lab destinations --config-dir /tmp/lab --addr 127.0.0.1:9100 &
  opledger serve --config /tmp/lab/opledger.yaml --db sqlite:/tmp/lab/ledger.db
  curl -X POST http://127.0.0.1:9100/crm/faults -d '["lost_response"]'`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return usageError{errors.New("--config-dir is required: where to write destinations.yaml and opledger.yaml for serve")}
			}
			ln, err := listenFirst("addr", addr)
			if err != nil {
				return err
			}
			defer ln.Close()
			served := lab.NewServed()
			base := "http://" + ln.Addr().String()
			files := map[string]string{
				"destinations.yaml": served.DestinationsYAML(base),
				"opledger.yaml":     "# opledger serve --config " + filepath.Join(dir, "opledger.yaml") + "\ndestinations: destinations.yaml\n",
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return fmt.Errorf("--config-dir: %w", err)
			}
			for _, name := range []string{"destinations.yaml", "opledger.yaml"} {
				path := filepath.Join(dir, name)
				f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
				if errors.Is(err, os.ErrExist) {
					// Written by an earlier run on the same address: kept.
					if old, rerr := os.ReadFile(path); rerr == nil && string(old) == files[name] {
						continue
					}
					return usageError{fmt.Errorf("--config-dir: %s exists already, with other content (another --addr?): give another directory (nothing is overwritten)", path)}
				}
				if err != nil {
					return fmt.Errorf("--config-dir: %w", err)
				}
				_, err = f.WriteString(files[name])
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					return fmt.Errorf("--config-dir: %w", err)
				}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "serving the crm, email and payment destinations at %s\n"+
				"files for serve: %s and %s\nnext: opledger serve --config %s --db sqlite:%s\n"+
				"faults: curl -X POST %s/crm/faults -d '[\"lost_response\"]'; counters: curl %s/crm/counters\n",
				base, filepath.Join(dir, "destinations.yaml"), filepath.Join(dir, "opledger.yaml"), filepath.Join(dir, "opledger.yaml"),
				filepath.Join(dir, "ledger.db"), base, base)
			srv := &http.Server{Handler: served.Handler(), ReadHeaderTimeout: 10 * time.Second}
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return srv.Shutdown(ctx)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:9100", "where to serve them (HOST:PORT)")
	cmd.Flags().StringVar(&dir, "config-dir", "", "directory to write destinations.yaml and opledger.yaml into (required)")
	return cmd
}

func newLabScenarioCmd() *cobra.Command {
	var (
		dsn    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "scenario normal|changed-data|lost-response",
		Short: "Play an interactive scenario and print each step, the counters and the state",
		Long: `scenario plays the script of one interactive scenario on the order "prepare 2
units of DEMO-ORDER-017" (operation key DEMO-OP-017), sent to a simulated CRM:

  normal         send, then repeat: the repeat is answered from the ledger
  changed-data   send 2 units, then "retry" with 3: refused, the original kept
  lost-response  the CRM acts but its answer is lost: retry (held back),
                 verify (a lookup finds the record), retry (the confirmed result)

After each step it prints the three counters — requests (the automation's
requests to opledger, answered from the ledger or not: not the operation's
attempts, which are opledger's calls to the CRM), actions (records the CRM
created) and verifications (lookups at the CRM) — the operation's state and
one sentence on what happened.

Without --db the steps run on a fresh SQLite file in a temporary directory,
removed afterwards. With --db they run on the ledger it names, under a
tenant of their own ("lab-" and random hex): they never touch other
operations, but they stay in that ledger and count in its metrics.`,
		Example: `  opledger lab scenario lost-response
  opledger lab scenario changed-data --db sqlite:lab.db
  opledger lab scenario normal --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{fmt.Errorf("name one scenario: %s", strings.Join(lab.ScenarioNames(), ", "))}
			}
			if _, ok := lab.FindScenario(args[0]); !ok {
				return usageError{fmt.Errorf("unknown scenario %q (want %s)", args[0], strings.Join(lab.ScenarioNames(), ", "))}
			}
			return nil
		},
		ValidArgs: lab.ScenarioNames(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if dsn == "" {
				dir, err := os.MkdirTemp("", "opledger-lab-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				dsn = "sqlite:" + filepath.Join(dir, "lab.db")
			}
			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			if err != nil {
				return refusedDB(err)
			}
			defer l.Close()
			p, err := lab.NewPlayground(ctx, l, args[0])
			if err != nil {
				return err
			}
			steps, err := p.Replay(ctx)
			out := cmd.OutOrStdout()
			if asJSON {
				if werr := writeJSONLines(out, steps); werr != nil {
					return werr
				}
				return err
			}
			s := p.Scenario()
			fmt.Fprintf(out, "%s — %s\n%s\n(operation %s in tenant %s)\n\n", s.Title, s.Name, s.Summary, lab.OperationKey, p.Tenant())
			for _, r := range steps {
				fmt.Fprintf(out, "%d. %s\n   requests %d · actions %d · verifications %d · state %s\n   %s\n",
					r.N, r.Label, r.Counters.Attempts, r.Counters.Actions, r.Counters.Verifications, r.State, r.Explanation)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dsn, "db", "", "ledger store: sqlite:PATH or postgres://… (default: a fresh SQLite file, removed afterwards)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line and step")
	return cmd
}

func newLabRunCmd() *cobra.Command {
	var (
		dsn                        string
		asJSON, inProcess, explain bool
		only                       []string
	)
	cmd := &cobra.Command{
		Use:   "run FILE",
		Short: "Run every case of a case file against the real ledger and compare the counters",
		Long: `run reads a case file (CSV, see docs/lab.md "The case file"), plays every case
on a fresh ledger — a new SQLite file in a temporary directory, or with --db a
new schema on that PostgreSQL server, dropped afterwards — and prints, per case,
the expected and observed counters (attempts, actions, verifications, events,
deliveries) and final state.

Crashes and concurrent workers run for real. Concurrent workers are goroutines
claiming against the real store. A crash is a separate worker process (this
binary, re-executed) that claims, dispatches and calls the destination (served
over HTTP on loopback) up to its crash point, where it is killed with SIGKILL:
it never reports, and its lease expires when the lab clock is advanced.
--crash-in-process plays crashes in this process instead (a worker that stops
at the crash point and is abandoned).

Exit status: 0 when every case is as expected, 1 when any differs, 2 when the
file is malformed (the message names the line).`,
		Example: `  opledger lab run lab/cases.csv
  opledger lab run lab/cases.csv --case lost-response,crash-after-dispatch --explain
  opledger lab run lab/cases.csv --db postgres://postgres@127.0.0.1:5432/test
  opledger lab run lab/cases.csv --json | jq 'select(.pass | not)'`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError{errors.New("name one case file, e.g. lab/cases.csv")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return usageError{err}
			}
			cases, err := lab.ParseCases(f)
			f.Close()
			if err != nil {
				return usageError{fmt.Errorf("%s: %w", args[0], err)}
			}
			if cmd.Flags().Changed("case") && len(only) == 0 {
				return usageError{errors.New("--case is empty: give case ids, or leave the flag out to run every case")}
			}
			if cases, err = onlyCases(cases, only); err != nil {
				return err
			}
			opts := lab.RunOptions{DSN: dsn}
			if !inProcess {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("find this executable for the worker processes: %w", err)
				}
				opts.WorkerCommand = []string{exe, "lab", "worker"}
			}
			if set, finish := progress(cmd, len(cases), "lab run"); set != nil {
				opts.Progress = func(done, _ int) { set(done) }
				defer finish()
			}
			results, runErr := lab.RunCases(cmd.Context(), cases, opts)
			if runErr != nil && len(results) == 0 {
				return runErr
			}
			// A run stopped partway (Ctrl-C, a store that could not be
			// made) still shows the cases that ran before saying why.
			out := cmd.OutOrStdout()
			if asJSON {
				if err := writeJSONLines(out, results); err != nil {
					return err
				}
			} else if err := printCaseTable(out, results, explain); err != nil {
				return err
			}
			if runErr != nil {
				return fmt.Errorf("stopped after %d of %d cases: %w", len(results), len(cases), runErr)
			}
			var failed []string
			for _, r := range results {
				if !r.Pass {
					failed = append(failed, r.Case.ID)
				}
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d cases differ from what %s expects: %s", len(failed), len(results), args[0], strings.Join(failed, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dsn, "db", "", "PostgreSQL server to run on, a fresh schema per case (default: a fresh SQLite file per case)")
	_ = cmd.Flags().SetAnnotation("db", postgresOnly, []string{"takes a postgres:// URL (each case gets a fresh schema there); without it each case gets a fresh SQLite file"})
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line and case")
	cmd.Flags().BoolVar(&inProcess, "crash-in-process", false, "play crash steps in this process instead of killing a worker process")
	cmd.Flags().BoolVar(&explain, "explain", false, "after the table, every case's title, explanation and steps (a case that differs shows them anyway)")
	cmd.Flags().StringSliceVar(&only, "case", nil, "run only these cases (ids, comma-separated)")
	return cmd
}

// onlyCases keeps the cases whose id is in ids (all of them when ids is
// empty), in the file's order; an id the file lacks is a usage error.
func onlyCases(cases []lab.Case, ids []string) ([]lab.Case, error) {
	if len(ids) == 0 {
		return cases, nil
	}
	var kept []lab.Case
	var known []string
	for _, c := range cases {
		known = append(known, c.ID)
		if slices.Contains(ids, c.ID) {
			kept = append(kept, c)
		}
	}
	for _, id := range ids {
		if !slices.Contains(known, id) {
			return nil, usageError{fmt.Errorf("--case: the file has no case %q (cases: %s)", id, strings.Join(known, ", "))}
		}
	}
	return kept, nil
}

// newLabWorkerCmd is the hidden worker process of "lab run": one attempt,
// killed by its parent at the crash point.
func newLabWorkerCmd() *cobra.Command {
	var (
		a                      lab.WorkerArgs
		crash, intent, clockAt string
	)
	cmd := &cobra.Command{
		Use:    "worker",
		Short:  "A worker process for lab run's crash steps (internal)",
		Hidden: true,
		Args:   noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if a.Crash, err = lab.ParseCrashPoint(crash); err != nil {
				return usageError{err}
			}
			if a.ClockAt, err = time.Parse(time.RFC3339Nano, clockAt); err != nil {
				return usageError{fmt.Errorf("--clock-at: %w", err)}
			}
			if intent != "" {
				a.Intent = new(opledger.Intent)
				if err := json.Unmarshal([]byte(intent), a.Intent); err != nil {
					return usageError{fmt.Errorf("--intent: %w", err)}
				}
			}
			return lab.RunWorker(cmd.Context(), a, cmd.OutOrStdout(), cmd.InOrStdin())
		},
	}
	cmd.Flags().StringVar(&a.DSN, "db", "", "ledger store")
	cmd.Flags().StringVar(&a.Tenant, "tenant", "lab", "tenant")
	cmd.Flags().StringVar(&a.URL, "url", "", "the destination's create endpoint")
	cmd.Flags().StringVar(&crash, "crash", "", "crash point")
	cmd.Flags().StringVar(&intent, "intent", "", "intent to record and claim (JSON); default: claim the next due operation")
	cmd.Flags().StringVar(&clockAt, "clock-at", "", "the lab clock's time (RFC 3339)")
	return cmd
}

// progress returns a progress bar's setter and finisher when stderr is a
// terminal (as bench does), and nils when it is piped.
func progress(cmd *cobra.Command, total int, desc string) (func(done int), func()) {
	f, ok := cmd.ErrOrStderr().(*os.File)
	if !ok || !isatty.IsTerminal(f.Fd()) {
		return nil, nil
	}
	bar := progressbar.NewOptions(total, progressbar.OptionSetWriter(f),
		progressbar.OptionSetDescription(desc), progressbar.OptionClearOnFinish())
	return func(done int) { _ = bar.Set(done) }, func() { _ = bar.Finish() }
}

func newLabSimCmd() *cobra.Command {
	var (
		seeds, workers, ops int
		seed                int64
		strict, asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Run the deterministic simulation (package lab/sim) for many seeds and check its invariants",
		Long: `sim runs the deterministic simulation of package lab/sim: simulated workers, the
real reconciler and the lab's destinations against the real ledger on a fresh
SQLite store, on a simulated clock, with faults, crashes and duplicate
deliveries chosen by a seed. One seed is one exact run (same trace digest).

--seeds N runs seeds 1…N (N up to 1000000); --seed S runs only seed S (to
replay a failure). --workers takes 1 to 1000, --ops 1 to 100000.
Each run's invariants are checked. Violations of known bugs (sim.KnownBugs)
are reported but fail the command only with --strict.

Exit status: 0 when no run broke an invariant (other than known bugs), 1
otherwise.`,
		Example: `  opledger lab sim --seeds 100
  opledger lab sim --seed 17 --workers 4 --ops 30
  opledger lab sim --seeds 20 --json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Each count below 1 is named; --seeds does not apply with --seed.
			counts := []string{"workers", "ops"}
			if !cmd.Flags().Changed("seed") {
				counts = append([]string{"seeds"}, counts...)
			}
			if err := positiveFlags(cmd, counts...); err != nil {
				return err
			}
			if cmd.Flags().Changed("seed") && cmd.Flags().Changed("seeds") {
				return usageError{errors.New("--seed runs one seed and --seeds runs seeds 1…N: give one of them")}
			}
			for _, f := range []struct {
				name     string
				got, max int
			}{{"--seeds", seeds, maxSimSeeds}, {"--workers", workers, maxSimWorkers}, {"--ops", ops, maxSimOps}} {
				if f.got > f.max {
					return usageError{fmt.Errorf("%s takes at most %d (got %d)", f.name, f.max, f.got)}
				}
			}
			// Seeds first, first+1, …: counted, not listed, so that no
			// allocation is sized by the flag.
			first, n := int64(1), seeds
			if cmd.Flags().Changed("seed") {
				first, n = seed, 1
			}
			set, finish := progress(cmd, n, "lab sim")
			out := cmd.OutOrStdout()
			var failed, known []int64
			for i := range n {
				s := first + int64(i)
				rep, err := sim.Run(cmd.Context(), sim.Config{Seed: s, Workers: workers, Operations: ops})
				if err != nil {
					if finish != nil {
						finish()
					}
					return fmt.Errorf("seed %d: %w", s, err)
				}
				if set != nil {
					set(i + 1)
				}
				switch {
				case len(rep.Unknown()) > 0 || (strict && !rep.OK()):
					failed = append(failed, s)
				case !rep.OK():
					known = append(known, s)
				}
				if asJSON {
					b, err := json.Marshal(rep)
					if err != nil {
						return err
					}
					fmt.Fprintln(out, string(b))
				} else if rep.OK() {
					fmt.Fprint(out, strings.SplitAfter(rep.String(), "\n")[0])
				} else {
					fmt.Fprint(out, rep.String())
				}
			}
			if finish != nil {
				finish()
			}
			if !asJSON {
				seeds := "seeds"
				if n == 1 {
					seeds = "seed"
				}
				fmt.Fprintf(out, "%d %s: %d broke an invariant, %d hit only known bugs\n", n, seeds, len(failed), len(known))
			}
			if len(failed) > 0 {
				return fmt.Errorf("%d of %d seeds broke an invariant: %s", len(failed), n, joinSeeds(failed))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&seeds, "seeds", 100, "run seeds 1…N (N up to 1000000)")
	cmd.Flags().Int64Var(&seed, "seed", 0, "run only this seed (replay)")
	cmd.Flags().IntVar(&workers, "workers", 3, "simulated workers per run (1 to 1000)")
	cmd.Flags().IntVar(&ops, "ops", 20, "operations per run (1 to 100000)")
	cmd.Flags().BoolVar(&strict, "strict", false, "fail on violations of known bugs too")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON report per line and seed")
	return cmd
}

// The upper bounds of lab sim's counts: far beyond a useful run, and
// short of one that would exhaust memory (each operation is a queued
// event and a ledger row, each worker a simulated process).
const (
	maxSimSeeds   = 1_000_000
	maxSimWorkers = 1000
	maxSimOps     = 100_000
)

func joinSeeds(seeds []int64) string {
	parts := make([]string, len(seeds))
	for i, s := range seeds {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, ", ")
}

// printCaseTable prints expected/observed per counter, one case a line,
// and below it each case that differs, with its differences and steps,
// or with explain every case, with its title and explanation too.
func printCaseTable(w io.Writer, results []lab.CaseResult, explain bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tkind\tattempts\tactions\tverifications\tevents\tdeliveries\tstate\tresult")
	pair := func(want, got int) string {
		if want == got {
			return fmt.Sprintf("%d/%d", want, got)
		}
		return fmt.Sprintf("%d/%d ✗", want, got)
	}
	for _, r := range results {
		want, got := r.Case.Want, r.Got
		state := want.State
		if want.State != got.State {
			state = "want " + want.State + ", got " + orNone(got.State) + " ✗"
		}
		result := "ok"
		if !r.Pass {
			result = "DIFFERS"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Case.ID, r.Case.Kind,
			pair(want.Attempts, got.Attempts), pair(want.Actions, got.Actions), pair(want.Verifications, got.Verifications),
			pair(want.Events, got.Events), pair(want.Deliveries, got.Deliveries), state, result)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "(counters are expected/observed)")
	for _, r := range results {
		if r.Pass && !explain {
			continue
		}
		switch {
		case explain:
			fmt.Fprintf(w, "\n%s (line %d): %s\n  %s\n", r.Case.ID, r.Case.Line, r.Case.TitleEN, r.Case.ExplanationEN)
			if !r.Pass {
				fmt.Fprintf(w, "  DIFFERS: %s\n", strings.Join(r.Differences, "; "))
			}
		default:
			fmt.Fprintf(w, "\n%s (line %d): %s\n", r.Case.ID, r.Case.Line, strings.Join(r.Differences, "; "))
		}
		for _, s := range r.Steps {
			fmt.Fprintf(w, "  %s → %s: %s\n", s.Step, s.State, s.Explanation)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "nothing"
	}
	return s
}
