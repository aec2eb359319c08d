package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/opledger/opledger/internal/bench"
)

func newBenchCmd() *cobra.Command {
	var (
		dsn, conc, mode, keys, cpuProfile string
		dur                               time.Duration
		asJSON                            bool
		preload, rounds                   int
		serveRSS                          int64
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure protected operations against plain INSERTs and a naive claim + complete on the same store",
		Long: `bench runs closed-loop protected operations (intent recorded and claimed in one
transaction, a no-op action, the outcome recorded; every write durable) on a fresh
ledger, after measuring the floor of one plain INSERT per operation on the same
store in the same run, at each concurrency. Without --db it uses a fresh SQLite
file; a postgres DSN gets a fresh schema, dropped afterwards. On SQLite it also
measures the batched floor: the same INSERTs from concurrent callers sharing
transactions (one fsync for many rows), the yardstick for group commit.

It also measures the reference workloads the targets are stated against, with
no opledger code: the reference, a naive claim + complete per operation in two
durable transactions (an INSERT of a claimed row, then an UPDATE of it to
done; on SQLite through one connection, each statement its own transaction,
the single writer; on PostgreSQL on the floor's pool), and on SQLite the
batched reference, the same claims and completes from concurrent callers
batched into shared transactions. Each concurrency measures the floors, then
the references, then the protected operations, each for --duration.

--rounds N measures each concurrency N times, one round after the other, and
reports the median of the rounds' figures: each ratio is computed within its
round, so a machine whose speed drifts (a shared VM) still compares
workloads it ran at the same speed. JSON also lists each round's ratio to the
floor (ratio_to_floor_rounds); its ops are summed over the rounds, counted in
measured_seconds (rounds × duration_seconds), so ops / measured_seconds is
the mean rate while ops_per_sec is the median round's. docs/performance.md
describes every JSON field.

--preload N first fills the ledger with N operations (a realistic mix of
states, each with its attempt and timeline) so that the run measures a ledger
that has been in use.

--keys random gives every operation a key of random hex, as UUIDs and hashes
are, instead of a counter (sequential, the default): keys that sort anywhere
spread a store's writes over more pages.

--mode chooses what a protected operation goes through: library (the ledger
in process: claim with the intent inline, then report), http (the HTTP API on
loopback, the same two calls) or proxy (one POST with a fresh Idempotency-Key
through the Idempotency-Key proxy on loopback, in front of a loopback upstream
that answers at once; the run fails unless the upstream received exactly one
request per protected operation). In the http and proxy modes every round
also measures the library mode on the same ledger, right before or after the
mode's own operations, and divides by it (JSON ratio_to_library).

--serve-rss N (with --mode http) measures the memory of the server instead:
it starts 'opledger serve' (this executable) as a child process on a fresh
ledger and a free loopback port, runs N protected operations through its API
at the first --concurrency, and reports the child's resident memory (VmRSS)
after N/2 and after N operations, the growth between them and its peak, then
stops it with SIGTERM. N is 2 to 100000000.

--cpu-profile FILE records where the bench process spends its CPU (the
ledger, and the HTTP server or proxy of those modes) for go tool pprof; the
database server's own CPU is not in it.`,
		Example: `  opledger bench
  opledger bench --db postgres://postgres@127.0.0.1:5432/test --concurrency 1,8,32 --duration 10s
  opledger bench --mode http --json
  opledger bench --mode proxy --concurrency 1,8,32 --duration 5s
  opledger bench --preload 1000000 --concurrency 32
  opledger bench --rounds 3 --concurrency 1,32 --duration 5s           # medians of 3 rounds
  opledger bench --keys random --concurrency 32
  opledger bench --mode http --concurrency 32 --cpu-profile cpu.out   # then: go tool pprof -top cpu.out
  opledger bench --mode http --serve-rss 1000000 --concurrency 32`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := bench.Config{DSN: dsn, Duration: dur, Mode: bench.Mode(mode), Keys: bench.Keys(keys), Preload: preload, Rounds: rounds}
			if err := nonEmptyFlags(cmd, "cpu-profile"); err != nil {
				return err
			}
			if !slices.Contains(bench.Modes, cfg.Mode) {
				return usageError{fmt.Errorf("--mode takes library, http or proxy (got %q)", mode)}
			}
			if preload < 0 {
				return usageError{fmt.Errorf("--preload must not be negative")}
			}
			if rounds < 1 || rounds > 100 {
				return usageError{fmt.Errorf("--rounds takes a whole number from 1 to 100 (got %d)", rounds)}
			}
			if !cfg.Keys.Valid() {
				return usageError{fmt.Errorf("--keys takes sequential or random (got %q)", keys)}
			}
			for _, f := range strings.Split(conc, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || n < 1 || n > 1024 {
					return usageError{fmt.Errorf("--concurrency takes whole numbers from 1 to 1024 separated by commas, e.g. 1,8,32 (got %q)", cell(strings.TrimSpace(f)))}
				}
				cfg.Concurrency = append(cfg.Concurrency, n)
			}
			if dur <= 0 {
				return usageError{fmt.Errorf("--duration must be positive, e.g. 10s")}
			}
			if cmd.Flags().Changed("serve-rss") {
				takes := fmt.Sprintf("--serve-rss N takes --mode http, no --preload, --keys or --rounds, and N from 2 to %d", bench.MaxServeRSSOps)
				if mode != string(bench.ModeHTTP) || preload != 0 || cmd.Flags().Changed("keys") || cmd.Flags().Changed("rounds") {
					return usageError{errors.New(takes)}
				}
				if serveRSS < 2 || serveRSS > bench.MaxServeRSSOps {
					return usageError{fmt.Errorf("%s (got %d)", takes, serveRSS)}
				}
				return benchServeRSS(cmd, bench.ServeRSSConfig{DSN: dsn, Ops: serveRSS, Concurrency: cfg.Concurrency[0]}, asJSON)
			}
			if f, ok := cmd.ErrOrStderr().(*os.File); ok && isatty.IsTerminal(f.Fd()) {
				// Drawn from the first report, which says how long the run is.
				var bar *progressbar.ProgressBar
				cfg.Progress = func(done, total time.Duration) {
					if bar == nil {
						bar = progressbar.NewOptions64(int64(total/time.Millisecond),
							progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("bench"), progressbar.OptionClearOnFinish())
					}
					_ = bar.Set64(int64(done / time.Millisecond))
				}
				defer func() {
					if bar != nil {
						_ = bar.Finish()
					}
				}()
			}
			if cpuProfile != "" {
				f, err := openProfile(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpu-profile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			cells, err := bench.Run(cmd.Context(), cfg)
			if err != nil {
				if cpuProfile != "" {
					// Nothing was measured: no profile is left to mislead.
					pprof.StopCPUProfile()
					_ = os.Remove(cpuProfile)
				}
				return refusedStore(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return writeJSONLines(out, cells)
			}
			return writeBenchTable(out, cells)
		},
	}
	cmd.Flags().StringVar(&dsn, "db", "", "store to measure (default: a fresh SQLite file)")
	cmd.Flags().StringVar(&conc, "concurrency", "1,8,32", "comma-separated concurrencies, each 1 to 1024")
	cmd.Flags().DurationVar(&dur, "duration", 10*time.Second, "measuring time per phase of each concurrency (floors, references and protected operations each)")
	cmd.Flags().StringVar(&mode, "mode", "library", "library (in process), http (API on loopback) or proxy (Idempotency-Key proxy on loopback)")
	cmd.Flags().StringVar(&keys, "keys", "sequential", "order of the operations' keys: sequential (a counter) or random (as UUIDs are)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per line and cell")
	cmd.Flags().IntVar(&preload, "preload", 0, "operations to load into the ledger before measuring")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "measure each concurrency this many times (1 to 100) and report the medians")
	cmd.Flags().StringVar(&cpuProfile, "cpu-profile", "", "write a CPU profile of the bench process (ledger, HTTP server and proxy included) to this file, for go tool pprof: a new file, or an earlier profile, overwritten (any other file is refused)")
	cmd.Flags().Int64Var(&serveRSS, "serve-rss", 0, "with --mode http: run N operations (2 to 100000000) through a child 'opledger serve' and report its memory")
	return cmd
}

// writeBenchTable prints the cells of one run: a line naming what was
// measured, then, for each concurrency, the protected operations and each
// workload they are compared with, one per row, with the protected
// operations' throughput divided by that workload's.
func writeBenchTable(w io.Writer, cells []bench.Cell) error {
	if len(cells) == 0 {
		return nil
	}
	first := cells[0]
	ledger := "an empty ledger"
	if first.Preload > 0 {
		ledger = fmt.Sprintf("a ledger of %d operations", first.Preload)
	}
	rounds := ""
	if first.Rounds > 1 {
		rounds = fmt.Sprintf(", medians of %d rounds", first.Rounds)
	}
	fmt.Fprintf(w, "opledger bench: %s mode, %s store, %s keys, %s%s\n\n", first.Mode, first.Store, first.Keys, ledger, rounds)
	reference := "reference: claim + complete, two transactions"
	if first.BatchedReferenceOpsPerSec > 0 {
		reference = "reference: claim + complete, single writer"
	}
	width := len(reference)
	line := func(c, name, opsPerSec, p50, p99, ratio, rss string) {
		fmt.Fprintln(w, strings.TrimRight(fmt.Sprintf("%4s  %-*s  %8s  %7s  %7s  %11s  %6s", c, width, name, opsPerSec, p50, p99, ratio, rss), " "))
	}
	line("c", "workload", "ops/s", "p50 ms", "p99 ms", "protected ÷", "rss MB")
	for _, c := range cells {
		n := strconv.Itoa(c.Concurrency)
		line(n, "protected operations", fmt.Sprintf("%.0f", c.OpsPerSec), fmt.Sprintf("%.2f", c.P50ms),
			fmt.Sprintf("%.2f", c.P99ms), "", fmt.Sprintf("%.0f", c.RSSMB))
		row := func(name string, opsPerSec, p99ms, ratio float64) {
			if opsPerSec > 0 {
				line(n, name, fmt.Sprintf("%.0f", opsPerSec), "", fmt.Sprintf("%.2f", p99ms), fmt.Sprintf("%.2f", ratio), "")
			}
		}
		row("floor: one plain INSERT", c.FloorOpsPerSec, c.FloorP99ms, c.RatioToFloor)
		row("batched floor", c.BatchedFloorOpsPerSec, c.BatchedFloorP99ms, c.RatioToBatchedFloor)
		row(reference, c.ReferenceOpsPerSec, c.ReferenceP99ms, c.RatioToReference)
		row("batched reference", c.BatchedReferenceOpsPerSec, c.BatchedReferenceP99ms, c.RatioToBatchedReference)
		row("library: the same operations in process", c.LibraryOpsPerSec, c.LibraryP99ms, c.RatioToLibrary)
	}
	return nil
}

// benchServeRSS runs bench --serve-rss and prints its one result.
// refusedStore makes the bench's refusal of a --db file that already
// exists (bench.ErrNotFresh) a usage error.
func refusedStore(err error) error {
	if errors.Is(err, bench.ErrNotFresh) {
		return usageError{err}
	}
	return err
}

func benchServeRSS(cmd *cobra.Command, cfg bench.ServeRSSConfig, asJSON bool) error {
	if f, ok := cmd.ErrOrStderr().(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		bar := progressbar.NewOptions64(cfg.Ops, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription("bench"),
			progressbar.OptionClearOnFinish())
		cfg.Progress = func(done, _ int64) { _ = bar.Set64(done) }
		defer bar.Finish()
	}
	r, err := bench.ServeRSS(cmd.Context(), cfg)
	if err != nil {
		return refusedStore(err)
	}
	out := cmd.OutOrStdout()
	if asJSON {
		return writeJSONLines(out, []*bench.ServeRSSResult{r})
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tstore\tc\tops\tops/s\tp50 ms\tp99 ms\tserve rss MB at N/2\tat N\tgrowth %\tpeak MB\t")
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.0f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", r.Mode, r.Store, r.Concurrency, r.Ops,
		r.OpsPerSec, r.P50ms, r.P99ms, r.RSSHalfMB, r.RSSEndMB, r.RSSGrowthPct, r.RSSPeakMB)
	return tw.Flush()
}

// openProfile creates the file of --cpu-profile, or truncates an earlier
// profile there. Any other file is refused and left as it is: a path
// mistyped for the ledger's own file must not empty it.
func openProfile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if !errors.Is(err, fs.ErrExist) {
		if err != nil {
			return nil, fmt.Errorf("--cpu-profile: %w", err)
		}
		return f, nil
	}
	old, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	head := make([]byte, 2)
	n, _ := io.ReadFull(old, head)
	_ = old.Close()
	// A profile is gzip-compressed; an empty file holds nothing to lose.
	if n > 0 && !(n == 2 && head[0] == 0x1f && head[1] == 0x8b) {
		return nil, usageError{fmt.Errorf("--cpu-profile %s exists and is not a CPU profile: give a new file (an earlier profile is overwritten)", path)}
	}
	if f, err = os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0); err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	return f, nil
}
