package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/proxy"
)

// opsBackend is where the ops commands read and decide: a store opened
// directly (--db) or a server (--server, --token).
type opsBackend interface {
	List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error)
	Show(ctx context.Context, key string) (*opsDetail, error)
	Resolve(ctx context.Context, key string, d opledger.Decision) (op *opledger.Operation, replayed bool, err error)
	Approve(ctx context.Context, key string, a opledger.Approval) (op *opledger.Operation, replayed bool, err error)
	Stats(ctx context.Context, allTenants bool) (*client.Stats, error)
	Close() error
}

type opsDetail struct {
	Operation *opledger.Operation       `json:"operation"`
	Attempts  []*opledger.Attempt       `json:"attempts"`
	Timeline  []*opledger.TimelineEntry `json:"timeline"`
	// now is the ledger's clock (ledgerNow), read only when the next
	// decision depends on it (a retry's not_before): zero otherwise, and
	// then this machine's clock is used.
	now time.Time
}

// pageLister is what lists operations: a Ledger, a Client, an opsBackend.
type pageLister interface {
	List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error)
}

// ledgerNow is the ledger's clock, the one that stamps every time it
// keeps, read through a list of one operation (opledger.Page.Now): on the
// store as through a server, whose answer to an operation or an event
// carries no time of its own. This machine's clock, which may be off,
// only when that list fails or carries no time (a server older than
// Page.Now): it is what the times would have been measured against.
func ledgerNow(ctx context.Context, l pageLister) time.Time {
	if page, err := l.List(ctx, opledger.ListOptions{Limit: 1}); err == nil && !page.Now.IsZero() {
		return page.Now
	}
	return time.Now()
}

// ledgerBackend acts on the store. again is the command's flags that name
// its ledger, for the commands its messages suggest (backendFlags.again);
// notes is where it says what a decision left undone (stderr).
type ledgerBackend struct {
	l     *opledger.Ledger
	again string
	notes io.Writer
}

// List and Show answer operations as the server's API shows them
// (opledger.Operation.Masked): the commands print what they get.
func (b ledgerBackend) List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error) {
	page, err := b.l.List(ctx, o)
	if err != nil {
		return nil, err
	}
	for i, op := range page.Items {
		page.Items[i] = op.Masked()
	}
	return page, nil
}

func (b ledgerBackend) Show(ctx context.Context, key string) (*opsDetail, error) {
	op, err := b.l.Get(ctx, key)
	if err != nil {
		if errors.Is(err, opledger.ErrNotFound) {
			if msg, ok := stepNotRecorded(ctx, b.l.GetWorkflow, key, b.again); ok {
				return nil, keyNotFound(msg)
			}
		}
		return nil, b.where(err)
	}
	a, err := b.l.Attempts(ctx, key)
	if err != nil {
		return nil, err
	}
	tl, err := b.l.Timeline(ctx, key)
	if err != nil {
		return nil, err
	}
	return &opsDetail{Operation: op.Masked(), Attempts: op.MaskedAttempts(a), Timeline: tl}, nil
}

// Resolve records the decision and, when it made a workflow's step
// succeed, records the workflow's next step at once, as the server does
// after its resolve: not left for a server's sweep, or for 'workflows
// resume' where none runs. What stops the workflow is noted, not an
// error: the decision is recorded.
func (b ledgerBackend) Resolve(ctx context.Context, key string, d opledger.Decision) (*opledger.Operation, bool, error) {
	op, replayed, err := b.l.Resolve(ctx, key, d)
	if err != nil || replayed || op.State != opledger.StateSucceeded {
		return op, replayed, b.where(err)
	}
	_, err = b.l.AdvanceWorkflowOf(ctx, op.Key)
	if stepErr, stuck := errors.AsType[*opledger.StepError](err); stuck {
		fmt.Fprintf(b.notes, "note: its workflow cannot go on: %s; 'opledger workflows show %s%s' says how to revise the step\n", oneLine(err.Error()), stepErr.Workflow, b.again)
	} else if err != nil {
		fmt.Fprintf(b.notes, "note: its workflow's next step is not recorded yet (%s): 'opledger workflows resume' or a server's sweep records it\n", oneLine(err.Error()))
	}
	return op, false, nil
}

func (b ledgerBackend) Approve(ctx context.Context, key string, a opledger.Approval) (*opledger.Operation, bool, error) {
	op, replayed, err := b.l.Approve(ctx, key, a)
	return op, replayed, b.where(err)
}

// where names the tenant a key was not found in: keys are unique per
// tenant, and --tenant defaults to "default", not the tenant of the
// token that recorded the operation.
func (b ledgerBackend) where(err error) error {
	if errors.Is(err, opledger.ErrNotFound) {
		return fmt.Errorf("%w in tenant %q (if it is in another tenant, --tenant names that one)", err, b.l.Tenant())
	}
	return err
}

func (b ledgerBackend) Close() error { return b.l.Close() }

// getWorkflowFunc reads a workflow: opledger.Ledger's or client.Client's
// GetWorkflow.
type getWorkflowFunc func(ctx context.Context, key string) (*opledger.Workflow, error)

// stepOf finds the workflow step key names: the part of key before its
// last '/' is a workflow (read with getWorkflow) with a step named as the
// part after it. ok is false when it is not, or cannot be read.
func stepOf(ctx context.Context, getWorkflow getWorkflowFunc, key string) (*opledger.Workflow, *opledger.WorkflowStepStatus, bool) {
	wkey, step, ok := opledger.SplitWorkflowStepKey(key)
	if !ok || opledger.ValidateKey(wkey) != nil {
		return nil, nil, false
	}
	wf, err := getWorkflow(ctx, wkey)
	if err != nil {
		return nil, nil, false
	}
	st := wf.Step(step)
	return wf, st, st != nil
}

// stepNotRecorded says, for an operation key that was not found, what it
// is instead: a step of a workflow not recorded yet (or one that succeeded
// and whose record retention has removed since), with the command that
// shows the workflow (with the flags again). ok is false when key names no
// step of a workflow (nor one whose operation is recorded after all): then
// the tenant is the likelier mistake.
func stepNotRecorded(ctx context.Context, getWorkflow getWorkflowFunc, key, again string) (msg string, ok bool) {
	wf, st, ok := stepOf(ctx, getWorkflow, key)
	if !ok || st.Operation != nil {
		return "", false
	}
	show := "opledger workflows show " + wf.Key + again
	switch {
	case st.State == opledger.StepWaiting && st.WaitingFor != "":
		return fmt.Sprintf("%s is step %s of workflow %s, not recorded yet (it waits for step %s): %s", key, st.Name, wf.Key, st.WaitingFor, show), true
	case st.State == opledger.StepWaiting:
		// The current step: the workflow's reason says why it is not
		// recorded (due to be, or its content cannot be filled).
		return fmt.Sprintf("%s is step %s of workflow %s, not recorded yet (%s): %s", key, st.Name, wf.Key, wf.Reason, show), true
	case st.State == opledger.StepState(opledger.StateSucceeded):
		return fmt.Sprintf("%s is step %s of workflow %s, which succeeded; retention has removed its record since: %s", key, st.Name, wf.Key, show), true
	case st.State == opledger.StepCancelled:
		return fmt.Sprintf("%s is step %s of workflow %s, which was cancelled before the step was recorded; it never runs (%s): %s", key, st.Name, wf.Key, wf.Reason, show), true
	}
	return "", false
}

// stepNotWorkflow says, for a workflow key that was not found, that it
// names a step of a workflow, when it does, with the commands that show
// the workflow and the step's operation (once recorded), with the flags
// again. ok is false when key names no step of a workflow.
func stepNotWorkflow(ctx context.Context, getWorkflow getWorkflowFunc, key, again string) (msg string, ok bool) {
	wf, st, ok := stepOf(ctx, getWorkflow, key)
	if !ok {
		return "", false
	}
	msg = fmt.Sprintf("%s is not a workflow: it names step %s of workflow %s: opledger workflows show %s%s", key, st.Name, wf.Key, wf.Key, again)
	if st.Operation != nil {
		msg += "; the step's operation: opledger ops show " + key + again
	}
	return msg, true
}

// keyNotFound is a key that was not found, with msg saying what it names
// instead. It matches opledger.ErrNotFound.
func keyNotFound(msg string) error { return notFoundError{msg} }

type notFoundError struct{ msg string }

func (e notFoundError) Error() string        { return e.msg }
func (e notFoundError) Is(target error) bool { return target == opledger.ErrNotFound }

// serverBackend acts through a server's API; again as ledgerBackend's.
type serverBackend struct {
	c     *client.Client
	again string
}

func (b serverBackend) List(ctx context.Context, o opledger.ListOptions) (*opledger.Page, error) {
	return b.c.List(ctx, o)
}

func (b serverBackend) Show(ctx context.Context, key string) (*opsDetail, error) {
	d, err := b.c.Get(ctx, key)
	if err != nil {
		if errors.Is(err, opledger.ErrNotFound) {
			if msg, ok := stepNotRecorded(ctx, b.c.GetWorkflow, key, b.again); ok {
				return nil, keyNotFound(msg)
			}
		}
		return nil, err
	}
	out := &opsDetail{Operation: &d.Operation}
	for i := range d.Attempts {
		out.Attempts = append(out.Attempts, &d.Attempts[i])
	}
	for i := range d.Timeline {
		out.Timeline = append(out.Timeline, &d.Timeline[i])
	}
	return out, nil
}

func (b serverBackend) Resolve(ctx context.Context, key string, d opledger.Decision) (*opledger.Operation, bool, error) {
	return b.c.Resolve(ctx, key, d)
}

func (b serverBackend) Approve(ctx context.Context, key string, a opledger.Approval) (*opledger.Operation, bool, error) {
	return b.c.Approve(ctx, key, a)
}

func (b serverBackend) Close() error { return nil }

// backendFlags are the flags that choose where ops commands act.
type backendFlags struct {
	dsn, server, token, tenant string
	cmd                        *cobra.Command
}

func (f *backendFlags) add(cmd *cobra.Command) {
	f.cmd = cmd
	addDBFlag(cmd, &f.dsn)
	cmd.Flags().StringVar(&f.server, "server", "", "act through a server's API instead of the store (URL)")
	cmd.Flags().StringVar(&f.token, "token", "", "API token for --server (env OPLEDGER_TOKEN)")
	cmd.Flags().StringVar(&f.tenant, "tenant", opledger.DefaultTenant, "tenant, with --db (a token implies its tenant)")
}

// again is the flags that name this command's ledger, to repeat in a
// command it suggests, so that the suggestion, pasted, acts where this
// command did: --server (never its token: --token or OPLEDGER_TOKEN gives
// it), or --db as given (without a password it holds) and --tenant when
// it is not the default one. "" when the command used the defaults.
func (f *backendFlags) again() string {
	if f.server != "" {
		return " --server " + shellWord(f.server)
	}
	var out string
	if f.cmd.Flags().Changed("db") {
		out = " --db " + shellWord(dsnAgain(f.dsn))
	}
	if f.tenant != opledger.DefaultTenant {
		out += " --tenant " + f.tenant // key syntax: nothing to quote
	}
	return out
}

// dsnAgain is a --db to repeat: as given, but for a PostgreSQL URL's
// secrets, left out (its password and sslpassword: PGPASSWORD,
// PGSSLPASSWORD or ~/.pgpass may give them), and a form redactedDSN
// cannot show, or one holding a secret the URL cannot leave out, which is
// named rather than repeated.
func dsnAgain(dsn string) string {
	switch shown := redactedDSN(dsn, ""); shown {
	case "":
		return "<your --db>"
	case dsn:
		return dsn
	}
	if u, err := url.Parse(dsn); err == nil {
		if again, ok := redact.DSNWithoutSecrets(dsn, u); ok {
			return again
		}
	}
	return "<your --db>"
}

// shellWord is s as one word of a POSIX shell command line: as is when
// it holds nothing the shell reads otherwise, else in single quotes.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// check refuses what would be ignored or stand for nothing: an empty
// --server or --token (an unset variable: the store in the current
// directory would be used instead of the server meant), an empty
// --tenant (the tenant "default" would be used instead of the one
// meant), and --token without --server.
func (f *backendFlags) check() error {
	if err := nonEmptyFlags(f.cmd, "server", "token", "tenant"); err != nil {
		return err
	}
	if f.server != "" {
		if err := checkServerURL(f.server); err != nil {
			return err
		}
	}
	if f.server == "" && f.cmd.Flags().Changed("token") {
		return usageError{errors.New("--token is for --server; without --server the store (--db) is used, which needs no token")}
	}
	return nil
}

// checkServerURL refuses, before any request, a --server the client
// could not use as given (client.BaseURLProblem): its words repeat no
// part of the value, since a URL may hold a password.
func checkServerURL(server string) error {
	if problem := client.BaseURLProblem(server); problem != "" {
		return usageError{fmt.Errorf("--server must be an http:// or https:// URL with a host, such as http://127.0.0.1:8080: %s", problem)}
	}
	return nil
}

// emptyTenantNote is the note for a list that finds no what at all in the
// tenant the commands act in (detail, if any, says why that may be): with
// --db, another --tenant may list some; with --server, a token of another
// tenant (--tenant is refused there).
func (f *backendFlags) emptyTenantNote(what, detail string) string {
	if detail != "" {
		detail = " (" + detail + ")"
	}
	if f.server != "" {
		return fmt.Sprintf("the token's tenant lists no %s at all%s: a token of another tenant lists that tenant's", what, detail)
	}
	return fmt.Sprintf("tenant %q lists no %s at all%s: if you meant another tenant, --tenant names it", f.tenant, what, detail)
}

func (f *backendFlags) open(ctx context.Context) (opsBackend, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if f.server != "" {
		// The server's store and the token's tenant decide: a --db or
		// --tenant given beside --server would be silently ignored.
		for _, name := range []string{"db", "tenant"} {
			if f.cmd.Flags().Changed(name) {
				return nil, usageError{fmt.Errorf("--%s is for the store; with --server the server's store and the token's tenant are used", name)}
			}
		}
		token, from := f.token, "--token"
		if token == "" {
			token, from = envToken(), "OPLEDGER_TOKEN"
		}
		if token == "" {
			return nil, usageError{errors.New("--server needs --token or OPLEDGER_TOKEN")}
		}
		// No request can carry a line end (a token read from a file saved
		// with CRLF): the client's error would read "no answer from the
		// server", as if it were down. A token has no space either. Not
		// repeated: it is a secret.
		if strings.IndexFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
			return nil, usageError{fmt.Errorf("%s holds a control character or a space (a line end copied with the token?): an API token has none", from)}
		}
		return serverBackend{client.New(f.server, token, nil), f.again()}, nil
	}
	l, err := openLedger(ctx, f.dsn, opledger.Options{Tenant: f.tenant, ExistingOnly: true}, stderrNote(f.cmd))
	if err != nil {
		return nil, refusedInput(err)
	}
	// A decision taken on the store directly names where it came from,
	// as one through the API names its token: "maria (command line on
	// ops-host)".
	decides, err := l.WithCredential(commandLineCredential())
	if err != nil {
		l.Close()
		return nil, err
	}
	return ledgerBackend{decides, f.again(), f.cmd.ErrOrStderr()}, nil
}

// commandLineCredential is the mark of a decision taken with --db: the
// command line, and the machine it ran on when its name is known.
func commandLineCredential() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "command line"
	}
	if len(host) > 64 {
		host = host[:64]
	}
	return "command line on " + strings.ToValidUTF8(host, "?")
}

func newOpsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "Inspect operations and record operator decisions",
		Long: `ops works against a store directly (--db) or through a server (--server URL
--token T). Decisions (resolve, retry, cancel) always need --reason: it is what the
next person reads in the timeline. An approval names the version and fingerprint
'ops show' gave, so that it approves the content that was looked at. A decision or
approval sent again, when nothing has moved the operation since, records nothing
and exits 0 ("already recorded"): a script that lost the first answer can repeat it.`,
		Example: `  opledger ops list --state held,uncertain,failed
  opledger ops show intake:I17:create
  opledger ops resolve intake:I17:create --succeeded --ref H42 --reason "found H42 in the CRM"
  opledger ops approve intake:I17:create --version 2 --fingerprint sha256:9f2c…`,
	}
	cmd.AddCommand(newOpsListCmd(), newOpsShowCmd(), newOpsResolveCmd(), newOpsDecisionCmd("retry", opledger.DecisionAuthorizeRetry),
		newOpsDecisionCmd("cancel", opledger.DecisionCancel), newOpsApproveCmd(), newOpsStatsCmd())
	return cmd
}

func newOpsListCmd() *cobra.Command {
	var (
		bf                  backendFlags
		states, owner, dest string
		order, cursor       string
		limit               int
		asJSON, duplicates  bool
		exceptCancelled     bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List operations, newest first, or the held ones by review time",
		Example: `  opledger ops list --state held,uncertain,failed
  opledger ops list --order review
  opledger ops list --duplicate-effects
  opledger ops list --state failed --except-cancelled   # the failed ones still to decide on
  opledger ops list --owner ops-team --json | jq .key
  opledger ops list --state failed --cursor CURSOR   # the next page, as the last one said
  opledger ops list --server http://127.0.0.1:8080 --token $TOKEN --state held`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// --owner "$UNSET" would list every owner's operations,
			// --cursor "$UNSET" the first page again and again.
			if err := nonEmptyFlags(cmd, "state", "owner", "destination", "order", "cursor"); err != nil {
				return err
			}
			o := opledger.ListOptions{Owner: owner, Destination: dest, Limit: limit, Order: opledger.Order(order),
				DuplicateEffects: duplicates, ExceptCancelled: exceptCancelled, Cursor: cursor}
			if o.Order != opledger.OrderNewest && o.Order != opledger.OrderReview {
				return usageError{fmt.Errorf("--order: unknown order %q (orders: %s, %s)", order, opledger.OrderNewest, opledger.OrderReview)}
			}
			// "--state held," would list what "--state held" does, and
			// "--state ," every state.
			var err error
			if o.States, err = opledger.ParseStates(states); err != nil {
				return usageError{errors.New("--state: " + opledger.InvalidInputDetail(err))}
			}
			if err := checkLimit(limit, opledger.MaxListLimit); err != nil {
				return err
			}
			b, err := bf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			page, err := b.List(cmd.Context(), o)
			if err != nil {
				return refusedInput(err) // such as --order review --state failed
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSONLines(out, page.Items)
			} else {
				err = writeOpsTable(out, page.Items, page.Now)
			}
			if err != nil {
				return err
			}
			note := bf.emptyTenantNote("operation", "none recorded, or all compacted by retention")
			filters := []string{"state", "owner", "destination", "duplicate-effects", "except-cancelled"}
			if o.Order == opledger.OrderReview {
				filters = append(filters, "order") // the held operations only
			}
			if err := noteEmptyList(cmd, len(page.Items) == 0, cursor, "operations", note, func() (bool, error) {
				some, err := b.List(cmd.Context(), opledger.ListOptions{Limit: 1})
				return err == nil && len(some.Items) > 0, err
			}, filters...); err != nil {
				return err
			}
			return morePages(cmd, page.NextCursor)
		},
	}
	bf.add(cmd)
	cmd.Flags().StringVar(&states, "state", "", "comma-separated states, e.g. held,uncertain,failed")
	cmd.Flags().StringVar(&owner, "owner", "", "only this owner's operations")
	cmd.Flags().StringVar(&dest, "destination", "", "only this destination's operations")
	cmd.Flags().StringVar(&order, "order", string(opledger.OrderNewest),
		"newest: newest first; review: held operations only, earliest review first")
	cmd.Flags().BoolVar(&duplicates, "duplicate-effects", false, "only operations whose destination acted more than once")
	cmd.Flags().BoolVar(&exceptCancelled, "except-cancelled", false,
		"leave out the failed operations an operator cancelled, or whose workflow an operator cancelled: with --state failed, the console's exception queue")
	addLimitFlag(cmd, &limit, 100, opledger.MaxListLimit)
	cmd.Flags().StringVar(&cursor, "cursor", "", cursorUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines for scripts")
	return cmd
}

// noteEmptyList writes on stderr, when a list's page is empty, that it
// is, so that a header alone does not read as a command that printed
// nothing yet: on the first page (no cursor), note, the tenant's, when
// the tenant has nothing of the kind at all (has reports whether it has
// some: an empty list of the wrong tenant would read as "nothing waits",
// and --tenant defaults to "default"); otherwise that no plural match
// the filters given, naming those of filters the command line set; on a
// later page, that there are no more.
func noteEmptyList(cmd *cobra.Command, empty bool, cursor, plural, note string, has func() (bool, error), filters ...string) error {
	if !empty {
		return nil
	}
	msg := "no more " + plural + ": the page before was the last"
	if cursor == "" {
		some, err := has()
		if err != nil {
			return err
		}
		msg = "note: " + note
		if some {
			var given []string
			for _, name := range filters {
				if cmd.Flags().Changed(name) {
					given = append(given, "--"+name)
				}
			}
			msg = "no " + plural + " match the filters given"
			if len(given) > 0 {
				msg += " (" + strings.Join(given, ", ") + ")"
			}
		}
	}
	_, err := fmt.Fprintln(cmd.ErrOrStderr(), msg)
	return err
}

// cursorUsage is the help of the list commands' --cursor.
const cursorUsage = "continue a list where the last page ended (the cursor it printed on stderr), with the same filters"

// morePages tells, on stderr (stdout stays the list), how to get the next
// page when there is one.
func morePages(cmd *cobra.Command, next string) error {
	if next == "" {
		return nil
	}
	_, err := fmt.Fprintf(cmd.ErrOrStderr(), "more: run it again with --cursor %s\n", next)
	return err
}

// addLimitFlag adds a list command's --limit, def by default and at most
// max, which says what it takes when its value is no number (flagError).
func addLimitFlag(cmd *cobra.Command, limit *int, def, max int) {
	cmd.Flags().IntVar(limit, "limit", def, fmt.Sprintf("at most this many, 1 to %d", max))
	if err := cmd.Flags().SetAnnotation("limit", takesAnnotation, []string{limitTakes(max)}); err != nil {
		panic(err)
	}
}

// limitTakes says what a --limit of at most max takes.
func limitTakes(max int) string { return fmt.Sprintf("a whole number from 1 to %d", max) }

// checkLimit refuses a --limit the ledger would replace by its default
// (0 or less) or refuse (more than max, its largest page).
func checkLimit(limit, max int) error {
	if limit < 1 || limit > max {
		return usageError{fmt.Errorf("--limit takes %s (got %d)", limitTakes(max), limit)}
	}
	return nil
}

// writeOpsTable prints operations as ops list does, each as the API shows
// it (Masked: a reference made of a sensitive value masked), whoever read
// them: ops list's backend, or events show's store, which gives the
// operations as they are stored. AGE is measured against now, the
// ledger's clock when they were read (opledger.Page.Now, which stamped
// their times), not this machine's, which may be off: this machine's
// only when now is zero (a server older than Page.Now, an answer that
// carries no time).
func writeOpsTable(w io.Writer, ops []*opledger.Operation, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATE\tDESTINATION\tATTEMPTS\tOWNER\tREVIEW BY\tAGE\tREF")
	if now.IsZero() {
		now = time.Now()
	}
	for _, op := range ops {
		op = op.Masked() // as it is, when it was masked already
		state := string(op.State)
		if op.FailureKind != "" {
			state += " (" + string(op.FailureKind) + ")"
		}
		review := "-"
		if op.ReviewBy != nil {
			review = op.ReviewBy.UTC().Format("2006-01-02 15:04Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", cell(op.Key), cell(state), cell(op.Destination), op.AttemptCount,
			cell(dash(op.Owner)), review, age(now.Sub(op.CreatedAt)), cell(dash(op.DestinationRef)))
	}
	return tw.Flush()
}

func age(d time.Duration) string {
	d = max(d, 0)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func newOpsShowCmd() *cobra.Command {
	var (
		bf     backendFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show KEY",
		Short: "Show an operation, its attempts and timeline, and the replay decision record",
		Example: `  opledger ops show intake:I17:create
  opledger ops show intake:I17:create --json`,
		Args: exactlyOneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := bf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			d, err := b.Show(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			// Arrays in --json, [] when there are none, as GET
			// /v1/operations/{key} gives them: either backend may give
			// nil (no attempt yet, a compacted operation).
			if d.Attempts == nil {
				d.Attempts = []*opledger.Attempt{}
			}
			if d.Timeline == nil {
				d.Timeline = []*opledger.TimelineEntry{}
			}
			if op := d.Operation; op.State == opledger.StatePending && op.NotBefore != nil {
				d.now = ledgerNow(cmd.Context(), b) // whether it is due
			}
			rec := decisionRecord(d, bf.again(), bf.server != "")
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					*opsDetail
					Decision replayDecision `json:"replay_decision"`
				}{d, rec})
			}
			return writeShow(out, d, rec)
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON document")
	return cmd
}

func exactlyOneKey(_ *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageError{errors.New("give exactly one operation key")}
	}
	if err := opledger.ValidateKey(args[0]); err != nil {
		return usageError{err}
	}
	return nil
}

// replayDecision is the record an operator needs before replaying
// anything: what was intended, what is known, what may happen next.
type replayDecision struct {
	OperationKey      string `json:"operation_key"`
	ApprovedVersion   string `json:"approved_version"`
	CurrentAttempt    string `json:"current_attempt"`
	LastConfirmedStep string `json:"last_confirmed_step"`
	DestinationRef    string `json:"destination_reference"`
	Result            string `json:"result"`
	// DuplicateProtected is "" (left out) through a server when the next
	// attempt is not a protected retry: see decisionRecord.
	DuplicateProtected string `json:"deduplication_support,omitempty"`
	NextDecision       string `json:"next_decision"`
	Reason             string `json:"reason"`
}

// decisionRecord is the replay decision record of d; again is the flags
// that name its ledger (backendFlags.again). viaServer is true when d came
// through a server's API: then the record says of deduplication only what
// the operation records (a protected retry, or none needed), since what
// its destination declares is in the server's configuration, which the
// command never sees; on the store it points at that configuration.
func decisionRecord(d *opsDetail, again string, viaServer bool) replayDecision {
	op := d.Operation
	r := replayDecision{OperationKey: op.Key, DestinationRef: dash(op.DestinationRef)}
	r.ApprovedVersion = fmt.Sprintf("version %d, %s", op.Version, op.Fingerprint)
	if op.ApprovedBy != "" {
		r.ApprovedVersion += ", approved by " + op.ApprovedBy
	} else if op.State == opledger.StateAwaitingApproval {
		r.ApprovedVersion += ", not approved yet"
	}
	r.CurrentAttempt = "none"
	if n := len(d.Attempts); n > 0 {
		a := d.Attempts[n-1]
		outcome := a.Outcome
		if outcome == "" {
			outcome = "open"
			if a.DispatchedAt != nil {
				outcome += ", dispatched"
			}
		}
		r.CurrentAttempt = fmt.Sprintf("#%d %s (worker %s, %s)", a.Number, a.ID, a.Worker, outcome)
	}
	r.LastConfirmedStep = "recorded"
	if op.Tombstoned {
		r.LastConfirmedStep = "finished at " + utc(op.UpdatedAt) + ", then compacted"
	}
	for _, e := range d.Timeline {
		r.LastConfirmedStep = e.Event + " at " + utc(e.At)
	}
	switch op.State {
	case opledger.StateSucceeded:
		r.Result = "succeeded"
	case opledger.StateFailed:
		r.Result = "failed (" + string(op.FailureKind) + ")"
	case opledger.StateUncertain, opledger.StateHeld, opledger.StateInProgress:
		r.Result = "uncertain"
		if op.State == opledger.StateInProgress && !op.Dispatched {
			r.Result = "not sent yet"
		}
	default:
		r.Result = "not sent yet"
	}
	if op.Tombstoned {
		r.DuplicateProtected = "none needed: no attempt will follow"
	} else if op.Protected {
		r.DuplicateProtected = "idempotency key " + op.IdempotencyKey() + " (next attempt is a protected retry)"
	} else if !viaServer {
		r.DuplicateProtected = "as declared by destination " + op.Destination + " (see its configuration); key " + op.IdempotencyKey()
	}
	r.NextDecision, r.Reason = nextDecision(op, again, d.now)
	if op.State == opledger.StateFailed && !op.Tombstoned {
		for _, e := range d.Timeline {
			if e.Event == workflowCancelledEvent && e.To == "" {
				// CancelWorkflow gave up on its workflow at this step.
				r.NextDecision, r.Reason = "none", "its workflow was cancelled at this step by "+e.Actor+
					", so it is not attempted again (a retry is refused); mark it succeeded with a reference found if it took effect after all"
			}
		}
	}
	return r
}

// workflowCancelledEvent is the timeline entry opledger.Ledger.CancelWorkflow
// adds to the failed operation of the step it gives up on a workflow at.
const workflowCancelledEvent = "workflow cancelled"

// nextDecision is what comes next for op and why, a command it names
// with the flags again (backendFlags.again); whether a retry is due is
// told by now, the ledger's clock (this machine's when zero).
func nextDecision(op *opledger.Operation, again string, now time.Time) (string, string) {
	if now.IsZero() {
		now = time.Now()
	}
	owner := op.Owner
	if owner == "" {
		owner = "the operator"
	}
	if op.Tombstoned {
		return "none", "compacted by retention: only its outcome is kept, and no decision can change it"
	}
	switch op.State {
	case opledger.StateAwaitingApproval:
		return "approve or revise", fmt.Sprintf("version %d must be approved before any attempt: opledger ops approve %s --version %d --fingerprint %s%s",
			op.Version, op.Key, op.Version, op.Fingerprint, again)
	case opledger.StatePending:
		if proxied(op) {
			// The proxy forwards a request only when a caller sends it
			// (docs/proxy.md): no worker claims its operations.
			when := ""
			if op.NotBefore != nil && op.NotBefore.After(now) {
				when = ", not before " + utc(*op.NotBefore)
			}
			return "the caller's repeat", "the proxy forwards it again only when its caller repeats the request (the same Idempotency-Key and credential)" +
				when + "; nothing else sends it. If the caller gave up: opledger ops cancel " + op.Key + " --reason TEXT" + again
		}
		if op.NotBefore != nil && op.NotBefore.After(now) {
			return "wait", "retry scheduled, not before " + utc(*op.NotBefore)
		}
		return "a worker claims it", "it is due now"
	case opledger.StateInProgress:
		lease := "-"
		if op.LeaseExpiresAt != nil {
			lease = utc(*op.LeaseExpiresAt)
		}
		return "wait for the worker", "it holds the lease until " + lease + "; if it vanishes the lease decides"
	case opledger.StateUncertain:
		return "reconcile, do not resend", "the call may have taken effect: look it up at " + op.Destination + " or retry only under its documented protection"
	case opledger.StateHeld:
		review := ""
		if op.ReviewBy != nil {
			review = " by " + utc(*op.ReviewBy)
		}
		return owner + " decides" + review, "automation cannot tell whether the effect happened: mark succeeded with the reference found, authorize a retry, or cancel"
	case opledger.StateFailed:
		switch op.FailureKind {
		case opledger.FailureCancelled:
			return "none", "cancelled by an operator, who may still authorize a retry, or mark it succeeded with a reference found"
		case opledger.FailureExhausted:
			return owner + " decides", "retries exhausted (" + op.LastError + "): check the destination, then authorize a retry, or mark it succeeded if the effect is there; left as it is, nothing more is sent"
		}
		return owner + " decides", "the destination refused the content (" + op.LastError + "): repair the cause, then authorize a retry; left as it is, nothing more is sent (a correction of the content is a new operation)"
	case opledger.StateSucceeded:
		return "none", "effect confirmed; repeats replay reference " + op.DestinationRef
	}
	return "-", "-"
}

// proxied reports whether op was recorded by opledger proxy: its action
// is the proxy's, and its destination an upstream's (proxy:NAME).
func proxied(op *opledger.Operation) bool {
	return op.Action == proxy.Action && strings.HasPrefix(op.Destination, "proxy:")
}

// utc is t as ops show prints a time in a sentence: RFC 3339 in UTC, to
// the second, marked Z, whatever location t came in (a server's answer
// with an offset, a ledger's Clock), so that no two of its times read in
// different zones.
func utc(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// utcMillis is t as ops show prints it in its attempts and timeline: the
// date and the time in UTC to the millisecond, marked Z.
func utcMillis(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

// writeShow prints ops show's text. Every stored value goes through cell,
// so that one value is one line or table cell whatever it holds.
func writeShow(w io.Writer, d *opsDetail, rec replayDecision) error {
	op := d.Operation
	fmt.Fprintf(w, "%s  %s", cell(op.Key), cell(string(op.State)))
	if op.FailureKind != "" {
		fmt.Fprintf(w, " (%s)", cell(string(op.FailureKind)))
	}
	if op.Tombstoned {
		return writeTombstone(w, op, rec)
	}
	fmt.Fprintf(w, " since %s", utc(op.StateSince))
	fmt.Fprintf(w, "\n  action %s → %s, owner %s\n", cell(op.Action), cell(op.Destination), cell(dash(op.Owner)))
	payload, _ := json.Marshal(op) // masks sensitive fields
	var masked struct {
		Payload json.RawMessage `json:"payload"`
	}
	_ = json.Unmarshal(payload, &masked)
	fmt.Fprintf(w, "  payload %s\n", cell(string(masked.Payload)))
	if op.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", cell(op.LastError))
	}
	// JSON null is no response: the API gives one so, and the client
	// keeps it as it came.
	if len(op.Response) > 0 && string(op.Response) != "null" {
		// What the destination answered (a refusal says what to repair),
		// masked as the payload is, and cut short on one line.
		fmt.Fprintf(w, "  response %s\n", cell(shortened(string(op.Response), shownResponseBytes)))
	}
	if op.DuplicateEffects > 0 {
		fmt.Fprintf(w, "  DUPLICATE EFFECTS DETECTED: %d\n", op.DuplicateEffects)
	}
	fmt.Fprintln(w, "\nAttempts:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tVERSION\tID\tWORKER\tCLAIMED\tDISPATCHED\tOUTCOME\tREF\tERROR")
	for _, a := range d.Attempts {
		disp := "-"
		if a.DispatchedAt != nil {
			disp = utcMillis(*a.DispatchedAt)
		}
		outcome := dash(a.Outcome)
		if a.Stale {
			outcome += " (stale)"
		}
		if a.LateOutcome != "" {
			outcome += ", late report " + a.LateOutcome
		}
		version := "-" // claimed before attempts kept it
		if a.Version > 0 {
			version = strconv.FormatInt(a.Version, 10)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Number, version, cell(a.ID), cell(a.Worker), utcMillis(a.ClaimedAt), disp,
			cell(outcome), cell(dash(a.DestinationRef)), cell(dash(a.Error)))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nTimeline:")
	// The actors' column is as wide as the longest ("maria (command line
	// on ops-host)"), at least 12.
	width := 12
	for _, e := range d.Timeline {
		width = max(width, utf8.RuneCountInString(cell(e.Actor)))
	}
	for _, e := range d.Timeline {
		move := ""
		if e.To != "" {
			move = fmt.Sprintf(" [%s → %s]", cell(dash(string(e.From))), cell(string(e.To)))
		}
		actor := cell(e.Actor)
		fmt.Fprintf(w, "  %s  %s%s %s%s", utcMillis(e.At), actor,
			strings.Repeat(" ", width-utf8.RuneCountInString(actor)), cell(e.Event), move)
		if e.Evidence != "" {
			fmt.Fprintf(w, ": %s", cell(e.Evidence))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nReplay decision record:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range [][2]string{
		{"operation key", rec.OperationKey}, {"approved version", rec.ApprovedVersion},
		{"current attempt", rec.CurrentAttempt}, {"last confirmed step", rec.LastConfirmedStep},
		{"destination reference", rec.DestinationRef}, {"result", rec.Result},
		{"deduplication support", rec.DuplicateProtected}, {"next decision", rec.NextDecision}, {"reason", rec.Reason},
	} {
		if row[1] == "" && row[0] == "deduplication support" {
			continue // through a server, nothing known of it
		}
		fmt.Fprintf(tw, "  %s:\t%s\n", row[0], cell(row[1]))
	}
	return tw.Flush()
}

// writeTombstone prints the rest of ops show's text for a compacted
// operation, after its key and state: what retention kept of it.
func writeTombstone(w io.Writer, op *opledger.Operation, rec replayDecision) error {
	fmt.Fprintf(w, ", compacted by retention\n")
	fmt.Fprintf(w, "  recorded %s, finished %s\n", utc(op.CreatedAt), utc(op.UpdatedAt))
	fmt.Fprintf(w, "  version %d, %s\n", op.Version, cell(op.Fingerprint))
	fmt.Fprintf(w, "  destination reference %s\n", cell(dash(op.DestinationRef)))
	if op.AttemptCount > 0 {
		fmt.Fprintf(w, "  attempts %d\n", op.AttemptCount)
	}
	if op.DuplicateEffects > 0 {
		fmt.Fprintf(w, "  DUPLICATE EFFECTS DETECTED: %d\n", op.DuplicateEffects)
	}
	fmt.Fprintf(w, "  its payload, attempts and timeline were removed; a repeat of its key is still recognised\n")
	fmt.Fprintf(w, "\nNext decision: %s (%s)\n", cell(rec.NextDecision), cell(rec.Reason))
	return nil
}

func newOpsResolveCmd() *cobra.Command {
	var (
		bf                  backendFlags
		succeeded           bool
		ref, reason, opName string
	)
	cmd := &cobra.Command{
		Use:     "resolve KEY --succeeded --ref REF --reason TEXT",
		Short:   "Mark an operation succeeded with the reference found at the destination",
		Example: `  opledger ops resolve intake:I17:create --succeeded --ref H42 --reason "found H42 in the CRM, matches submission 847"`,
		Args:    exactlyOneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !succeeded {
				return usageError{errors.New("resolve needs --succeeded (to retry or cancel use 'ops retry' or 'ops cancel')")}
			}
			if ref == "" {
				return usageError{errors.New("--ref is required: the reference of the effect found at the destination")}
			}
			return decide(cmd, &bf, args[0], opledger.Decision{Kind: opledger.DecisionMarkSucceeded, DestinationRef: ref, Reason: reason, Operator: opName})
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&succeeded, "succeeded", false, "the effect happened")
	cmd.Flags().StringVar(&ref, "ref", "", "destination reference of the effect")
	addReasonFlags(cmd, &reason, &opName)
	return cmd
}

func addReasonFlags(cmd *cobra.Command, reason, operator *string) {
	cmd.Flags().StringVar(reason, "reason", "", "why (required): what you checked and found")
	cmd.Flags().StringVar(operator, "operator", defaultOperator(), "who decides (env USER)")
}

// checkReasonFlags refuses a decision's blank --reason (asking for what
// was checked and why it is right: why) or blank --operator.
func checkReasonFlags(reason, operator, why string) error {
	if strings.TrimSpace(reason) == "" {
		return usageError{errors.New("--reason is required: write what you checked and why " + why)}
	}
	if strings.TrimSpace(operator) == "" {
		// Empty only when given so (the default is $USER, else
		// "operator"): a decision names who made it.
		return usageError{errors.New("--operator is empty: give who decides, or leave the flag out for $USER")}
	}
	return nil
}

func newOpsDecisionCmd(name string, kind opledger.DecisionKind) *cobra.Command {
	var (
		bf             backendFlags
		reason, opName string
	)
	short := map[opledger.DecisionKind]string{
		opledger.DecisionAuthorizeRetry: "Authorize one more attempt of a held, uncertain or failed operation",
		opledger.DecisionCancel:         "Cancel an operation that is held, uncertain, pending or awaiting approval",
	}[kind]
	example := map[opledger.DecisionKind]string{
		opledger.DecisionAuthorizeRetry: "checked the CRM: no record, safe to send again",
		opledger.DecisionCancel:         "order withdrawn by the customer",
	}[kind]
	cmd := &cobra.Command{
		Use:     name + " KEY --reason TEXT",
		Short:   short,
		Example: fmt.Sprintf(`  opledger ops %s intake:I17:create --reason %q`, name, example),
		Args:    exactlyOneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			return decide(cmd, &bf, args[0], opledger.Decision{Kind: kind, Reason: reason, Operator: opName})
		},
	}
	bf.add(cmd)
	addReasonFlags(cmd, &reason, &opName)
	return cmd
}

// stateOf is op's state as a decision's answer names it: with its kind
// of failure ("failed (cancelled)").
func stateOf(op *opledger.Operation) string {
	if op.FailureKind != "" {
		return string(op.State) + " (" + string(op.FailureKind) + ")"
	}
	return string(op.State)
}

func decide(cmd *cobra.Command, bf *backendFlags, key string, d opledger.Decision) error {
	if err := checkReasonFlags(d.Reason, d.Operator, "this is the right decision"); err != nil {
		return err
	}
	b, err := bf.open(cmd.Context())
	if err != nil {
		return err
	}
	defer b.Close()
	op, replayed, err := b.Resolve(cmd.Context(), key, d)
	return decided(cmd, op, replayed, notRecordedStep(cmd.Context(), b, key, bf.again(), err), "decision", "")
}

// notRecordedStep is err, or, when err says key was not found and key
// names a workflow's step not recorded yet, an error that says so and
// gives the workflows show to run, as ops show does: the tenant hint
// would send the operator to look elsewhere.
func notRecordedStep(ctx context.Context, b opsBackend, key, again string, err error) error {
	if !errors.Is(err, opledger.ErrNotFound) {
		return err
	}
	var getWorkflow getWorkflowFunc
	switch b := b.(type) {
	case ledgerBackend:
		getWorkflow = b.l.GetWorkflow
	case serverBackend:
		getWorkflow = b.c.GetWorkflow
	default:
		return err
	}
	if msg, ok := stepNotRecorded(ctx, getWorkflow, key, again); ok {
		return keyNotFound(msg)
	}
	return err
}

// decided prints what a decision or approval (what) left the operation
// as, with done after its state when it recorded one, and makes err a
// command's error. A replay exits 0: a script that lost the first answer
// and sent it again learns it holds, as the first answer would have
// said.
func decided(cmd *cobra.Command, op *opledger.Operation, replayed bool, err error, what, done string) error {
	if err != nil {
		return refusedInput(err)
	}
	if replayed {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is %s: this %s was already recorded, nothing changed\n", cell(op.Key), cell(stateOf(op)), what)
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is now %s%s\n", cell(op.Key), cell(stateOf(op)), done)
	return err
}

func newOpsApproveCmd() *cobra.Command {
	var (
		bf       backendFlags
		approval opledger.Approval
	)
	cmd := &cobra.Command{
		Use:   "approve KEY --version N --fingerprint FP",
		Short: "Approve exactly the content of an operation awaiting approval",
		Long: `approve lets an operation that awaits approval be attempted. It names the version
and fingerprint 'ops show' printed ("approved version"), so that the content approved
is the content that was looked at: if it was revised since, the approval is refused
and nothing changes.`,
		Example: `  opledger ops show intake:I17:create
  opledger ops approve intake:I17:create --version 2 --fingerprint sha256:9f2c…`,
		Args: exactlyOneKey,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkApproval(cmd, approval, "ops show"); err != nil {
				return err
			}
			b, err := bf.open(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			op, replayed, err := b.Approve(cmd.Context(), args[0], approval)
			err = notRecordedStep(cmd.Context(), b, args[0], bf.again(), err)
			done := ""
			if err == nil {
				done = fmt.Sprintf(": version %d approved", op.Version)
			}
			return decided(cmd, op, replayed, err, "approval", done)
		},
	}
	bf.add(cmd)
	addApprovalFlags(cmd, &approval, "ops show")
	return cmd
}

// addApprovalFlags adds the flags of an approval of the content the
// command shown printed.
func addApprovalFlags(cmd *cobra.Command, a *opledger.Approval, shown string) {
	cmd.Flags().Int64Var(&a.Version, "version", 0, "the version approved, as '"+shown+"' printed it (required)")
	cmd.Flags().StringVar(&a.Fingerprint, "fingerprint", "", "the fingerprint of that version (required)")
	cmd.Flags().StringVar(&a.Approver, "approver", defaultOperator(), "who approves (env USER)")
}

// checkApproval refuses an approval that does not name the content the
// command shown printed (no --version, or one below 1, which no content
// has), or no approver.
func checkApproval(cmd *cobra.Command, a opledger.Approval, shown string) error {
	switch {
	case !cmd.Flags().Changed("version"):
		return usageError{fmt.Errorf("--version is required: the version '%s' gave (1 or more)", shown)}
	case a.Version < 1:
		return usageError{fmt.Errorf("--version must be 1 or more, the version '%s' gave, got %d", shown, a.Version)}
	}
	if a.Fingerprint == "" {
		return usageError{fmt.Errorf("--fingerprint is required: the fingerprint '%s' gave, sha256:…", shown)}
	}
	if strings.TrimSpace(a.Approver) == "" {
		return usageError{errors.New("--approver is empty: give who approves, or leave the flag out for $USER")}
	}
	return nil
}

// shownResponseBytes is how much of a saved response ops show prints.
const shownResponseBytes = 400

// shortened is s cut to at most n bytes, at a character's start, with a
// note of its whole length when it was cut.
func shortened(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes; --json gives it all)", s[:cut], len(s))
}
