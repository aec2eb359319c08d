package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/server"
)

// logLevels are the levels --log-level takes, in any case.
var logLevels = map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warn": slog.LevelWarn, "error": slog.LevelError}

// newLogger builds the process logger: text for people, JSON with --log-json.
func newLogger(w io.Writer, json bool, level string) (*slog.Logger, error) {
	// Only the documented names: slog would also take "error+100" or
	// "INFO-4".
	lvl, ok := logLevels[strings.ToLower(level)]
	if !ok {
		return nil, usageError{fmt.Errorf("--log-level must be debug, info, warn or error, got %q", level)}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return slog.New(slog.NewTextHandler(w, opts)), nil
}

// logMigrations logs each schema migration that opening the ledger
// applies (all of them in one transaction, committed once the last is
// done): a large ledger's upgrade can take minutes, during which the
// process answers nothing. A new ledger, whose migrations start from the
// first, has nothing to upgrade: one line says it was created, and its
// migrations are logged at DEBUG.
func logMigrations(log *slog.Logger) func(done, total int, name string) {
	created := false
	return func(done, total int, name string) {
		created = created || done == 1 && strings.HasPrefix(name, "001_")
		switch {
		case !created:
			log.Info("migrating the ledger's schema", "migration", name, "done", done, "of", total)
		case done == total:
			log.Info("created the ledger's schema", "migrations", total)
		default:
			log.Debug("creating the ledger's schema", "migration", name, "done", done, "of", total)
		}
	}
}

// MaxWorkers is the largest --workers taken: each worker is a goroutine
// that claims from the store and calls a destination, and more than this
// in one process would mostly wait for the store's connections (16 by
// default on PostgreSQL, one writer on SQLite); a typo (--workers 40000)
// would start them all. Run more processes instead.
const MaxWorkers = 1000

// MinSweepInterval is the shortest --sweep-interval taken: each sweep
// reads the store for expired leases, due workflows and uncertain
// operations, and a shorter interval would keep the store busy with
// sweeps and little else.
const MinSweepInterval = 100 * time.Millisecond

// MinLease is the shortest --lease taken: a worker through the API names
// its lease in whole seconds, and the executor's call limit is two
// thirds of it, so a shorter one (1ns typed for 1m) would let every claim
// that names none expire before its call could be made, each call cut
// short and left uncertain.
const MinLease = time.Second

// MinCompactInterval is the shortest --compact-interval taken: each
// retention run reads every step of retention over the whole store,
// and a run that takes longer than the interval is followed by the next
// at once, so a tiny one keeps the store busy with retention and little
// else. Nothing becomes due sooner than MinRetention (and
// MinTombstoneRetention) after it finished: a run more often than that
// finds little to do.
const MinCompactInterval = time.Minute

func newServeCmd() *cobra.Command {
	var (
		dsn, addr, level, configPath string
		logJSON, secureCookie        bool
		maxBody                      int64
		workers                      int
		lease, sweep, metricsMaxAge  time.Duration
		compactInterval              time.Duration
		lf                           ledgerFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the HTTP API server",
		Long: `serve runs the HTTP API (docs/api.md), /healthz, /readyz and /metrics,
and the background loops that settle expired leases and apply retention. Every
API request needs a bearer token: create one with 'opledger tokens create'.

SIGTERM or Ctrl-C stops accepting connections and lets in-flight requests
finish; every write a client got an answer for is already committed.`,
		Example: `  opledger serve --addr 127.0.0.1:8080 --db sqlite:opledger.db
  opledger serve --db postgres://opledger@db:5432/opledger --log-json
  STRIPE_WEBHOOK_SECRET=whsec_… opledger serve --config opledger.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logJSON, level)
			if err != nil {
				return err
			}
			if err := positiveFlags(cmd, "workers", "lease", "sweep-interval", "compact-interval", "max-body-bytes"); err != nil {
				return err
			}
			if workers > MaxWorkers {
				return usageError{fmt.Errorf("--workers takes at most %d (got %d)", MaxWorkers, workers)}
			}
			if lease < MinLease {
				return usageError{fmt.Errorf("--lease must be at least %s, got %s", MinLease, lease)}
			}
			if lease > opledger.MaxLease {
				return usageError{fmt.Errorf("--lease must be at most %s, got %s", opledger.MaxLease, lease)}
			}
			if sweep < MinSweepInterval {
				return usageError{fmt.Errorf("--sweep-interval must be at least %s, got %s", MinSweepInterval, sweep)}
			}
			if compactInterval < MinCompactInterval {
				return usageError{fmt.Errorf("--compact-interval must be at least %gm, got %s", MinCompactInterval.Minutes(), compactInterval)}
			}
			if err := nonEmptyFlags(cmd, "config"); err != nil {
				return err
			}
			if metricsMaxAge < 0 {
				return usageError{fmt.Errorf("--metrics-max-age must be 0 (read on every scrape) or more, got %s", metricsMaxAge)}
			}
			cfg := server.Config{Logger: log, Workers: workers, Lease: lease, SweepInterval: sweep, CompactInterval: compactInterval, SecureCookie: secureCookie}
			// --lease is the lease of every claim that names none: the
			// executor's and those of workers through the API.
			opts := opledger.Options{Lease: lease}
			if err := lf.apply(&opts); err != nil {
				return err
			}
			cfg.Settings = server.NoSharedSettings()
			destinationsPath := ""
			var fileConfig *server.FileConfig
			if configPath != "" {
				fc, err := server.LoadConfig(configPath)
				if err != nil {
					return err
				}
				fileConfig = fc
				destinationsPath = fc.DestinationsPath()
				// The destinations file and the rules file are both read
				// before either is refused, so that one refusal names
				// every problem of the two (oneLine joins them with "; "),
				// in the order the configuration file documents them.
				var destErr error
				if cfg.Destinations, destErr = fc.LoadDestinations(destination.LoadOptions{}); destErr != nil {
					destErr = fmt.Errorf("config destinations: %w", destErr)
				} else if cfg.Destinations != nil {
					opts.DestinationRetryPolicies = cfg.Destinations.RetryPolicies()
					opts.DestinationTenants = cfg.Destinations.Tenants()
				}
				var apiErr, approvalErr, ownersErr error
				cfg.API, apiErr = fc.APIOptions()
				opts.DestinationsRequiringApproval, approvalErr = fc.ApprovalDestinations()
				opts.DestinationOwners, ownersErr = fc.DestinationOwners()
				if err := errors.Join(destErr, apiErr, approvalErr, ownersErr); err != nil {
					return err
				}
				// The text of the files just loaded, not read again.
				if cfg.Settings, err = fc.SharedSettings(); err != nil {
					return err
				}
				// A misspelt destination name would leave the destination
				// meant without its approval or owner: said at start.
				for _, w := range fc.DestinationNameWarnings(cfg.Destinations) {
					log.Warn("a destination name of the configuration file is near one of the destinations file", "problem", w)
				}
			}
			// What server.New would refuse (a destination timeout the
			// executor's call limit would cut), refused before the ledger
			// is opened.
			if err := server.CheckConfig(cfg); err != nil {
				if destinationsPath != "" && cfg.Destinations != nil {
					// A destination's timeout: said of the file it is in,
					// at its line, as the other errors of the file are.
					at := ""
					if te, ok := errors.AsType[*executor.DestinationTimeoutError](err); ok && fileConfig != nil {
						if line := fileConfig.DestinationLine(te.Destination); line > 0 {
							at = fmt.Sprintf("line %d: ", line)
						}
					}
					return fmt.Errorf("config destinations: %s: %s%w", destinationsPath, at, err)
				}
				return err
			}
			cfg.API.MaxBodyBytes = maxBody
			cfg.API.MetricsMaxAge = metricsMaxAge
			if metricsMaxAge == 0 {
				cfg.API.MetricsMaxAge = -1 // every scrape; zero in Options means the default
			}
			// Listened on before the ledger is opened, which may create it.
			if cfg.Listener, err = listenFirst("addr", addr); err != nil {
				return err
			}
			defer cfg.Listener.Close() // Run closes it too; once more is harmless
			opts.MigrationProgress = logMigrations(log)
			l, err := openLedger(cmd.Context(), dsn, opts, func(msg string) { log.Warn(msg) })
			if err != nil {
				return refusedDB(err)
			}
			defer l.Close()
			// Said once the policy is in force: a server that refuses its
			// configuration, its address or its store does not announce it.
			if len(opts.DestinationsRequiringApproval) > 0 {
				log.Info("every operation for these destinations waits for approval", "destinations", opts.DestinationsRequiringApproval)
			}
			srv, err := server.New(l, cfg)
			if err != nil {
				return err
			}
			return srv.Run(cmd.Context())
		},
	}
	addDBFlag(cmd, &dsn)
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	cmd.Flags().StringVar(&configPath, "config", "", "YAML file naming destinations, event rules and webhook sources (docs/configuration.md)")
	cmd.Flags().BoolVar(&logJSON, "log-json", false, "write logs as JSON lines")
	cmd.Flags().StringVar(&level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().Int64Var(&maxBody, "max-body-bytes", 1<<20, "largest request body accepted, in bytes, at least 1 (larger: 413)")
	cmd.Flags().DurationVar(&metricsMaxAge, "metrics-max-age", httpapi.DefaultMetricsMaxAge, "how often /metrics reads the ledger's figures at most, 0 or more; scrapes in between share the last read (0: every scrape)")
	cmd.Flags().BoolVar(&secureCookie, "secure-cookie", false, "mark the console's session cookie Secure: set it when browsers reach the server over HTTPS")
	cmd.Flags().IntVar(&workers, "workers", 4, "concurrent attempts of the executor, 1 to 1000 (with destinations in --config)")
	cmd.Flags().DurationVar(&lease, "lease", 30*time.Second, "how long a claim holds when it names no lease (the executor's, and a worker's through the API), at least 1s")
	lf.add(cmd)
	cmd.Flags().DurationVar(&sweep, "sweep-interval", 5*time.Second, "how often leases are settled, workflows advanced and uncertain operations reconciled, at least 100ms")
	cmd.Flags().DurationVar(&compactInterval, "compact-interval", opledger.DefaultCompactInterval, "how often retention is applied (and once at start), at least 1m")
	return cmd
}

func newTokensCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Create, list and revoke API tokens",
		Long: `Each API token belongs to one tenant and sees only that tenant's operations.
Only a SHA-256 of the token is stored: the token is printed once, at creation.
A token is read-write unless created with one of two narrower accesses:
  --worker     everything an automation does (record, claim, report, reconcile,
               events, workflows) but no operator's decision: it may not
               resolve or approve; for the tools and workers doing the work
  --read-only  only read: the API's GET routes, and the console's pages without
               their decisions; for dashboards and people who watch`,
		Example: `  opledger tokens create --tenant acme --name n8n --worker
  opledger tokens create --tenant acme --name ops-laptop
  opledger tokens create --tenant acme --name wall-screen --read-only
  opledger tokens list
  opledger tokens revoke tok_3f9a1c2b7d4e`,
	}
	var dsn, tenant, name string
	var readOnly, worker bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create a token and print it, alone, on stdout",
		Example: `  TOKEN=$(opledger tokens create --db sqlite:opledger.db --tenant acme --name n8n)
  curl -H "Authorization: Bearer $TOKEN" http://127.0.0.1:8080/v1/operations`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant == "" {
				return usageError{fmt.Errorf("--tenant is required")}
			}
			// The name is what the timeline shows of the token's writes.
			if err := nonEmptyFlags(cmd, "name"); err != nil {
				return err
			}
			if readOnly && worker {
				return usageError{fmt.Errorf("--read-only and --worker are two different accesses: give one, or neither for a read-write token")}
			}
			l, err := openLedger(cmd.Context(), dsn, opledger.Options{Tenant: tenant}, stderrNote(cmd))
			if err != nil {
				return refusedDB(err)
			}
			defer l.Close()
			access := opledger.ReadWrite
			switch {
			case readOnly:
				access = opledger.ReadOnly
			case worker:
				access = opledger.Worker
			}
			// A write to a pipe whose reader is gone fails (EPIPE) rather
			// than kill the process (SIGPIPE) before it can revoke the
			// token nobody got.
			sigpipe := make(chan os.Signal, 1)
			signal.Notify(sigpipe, syscall.SIGPIPE)
			defer signal.Stop(sigpipe)
			secret, tok, err := l.CreateToken(cmd.Context(), name, access)
			if err != nil {
				return refusedInput(err) // a --name too long
			}
			if _, err := fmt.Fprintln(cmd.OutOrStdout(), secret); err != nil {
				// The secret is shown once: a token nobody got must not
				// stay active.
				if rerr := l.RevokeToken(context.WithoutCancel(cmd.Context()), tok.ID); rerr != nil {
					return fmt.Errorf("the token could not be written (%v), nor revoked: revoke %s with opledger tokens revoke: %w", err, tok.ID, rerr)
				}
				return fmt.Errorf("the token could not be written, so it was revoked: %w", err)
			}
			return nil
		},
	}
	addDBFlag(create, &dsn)
	create.Flags().StringVar(&tenant, "tenant", "", "tenant the token belongs to (required)")
	create.Flags().StringVar(&name, "name", "token", "a label for people, e.g. the automation using it")
	create.Flags().BoolVar(&readOnly, "read-only", false, "a token that may only read: GET routes, console pages without decisions")
	create.Flags().BoolVar(&worker, "worker", false, "a token that may do an automation's work but not resolve or approve")

	var listJSON bool
	list := &cobra.Command{
		Use:     "list",
		Short:   "List tokens (never their secrets), with their access and last use",
		Example: `  opledger tokens list --db sqlite:opledger.db [--tenant acme] [--json]`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Empty (an unset variable), it would list every tenant's.
			if err := nonEmptyFlags(cmd, "tenant"); err != nil {
				return err
			}
			l, err := openLedger(cmd.Context(), dsn, opledger.Options{Tenant: tenant, ExistingOnly: true}, stderrNote(cmd))
			if err != nil {
				return refusedInput(err)
			}
			defer l.Close()
			toks, err := l.Tokens(cmd.Context(), tenant == "")
			if err != nil {
				return err
			}
			if len(toks) == 0 {
				// A header alone would read as a command that printed
				// nothing yet, as the other lists say (noteEmptyList).
				note := "no tokens: create one with opledger tokens create --tenant NAME --name NAME"
				if tenant != "" {
					note = fmt.Sprintf("tenant %q has no tokens: create one with opledger tokens create --tenant %s --name NAME", tenant, tenant)
				}
				fmt.Fprintln(cmd.ErrOrStderr(), note)
			}
			out := cmd.OutOrStdout()
			if listJSON {
				return writeJSONLines(out, toks)
			}
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTENANT\tNAME\tACCESS\tCREATED\tLAST USED\tREVOKED")
			for _, t := range toks {
				revoked := "-"
				if t.RevokedAt != nil {
					revoked = utc(*t.RevokedAt)
				}
				used := "never"
				if t.LastUsedAt != nil {
					used = utc(*t.LastUsedAt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", cell(t.ID), cell(t.Tenant), cell(t.Name), t.Access,
					utc(t.CreatedAt), used, revoked)
			}
			return tw.Flush()
		},
	}
	addDBFlag(list, &dsn)
	list.Flags().StringVar(&tenant, "tenant", "", "only this tenant's tokens")
	list.Flags().BoolVar(&listJSON, "json", false, "JSON lines for scripts")

	revoke := &cobra.Command{
		Use:   "revoke TOKEN_ID",
		Short: "Revoke a token by its id (tok_…)",
		Long: `Revoke a token by its id (tok_…). Running servers stop accepting it within
a second: each trusts a token it has found active for that long.`,
		Example: `  opledger tokens revoke tok_3f9a1c2b7d4e --db sqlite:opledger.db`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 || !strings.HasPrefix(args[0], "tok_") {
				return usageError{fmt.Errorf("give exactly one token id (tok_…), as 'tokens list' shows it")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			l, err := openLedger(cmd.Context(), dsn, opledger.Options{ExistingOnly: true}, stderrNote(cmd))
			if err != nil {
				return refusedInput(err)
			}
			defer l.Close()
			if err := l.RevokeToken(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "revoked", args[0])
			return nil
		},
	}
	addDBFlag(revoke, &dsn)
	cmd.AddCommand(create, list, revoke)
	return cmd
}
