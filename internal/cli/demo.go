package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/store/pgstore"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/reconciler"
	"github.com/opledger/opledger/server"
)

func newDemoCmd() *cobra.Command {
	var (
		dsn, addr string
		noServe   bool
	)
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Walk through the awkward cases on a fresh ledger",
		Long: `demo records operations against the lab's simulated destinations (a CRM with
lookup, an e-mail provider without one) and shows what the ledger does in each awkward case:
a repeat, a changed "retry", a lost response, a 503, a rejected request and a
worker that crashes after dispatch. It prints every step and the final ledger.

Then it serves the ledger (API and console) and prints the console's address
and a token, so you can open the exception queue it just filled; the server's
executor and reconciler work on the same simulated destinations (approve
DEMO-OP-022 and the CRM acts). Ctrl-C stops it. --no-serve stops after the walk-through.

Without --db it uses a fresh SQLite file in a temporary directory, removed
when demo ends. A --db must name a new SQLite file (or an empty one) or a
PostgreSQL schema without a ledger: a --db that already holds a ledger (a
demo run or real operations) is refused and left as it is, because the demo
moves the ledger's clock and its server settles the operations of every
tenant against the simulated destinations. --addr is checked before the
walk-through writes anything.`,
		Example: `  opledger demo
  opledger demo --no-serve
  opledger demo --db sqlite:demo.db --addr 127.0.0.1:9090`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			temp := "" // the temporary directory of a ledger made without --db
			if dsn == "" {
				dir, err := os.MkdirTemp("", "opledger-demo-")
				if err != nil {
					return err
				}
				temp = dir
				dsn = "sqlite:" + filepath.Join(dir, "demo.db")
			}
			if noServe {
				if cmd.Flags().Changed("addr") {
					return usageError{errors.New("--addr is where the demo serves its ledger, and --no-serve serves nothing: give one of them")}
				}
				addr = ""
			}
			err := runDemo(cmd.Context(), out, dsn, addr, temp != "")
			if temp == "" {
				return err
			}
			// The ledger it announced is removed: said so, once it is.
			_, made := os.Stat(filepath.Join(temp, "demo.db"))
			if rmErr := os.RemoveAll(temp); rmErr != nil {
				return errors.Join(err, fmt.Errorf("remove the temporary ledger: %w", rmErr))
			}
			if made == nil {
				fmt.Fprintf(out, "\nThe ledger was temporary and has been removed (%s); give --db, e.g. --db sqlite:demo.db, to keep one.\n",
					redactedDSN(dsn, "--db"))
			}
			return err
		},
	}
	cmd.Flags().StringVar(&dsn, "db", "", "ledger store (default: a fresh SQLite file)")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "address of the server started after the walk-through")
	cmd.Flags().BoolVar(&noServe, "no-serve", false, "stop after the walk-through")
	return cmd
}

// demoClockMoves is how far the walk-through moves its clock forward in
// all: a minute past the 503's backoff, a minute past the dead worker's
// lease.
const demoClockMoves = 2 * time.Minute

// runDemo runs the walk-through on dsn and, when addr is set, serves the
// ledger there until ctx ends. It refuses, before writing anything, a dsn
// that already holds a ledger and an addr it cannot listen on. temporary
// says that dsn is removed when the demo ends.
func runDemo(ctx context.Context, out io.Writer, dsn, addr string, temporary bool) error {
	var ln net.Listener
	if addr != "" {
		// Listened on before the walk-through writes anything (a busy
		// port fails here), and handed to the server after it.
		var err error
		if ln, err = listenFirst("addr", addr); err != nil {
			return err
		}
		defer ln.Close() // the server's Run closes it too; once more is harmless
	}
	if err := refuseLedger(ctx, dsn); err != nil {
		return err
	}
	// The demo's clock, moved forward instead of waiting (past a backoff,
	// past a dead worker's lease): demoClockMoves in all. It starts that
	// far behind, so that it ends on the real clock: the server started
	// after the walk-through, and any other process reading the ledger
	// (ops list's AGE, a later serve on the same --db), see no operation
	// dated in the future.
	var offset atomic.Int64
	offset.Store(-int64(demoClockMoves))
	ledger, err := opledger.Open(ctx, dsn, opledger.Options{
		Worker: "demo-worker",
		Lease:  10 * time.Second,
		Clock:  func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) },
		RetryPolicy: &opledger.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, MaxDelay: time.Minute,
			Deadline: time.Hour},
	})
	if err != nil {
		return refusedDB(err)
	}
	defer ledger.Close()
	// The lab's simulated destinations, on the demo's clock.
	demoNow := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	crm := lab.NewCRM(lab.CRMOptions{Name: "crm", Now: demoNow})
	mailer := lab.NewEmail(lab.EmailOptions{Name: "mailer", Now: demoNow})
	dests, err := destination.NewSet(crm, mailer)
	if err != nil {
		return err
	}
	quiet := slog.New(slog.DiscardHandler)
	rec, err := reconciler.New(ledger, reconciler.Config{Destinations: dests, Logger: quiet})
	if err != nil {
		return err
	}

	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	order := func(key string, units int) opledger.Intent {
		return opledger.Intent{Key: key, Action: "crm.prepare_order", Destination: "crm", Owner: "ops-team",
			Payload:         json.RawMessage(fmt.Sprintf(`{"order":"DEMO-ORDER-017","units":%d,"customer":{"email":"demo@example.invalid"}}`, units)),
			SensitiveFields: []string{"customer.email"}}
	}
	send := func(in opledger.Intent, fault lab.Fault) (*opledger.Operation, error) {
		if fault != lab.FaultNone {
			if err := crm.Inject(fault); err != nil {
				return nil, err
			}
		}
		return ledger.Do(ctx, in, crm.Call)
	}
	verify := func(key string) (*opledger.Operation, error) {
		if _, err := rec.RunOnce(ctx); err != nil {
			return nil, err
		}
		return ledger.Get(ctx, key)
	}
	show := func(step string, op *opledger.Operation, err error) {
		var se *opledger.StateError
		switch {
		case op != nil && op.State == opledger.StateSucceeded:
			say("   %-9s → succeeded, ref %s (attempts so far: %d)", step, op.DestinationRef, op.AttemptCount)
		case errors.Is(err, opledger.ErrFingerprintMismatch):
			say("   %-9s → refused: same key, different content; the original is kept", step)
		case errors.As(err, &se):
			say("   %-9s → refused: operation is %s", step, se.State)
		case op != nil && op.LastError != "":
			say("   %-9s → %s (%s)", step, op.State, op.LastError)
		case op != nil:
			say("   %-9s → %s", step, op.State)
		default:
			say("   %-9s → error: %v", step, err)
		}
	}

	where := redactedDSN(dsn, "--db")
	if temporary {
		where += " (temporary: removed when the demo ends)"
	}
	say("opledger demo: ledger at %s\n", where)

	say("1. Normal: send, then repeat")
	op, err := send(order("DEMO-OP-017", 2), lab.FaultNone)
	show("send", op, err)
	op, err = send(order("DEMO-OP-017", 2), lab.FaultNone)
	show("repeat", op, err)
	say("   the repeat replayed the saved result; the CRM was not called again\n")

	say("2. Changed data: send 2 units, then \"retry\" 3 units under the same key")
	op, err = send(order("DEMO-OP-018", 2), lab.FaultNone)
	show("send", op, err)
	op, err = send(order("DEMO-OP-018", 3), lab.FaultNone)
	show("retry", op, err)
	say("")

	say("3. Lost response: the CRM commits, the answer never arrives")
	op, err = send(order("DEMO-OP-019", 2), lab.FaultLostResponse)
	show("send", op, err)
	op, err = send(order("DEMO-OP-019", 2), lab.FaultNone)
	show("retry", op, err)
	op, err = verify("DEMO-OP-019")
	show("verify", op, err)
	op, err = send(order("DEMO-OP-019", 2), lab.FaultNone)
	show("retry", op, err)
	say("")

	say("4. 503, then success")
	op, err = send(order("DEMO-OP-020", 2), lab.Fault5xxBeforeCommit)
	show("send", op, err)
	offset.Add(int64(time.Minute)) // past the backoff; one of demoClockMoves
	op, err = send(order("DEMO-OP-020", 2), lab.FaultNone)
	show("retry", op, err)
	say("")

	say("5. Rejected: the CRM refuses the content")
	op, err = send(order("DEMO-OP-021", 2), lab.FaultValidation)
	show("send", op, err)
	say("   failed (rejected) goes to the exception queue at once: repair the cause first\n")

	say("6. A worker crashes after dispatching an e-mail; the provider has no lookup")
	mail := opledger.Intent{Key: "DEMO-MAIL-017", Action: "email.send", Destination: "mailer", Owner: "ops-team",
		Payload: json.RawMessage(`{"template":"order-ready","order":"DEMO-ORDER-017"}`)}
	claim, err := ledger.Claim(ctx, mail.Key, opledger.ClaimOptions{Intent: &mail})
	if err == nil {
		if _, err := ledger.Dispatch(ctx, mail.Key, claim.AttemptID, claim.FencingToken); err != nil {
			return err
		}
		if _, err := mailer.Call(ctx, opledger.Call{Operation: claim.Operation, AttemptID: claim.AttemptID}); err != nil {
			return err
		}
		say("   claim, dispatch, the provider accepts the message, the worker dies")
		offset.Add(int64(time.Minute)) // past the lease; the other of demoClockMoves
		if _, err := ledger.ExpireLeases(ctx); err != nil {
			return err
		}
		op, err = ledger.Get(ctx, mail.Key)
		show("lease", op, err)
		op, err = verify(mail.Key)
	} else {
		op = nil
	}
	show("reconcile", op, err)
	if op != nil && op.ReviewBy != nil {
		say("   held for %s, to review by %s; nothing is resent", op.Owner, op.ReviewBy.Format(time.RFC3339))
	}
	say("")

	say("7. The other states, for the exception queue")
	seed := func(key string, units int, approval bool) opledger.Intent {
		in := order(key, units)
		in.RequiresApproval = approval
		return in
	}
	if _, _, err := ledger.Record(ctx, seed("DEMO-OP-022", 5, true)); err != nil {
		return err
	}
	say("   DEMO-OP-022 waits for approval of its content")
	lost := seed("DEMO-OP-023", 1, false)
	if op, err := send(lost, lab.FaultLostResponse); op != nil && op.State == opledger.StateUncertain {
		say("   DEMO-OP-023 lost its response: uncertain until the reconciler or a person settles it")
		if addr != "" {
			say("   (the server started below runs the reconciler: watch a lookup confirm it)")
		}
	} else if err != nil && !errors.Is(err, opledger.ErrInvalidState) {
		var ae *opledger.AttemptError
		if !errors.As(err, &ae) {
			return err
		}
	}
	if op, _ := send(seed("DEMO-OP-025", 3, false), lab.Fault429); op != nil && op.State == opledger.StatePending {
		say("   DEMO-OP-025 was told 429 with Retry-After: %d s; it is pending until then", lab.RetryAfterSeconds)
	}
	if _, err := ledger.Claim(ctx, "DEMO-OP-024", opledger.ClaimOptions{Intent: ptr(seed("DEMO-OP-024", 4, false)), Lease: time.Hour}); err == nil {
		say("   DEMO-OP-024 is claimed by a worker right now (in progress)")
	}
	say("")

	say("Counters (each answers a different question):")
	counts := crm.Counters()
	say("   attempts sent to the CRM:   %d", counts.Attempts)
	say("   records created at the CRM: %d  (one per operation the CRM carried out, whatever its retries)", counts.Effects)
	say("   lookups at the CRM:         %d", counts.Lookups)
	say("   e-mails accepted:           %d", mailer.Counters().Effects)
	say("")
	page, err := ledger.List(ctx, opledger.ListOptions{Limit: 50})
	if err != nil {
		return err
	}
	say("The ledger:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   KEY\tSTATE\tATTEMPTS\tREF\tOWNER")
	for i := len(page.Items) - 1; i >= 0; i-- {
		op := page.Items[i]
		state := string(op.State)
		if op.FailureKind != "" {
			state += " (" + string(op.FailureKind) + ")"
		}
		fmt.Fprintf(tw, "   %s\t%s\t%d\t%s\t%s\n", op.Key, state, op.AttemptCount, dash(op.DestinationRef), op.Owner)
	}
	if err := tw.Flush(); err != nil || addr == "" {
		return err
	}
	token, _, err := ledger.CreateToken(ctx, "demo", opledger.ReadWrite)
	if err != nil {
		return err
	}
	// The server executes and reconciles on the same simulated
	// destinations: approve DEMO-OP-022 in the console and the CRM acts.
	srv, err := server.New(ledger, server.Config{Listener: ln, Logger: quiet, Destinations: dests})
	if err != nil {
		return err
	}
	say("")
	say("Console:  %s/   (sign in with the token below)", srv.URL())
	say("API:      %s/v1/operations", srv.URL())
	say("Token:    %s", token)
	say("Try:      opledger ops list --server %s --token %s --state held,uncertain,failed", srv.URL(), token)
	say("Serving until Ctrl-C.")
	return srv.Run(ctx)
}

// refuseLedger refuses, reading it without writing, a --db that already
// holds a ledger: the demo moves the ledger's clock, expires every lease
// and settles the operations of every tenant against simulated
// destinations, which on a real ledger would mark real operations
// succeeded with fake references. A SQLite file that does not exist or
// holds no ledger, and a PostgreSQL schema without one, are fresh (Open
// then refuses one that holds another application's tables).
func refuseLedger(ctx context.Context, dsn string) error {
	var holds bool
	if path, ok := sqlitestore.DSNPath(dsn); ok {
		h, err := sqlitestore.HoldsLedger(ctx, path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case sqlitestore.IsNotDatabase(err):
			return usageError{fmt.Errorf("--db: %w", notDatabase(err))}
		case err != nil:
			return fmt.Errorf("--db: cannot tell whether %s holds a ledger: %w", path, err)
		}
		holds = h
	} else {
		c, err := pgstore.HoldsLedger(ctx, dsn)
		if err != nil {
			return err
		}
		holds = c.Holds
	}
	if holds {
		return usageError{errors.New("--db already holds a ledger: the demo would rewrite its operations with simulated results, so it runs only on a new SQLite file or an empty PostgreSQL schema; give another --db, or none for a temporary one")}
	}
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ptr[T any](v T) *T { return &v }
