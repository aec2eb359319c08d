// Package cli is the opledger command tree (cobra). cmd/opledger only calls
// Main, so every command is testable in-process and from the built binary.
//
// Exit codes: 0 success, 1 a command failed, 2 usage error.
//
// Allowed imports: opledger and its public packages, cobra.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Version is the opledger version, set at build time with
// -ldflags "-X github.com/opledger/opledger/internal/cli.Version=v1.2.3".
var Version = "dev"

// usageError marks errors that are the caller's wrong use of a command.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// Main runs the command line args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "opledger: "+err.Error())
	var ue usageError
	if errors.As(err, &ue) || isFlagError(cmd, err) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		return ExitUsage
	}
	return ExitError
}

// isFlagError tells an unknown command (reported against a command that
// cannot run) from failures of a command that ran.
func isFlagError(cmd *cobra.Command, _ error) bool {
	return cmd == nil || !cmd.Runnable()
}

// noArgs is cobra.NoArgs reporting a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if err := cobra.NoArgs(cmd, args); err != nil {
		return usageError{err}
	}
	return nil
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "opledger",
		Short: "An operation ledger: retried side effects that must not happen twice",
		Long: `opledger gives every intended business action a stable key, keeps a durable
ledger of its state and attempts, lets one worker at a time claim it, replays
saved results to repeats, refuses "retries" that change the content, and keeps
every uncertain outcome visible until a lookup, a documented protection or a
named person settles it.`,
		Example: `  opledger demo
  opledger serve --db sqlite:opledger.db
  opledger proxy --upstream https://crm.example.com/api --db sqlite:proxy.db
  opledger ops list --state held,uncertain,failed`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newDemoCmd(), newMigrateCmd(), newServeCmd(), newProxyCmd(), newTokensCmd(), newOpsCmd(), newEventsCmd(), newLabCmd(), newBenchCmd(), newVersionCmd())
	return root
}

// addDBFlag adds the --db flag, defaulting to $OPLEDGER_DB or the SQLite
// file opledger.db.
func addDBFlag(cmd *cobra.Command, dsn *string) {
	def := os.Getenv("OPLEDGER_DB")
	if def == "" {
		def = opledger.DefaultDSN
	}
	cmd.Flags().StringVar(dsn, "db", def, "ledger store: sqlite:PATH or postgres://… (env OPLEDGER_DB)")
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Short:   "Print the opledger version",
		Example: "  opledger version",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), "opledger", Version)
			return nil
		},
	}
}

func newMigrateCmd() *cobra.Command {
	var dsn string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the ledger's tables",
		Long: `migrate applies the schema migrations the store lacks, in one transaction
per store, and says which it applied. On a terminal it draws a progress bar
(one step per migration); piped, it prints only the result. Every other
command also migrates when it opens a store: run migrate first to upgrade a
large ledger at a time of your choosing.`,
		Example: `  opledger migrate --db sqlite:opledger.db
  opledger migrate --db postgres://opledger@db.internal:5432/opledger`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var (
				applied      []string
				setBar       func(int)
				finishBar    func()
				barRequested bool
			)
			l, err := opledger.Open(cmd.Context(), dsn, opledger.Options{MigrationProgress: func(done, total int, name string) {
				if !barRequested {
					barRequested = true
					setBar, finishBar = progress(cmd, total, "migrate")
				}
				if setBar != nil {
					setBar(done)
				}
				applied = append(applied, name)
			}})
			if finishBar != nil {
				finishBar()
			}
			if err != nil {
				return err
			}
			defer l.Close()
			out := cmd.OutOrStdout()
			if len(applied) > 0 {
				noun := "migrations"
				if len(applied) == 1 {
					noun = "migration"
				}
				fmt.Fprintf(out, "%s store: applied %d %s (%s)\n", l.StoreName(), len(applied), noun, strings.Join(applied, ", "))
			}
			fmt.Fprintf(out, "%s store is up to date\n", l.StoreName())
			return nil
		},
	}
	addDBFlag(cmd, &dsn)
	return cmd
}

// writeJSONLines writes one JSON document per line.
func writeJSONLines[T any](w io.Writer, items []T) error {
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return nil
}

func envToken() string { return os.Getenv("OPLEDGER_TOKEN") }

func defaultOperator() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "operator"
}
