package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// workflowsSource reads and moves workflows in a store or through a
// server: *opledger.Ledger and *client.Client both are one.
type workflowsSource interface {
	ListWorkflows(ctx context.Context, o opledger.WorkflowListOptions) (*opledger.WorkflowPage, error)
	StuckWorkflows(ctx context.Context, limit int) ([]*opledger.Workflow, error)
	GetWorkflow(ctx context.Context, key string) (*opledger.Workflow, error)
	ResumeWorkflow(ctx context.Context, key string) (*opledger.Workflow, error)
	ApproveWorkflowStep(ctx context.Context, key, step string, a opledger.Approval) (*opledger.Workflow, bool, error)
	ReviseWorkflowStep(ctx context.Context, key, step string, r opledger.Revision) (*opledger.Workflow, bool, error)
	CancelWorkflow(ctx context.Context, key string, c opledger.WorkflowCancel) (*opledger.Workflow, bool, error)
}

var (
	_ workflowsSource = (*client.Client)(nil)
	_ workflowsSource = (*opledger.Ledger)(nil)
)

// workflowsBackend is a workflowsSource opened from backend flags. A store
// opened directly names the command line in what it records, as ops
// decisions do, and says which tenant a key was not found in.
type workflowsBackend struct {
	workflowsSource
	ops opsBackend
}

func (f *backendFlags) openWorkflows(ctx context.Context) (*workflowsBackend, error) {
	b, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	switch b := b.(type) {
	case serverBackend:
		return &workflowsBackend{b.c, b}, nil
	case ledgerBackend:
		return &workflowsBackend{b.l, b}, nil
	}
	b.Close()
	return nil, fmt.Errorf("no workflows in a backend of type %T", b)
}

func (b *workflowsBackend) Close() error { return b.ops.Close() }

// where names the tenant of a store a workflow was not found in.
func (b *workflowsBackend) where(err error) error {
	if lb, ok := b.ops.(ledgerBackend); ok {
		return lb.where(err)
	}
	return err
}

// notFound says, of an error naming workflow key not found, that key
// names a step of a workflow, when it does (with the commands that show
// it, with the flags again), as workflows show says; otherwise where.
func (b *workflowsBackend) notFound(ctx context.Context, key, again string, err error) error {
	if !errors.Is(err, opledger.ErrNotFound) {
		return err
	}
	if msg, ok := stepNotWorkflow(ctx, b.GetWorkflow, key, again); ok {
		return keyNotFound(msg)
	}
	return b.where(err)
}

// stepWhere says, of an error naming something not found when a step
// was decided, whether the workflow lacks the step (naming its steps) or
// is not there (notFound).
func (b *workflowsBackend) stepWhere(ctx context.Context, key, step, again string, err error) error {
	if !errors.Is(err, opledger.ErrNotFound) {
		return err
	}
	wf, werr := b.GetWorkflow(ctx, key)
	if werr != nil {
		return b.notFound(ctx, key, again, err)
	}
	names := make([]string, len(wf.Steps))
	for i, s := range wf.Steps {
		names[i] = s.Name
	}
	return fmt.Errorf("workflow %s has no step %s (its steps: %s): %w", key, step, strings.Join(names, ", "), opledger.ErrNotFound)
}

func newWorkflowsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflows",
		Short: "List and show workflows, resume or cancel one, approve or revise a step",
		Long: `workflows works against a store directly (--db) or through a server (--server URL
--token T), as ops does. A workflow's steps are operations keyed WORKFLOW/STEP: 'ops show'
gives a step's attempts and timeline, and 'ops retry', 'ops resolve' and 'ops cancel'
decide a held, uncertain or failed step. 'workflows cancel' gives up on a workflow whose
next step cannot be recorded (a stuck one) or whose step failed: its steps not recorded
yet are never recorded.`,
		Example: `  opledger workflows list --open
  opledger workflows show onboarding:C-17
  opledger workflows resume onboarding:C-17
  opledger workflows approve onboarding:C-17 welcome_mail --version 1 --fingerprint sha256:9f2c…
  opledger workflows revise onboarding:C-17 welcome_mail --version 2 --payload '{"to":"{steps.create.ref}"}'
  opledger workflows cancel onboarding:C-17 --reason "customer withdrew; nothing more to send"`,
	}
	cmd.AddCommand(newWorkflowsListCmd(), newWorkflowsShowCmd(), newWorkflowsResumeCmd(), newWorkflowsApproveCmd(),
		newWorkflowsReviseCmd(), newWorkflowsCancelCmd())
	return cmd
}

func newWorkflowsListCmd() *cobra.Command {
	var (
		bf                  backendFlags
		prefix, cursor      string
		limit               int
		open, stuck, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflows by key, with their status and current step",
		Example: `  opledger workflows list --open
  opledger workflows list --stuck
  opledger workflows list --prefix onboarding: --json | jq -r 'select(.status=="held") | .key'
  opledger workflows list --server http://127.0.0.1:8080 --token $TOKEN --open`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkLimit(limit, opledger.MaxWorkflowListLimit); err != nil {
				return err
			}
			if err := nonEmptyFlags(cmd, "prefix", "cursor"); err != nil {
				return err
			}
			if prefix != "" {
				if err := opledger.ValidateKey(prefix); err != nil {
					return usageError{fmt.Errorf("--prefix: %w", err)}
				}
			}
			if stuck && (prefix != "" || open || cursor != "") {
				return usageError{errors.New("--stuck takes only --limit: not --prefix, --open or --cursor")}
			}
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			var page *opledger.WorkflowPage
			if stuck {
				page = &opledger.WorkflowPage{}
				page.Items, err = b.StuckWorkflows(cmd.Context(), limit)
			} else {
				page, err = b.ListWorkflows(cmd.Context(), opledger.WorkflowListOptions{Prefix: prefix, Open: open, Limit: limit, Cursor: cursor})
			}
			if err != nil {
				return refusedInput(err) // a cursor of another list
			}
			out := cmd.OutOrStdout()
			if asJSON {
				err = writeJSONLines(out, page.Items)
			} else {
				if stuck && len(page.Items) > 0 {
					// The client gives the stuck list's items alone:
					// their UPDATED needs the ledger's clock read apart.
					page.Now = ledgerNow(cmd.Context(), b.ops)
				}
				err = writeWorkflowsTable(out, page.Items, page.Now)
			}
			if err != nil {
				return err
			}
			note := bf.emptyTenantNote("workflow", "")
			if err := noteEmptyList(cmd, len(page.Items) == 0, cursor, "workflows", note, func() (bool, error) {
				some, err := b.ListWorkflows(cmd.Context(), opledger.WorkflowListOptions{Limit: 1})
				return err == nil && len(some.Items) > 0, err
			}, "prefix", "open", "stuck"); err != nil {
				return err
			}
			if stuck && len(page.Items) == limit {
				// One page, without a cursor: revising these takes them
				// off the list.
				hint := "more may be stuck: 'ops stats' counts them; settle these first ('workflows show KEY' says how: a revision, or, " +
					"for a destination that no longer serves the tenant, serving it again and a resume)"
				if limit < opledger.MaxWorkflowListLimit {
					hint += fmt.Sprintf(", or raise --limit (at most %d)", opledger.MaxWorkflowListLimit)
				}
				_, err := fmt.Fprintln(cmd.ErrOrStderr(), hint)
				return err
			}
			return morePages(cmd, page.NextCursor)
		},
	}
	bf.add(cmd)
	cmd.Flags().StringVar(&prefix, "prefix", "", "only workflows whose key starts with this, e.g. onboarding:")
	cmd.Flags().BoolVar(&open, "open", false, "only workflows not finished (some step has not succeeded)")
	cmd.Flags().BoolVar(&stuck, "stuck", false, "only workflows that cannot go on by themselves (a step reads what its earlier step did not give, or its destination no longer serves the tenant); one page")
	addLimitFlag(cmd, &limit, opledger.DefaultWorkflowListLimit, opledger.MaxWorkflowListLimit)
	cmd.Flags().StringVar(&cursor, "cursor", "", cursorUsage)
	cmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines for scripts (each workflow as 'workflows show --json' gives it)")
	return cmd
}

// shownReasonRunes is how much of a workflow's reason workflows list
// prints; show prints it all.
const shownReasonRunes = 80

// writeWorkflowsTable prints workflows as workflows list does. UPDATED
// is measured against now, the ledger's clock when they were read
// (opledger.WorkflowPage.Now), as ops list's AGE is (writeOpsTable).
func writeWorkflowsTable(w io.Writer, wfs []*opledger.Workflow, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tSTATUS\tCURRENT STEP\tDONE\tOWNER\tUPDATED\tREASON")
	if now.IsZero() {
		now = time.Now()
	}
	for _, wf := range wfs {
		done := 0
		for _, st := range wf.Steps {
			if st.State == opledger.StepState(opledger.StateSucceeded) {
				done++
			}
		}
		reason := []rune(wf.Reason)
		if len(reason) > shownReasonRunes {
			reason = append(reason[:shownReasonRunes-1], '…')
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s ago\t%s\n", cell(wf.Key), cell(string(wf.Status)), cell(dash(wf.CurrentStep)),
			done, len(wf.Steps), cell(dash(wf.Owner)), age(now.Sub(wf.UpdatedAt)), cell(string(reason)))
	}
	return tw.Flush()
}

// workflowArgs checks the arguments of a command that takes one workflow
// key (and, with step, a step name after it).
func workflowArgs(step bool) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		want, what := 1, "give exactly one workflow key"
		if step {
			want, what = 2, "give the workflow key and the step name"
		}
		if len(args) != want {
			return usageError{errors.New(what)}
		}
		if err := opledger.ValidateKey(args[0]); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func newWorkflowsShowCmd() *cobra.Command {
	var (
		bf     backendFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show KEY",
		Short: "Show a workflow: its status and why, each step's state, and what to do next",
		Example: `  opledger workflows show onboarding:C-17
  opledger workflows show onboarding:C-17 --json`,
		Args: workflowArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			wf, err := b.GetWorkflow(cmd.Context(), args[0])
			if errors.Is(err, opledger.ErrNotFound) {
				// A step's key given for its workflow's: said so, rather
				// than sending the operator to look in another tenant.
				if msg, ok := stepNotWorkflow(cmd.Context(), b.GetWorkflow, args[0], bf.again()); ok {
					return keyNotFound(msg)
				}
			}
			if err != nil {
				return refusedInput(b.where(err))
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(wf) // masks sensitive fields, as the API does
			}
			return writeWorkflow(cmd.OutOrStdout(), wf, bf.again())
		},
	}
	bf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON document, as GET /v1/workflows/{key} gives it")
	return cmd
}

// writeWorkflow prints a workflow for an operator: status and reason,
// the steps, and the command that moves it on, when one does.
func writeWorkflow(w io.Writer, wf *opledger.Workflow, again string) error {
	fmt.Fprintf(w, "%s  %s\n  %s\n", cell(wf.Key), cell(string(wf.Status)), cell(wf.Reason))
	fmt.Fprintf(w, "  owner %s", cell(dash(wf.Owner)))
	if wf.SourceEvent != "" {
		fmt.Fprintf(w, ", started by event %s", cell(wf.SourceEvent))
	}
	fmt.Fprintf(w, ", created %s, updated %s\n", wf.CreatedAt.UTC().Format("2006-01-02 15:04:05Z"),
		wf.UpdatedAt.UTC().Format("2006-01-02 15:04:05Z"))
	if c := wf.Cancelled; c != nil {
		fmt.Fprintf(w, "  cancelled %s by %s at step %s: %s\n", c.At.UTC().Format("2006-01-02 15:04:05Z"),
			cell(c.Operator), cell(c.Step), cell(c.Reason))
	}
	fmt.Fprintln(w, "\nSteps:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTEP\tSTATE\tACTION\tVERSION\tATTEMPTS\tREF\tNOTE")
	for i, st := range wf.Steps {
		state, attempts, ref := string(st.State), "-", "-"
		if op := st.Operation; op != nil {
			op = op.Masked()
			state = stateOf(op)
			if !op.Tombstoned || op.AttemptCount > 0 { // a tombstone since migration 020 keeps its count
				attempts = fmt.Sprint(op.AttemptCount)
			}
			ref = dash(op.DestinationRef)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s → %s\t%d\t%s\t%s\t%s\n", i+1, cell(st.Name), cell(state), cell(st.Action),
			cell(st.Destination), st.Version, attempts, cell(ref), cell(dash(stepNote(st))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next := nextWorkflowCommand(wf, again); next != "" {
		fmt.Fprintf(w, "\nNext: %s\n", cell(next))
	}
	// Waiting steps that will need approval and can have it now.
	first := true
	for _, st := range wf.Steps {
		if st.State != opledger.StepWaiting || !st.RequiresApproval || st.Fingerprint == "" || st.PreApprovedBy != "" {
			continue
		}
		if first {
			fmt.Fprintln(w, "\nMay be approved ahead of its turn:")
			first = false
		}
		fmt.Fprintf(w, "  %s\n", cell(approveCommand(wf, st, again)))
	}
	return nil
}

// approveCommand is the command that approves st's content as shown, with
// the flags again (backendFlags.again).
func approveCommand(wf *opledger.Workflow, st *opledger.WorkflowStepStatus, again string) string {
	return fmt.Sprintf("opledger workflows approve %s %s --version %d --fingerprint %s%s", wf.Key, st.Name, st.Version, st.Fingerprint, again)
}

// stepNote is what else an operator needs to know of a step.
func stepNote(st *opledger.WorkflowStepStatus) string {
	var notes []string
	if st.WaitingFor != "" {
		notes = append(notes, "after "+st.WaitingFor)
	}
	switch {
	case st.PreApprovedBy != "":
		notes = append(notes, "approved ahead by "+st.PreApprovedBy)
	case st.RequiresApproval && st.State == opledger.StepWaiting:
		notes = append(notes, "needs approval")
	}
	if st.RevisedBy != "" {
		notes = append(notes, "revised by "+st.RevisedBy)
	}
	if op := st.Operation; op != nil && op.LastError != "" && st.State != opledger.StepState(opledger.StateSucceeded) {
		notes = append(notes, "last error: "+shortened(op.Masked().LastError, 120))
	}
	return strings.Join(notes, "; ")
}

// nextWorkflowCommand is the command that moves wf on from its status,
// with the flags again (backendFlags.again), or "" when it is running by
// itself or finished.
func nextWorkflowCommand(wf *opledger.Workflow, again string) string {
	cur := wf.Step(wf.CurrentStep)
	if cur == nil {
		return ""
	}
	switch wf.Status {
	case opledger.WorkflowAwaitingApproval:
		return approveCommand(wf, cur, again)
	case opledger.WorkflowHeld, opledger.WorkflowFailed:
		if cur.Operation == nil && wf.HoldCause == opledger.WorkflowHoldDestinationNotServing {
			// A revision keeps the step's destination: only serving
			// the tenant from it again, or giving up, moves it on.
			return fmt.Sprintf("configure destination %s to serve tenant %s, then: opledger workflows resume %s%s "+
				"(or give up: opledger workflows cancel %s --reason TEXT%s)",
				cur.Destination, wf.Tenant, wf.Key, again, wf.Key, again)
		}
		if cur.Operation == nil {
			// Its content cannot be filled: a person revises it, or
			// gives up on the workflow.
			return fmt.Sprintf("opledger workflows revise %s %s --version %d --payload JSON%s, with content that can be filled "+
				"(or give up: opledger workflows cancel %s --reason TEXT%s)",
				wf.Key, cur.Name, cur.Version+1, again, wf.Key, again)
		}
		if wf.Status == opledger.WorkflowFailed {
			// A failed operation can be retried or resolved, not
			// cancelled; the workflow can be given up on.
			return fmt.Sprintf("opledger ops show %s%s (then ops retry or ops resolve it, or give up: opledger workflows cancel %s --reason TEXT%s)",
				cur.Key, again, wf.Key, again)
		}
		return fmt.Sprintf("opledger ops show %s%s (then ops retry, resolve or cancel it)", cur.Key, again)
	case opledger.WorkflowRunning:
		if cur.Operation == nil {
			return "opledger workflows resume " + wf.Key + again
		}
	}
	return ""
}

func newWorkflowsResumeCmd() *cobra.Command {
	var bf backendFlags
	cmd := &cobra.Command{
		Use:   "resume KEY",
		Short: "Move a workflow on now: record its next step once the one before it succeeded",
		Long: `resume does now what the server's sweep does within its interval: when the current
step has succeeded, the next one is recorded with the content it was given (and the
results of earlier steps it names). Steps that succeeded are skipped and nothing is
sent again. A next step whose content cannot be filled holds the workflow: resume
then prints it held, with the reason, and exits 0.`,
		Example: `  opledger workflows resume onboarding:C-17`,
		Args:    workflowArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			wf, err := b.ResumeWorkflow(cmd.Context(), args[0])
			if _, ok := errors.AsType[*opledger.StepError](err); ok {
				// Held: its status says why, as the API answers.
				wf, err = b.GetWorkflow(cmd.Context(), args[0])
			}
			if err != nil {
				return refusedInput(b.notFound(cmd.Context(), args[0], bf.again(), err))
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is %s: %s\n", cell(wf.Key), cell(string(wf.Status)), cell(wf.Reason))
			return err
		},
	}
	bf.add(cmd)
	return cmd
}

func newWorkflowsApproveCmd() *cobra.Command {
	var (
		bf       backendFlags
		approval opledger.Approval
	)
	cmd := &cobra.Command{
		Use:   "approve KEY STEP --version N --fingerprint FP",
		Short: "Approve exactly the content of a step, recorded or still waiting",
		Long: `approve approves the version and fingerprint 'workflows show' printed for a step. A
recorded step awaiting approval may then be attempted. A waiting step whose content
names no earlier step's result may be approved ahead of its turn: it is recorded
approved when its turn comes, if its content is still the approved one. Content
revised since is refused and nothing changes.`,
		Example: `  opledger workflows show onboarding:C-17
  opledger workflows approve onboarding:C-17 welcome_mail --version 1 --fingerprint sha256:9f2c…`,
		Args: workflowArgs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkApproval(cmd, approval, "workflows show"); err != nil {
				return err
			}
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			wf, replayed, err := b.ApproveWorkflowStep(cmd.Context(), args[0], args[1], approval)
			if err != nil {
				return refusedInput(b.stepWhere(cmd.Context(), args[0], args[1], bf.again(), err))
			}
			out := cmd.OutOrStdout()
			if replayed {
				_, err = fmt.Fprintf(out, "%s step %s: this approval was already recorded, nothing changed; the workflow is %s\n",
					cell(wf.Key), cell(args[1]), cell(string(wf.Status)))
				return err
			}
			_, err = fmt.Fprintf(out, "%s step %s: version %d approved; the workflow is %s: %s\n", cell(wf.Key), cell(args[1]),
				approval.Version, cell(string(wf.Status)), cell(wf.Reason))
			return err
		},
	}
	bf.add(cmd)
	addApprovalFlags(cmd, &approval, "workflows show")
	return cmd
}

func newWorkflowsReviseCmd() *cobra.Command {
	var (
		bf      backendFlags
		payload string
		rev     opledger.Revision
	)
	cmd := &cobra.Command{
		Use:   "revise KEY STEP --version N --payload JSON",
		Short: "Give a step not yet dispatched new content, which then awaits approval",
		Long: `revise replaces the content of a step that has not been dispatched: a recorded step
(awaiting approval, or pending and never sent), or a step still waiting for its turn.
The payload may name earlier steps' results as at PutWorkflow ("{steps.NAME.ref}"):
a recorded step's are filled at once, a waiting step's when it is recorded.
The version must be above the current one. The step then awaits approval of exactly
that content ('workflows show' prints the approval to give). After a dispatch the
content is fixed: a correction is a new operation.`,
		Example: `  opledger workflows revise onboarding:C-17 welcome_mail --version 2 --payload '{"task":"{steps.create_task.ref}"}'
  opledger workflows revise onboarding:C-17 welcome_mail --version 3 --payload '{"to":"ana@example.com"}' --sensitive-field to`,
		Args: workflowArgs(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case !cmd.Flags().Changed("version"):
				return usageError{errors.New("--version is required: a version above the step's current one ('workflows show' gives it)")}
			case rev.Version < 2:
				return usageError{fmt.Errorf("--version %d is not above the step's current version: a revision is version 2 or more", rev.Version)}
			}
			if !cmd.Flags().Changed("payload") {
				return usageError{errors.New("--payload is required: the new content, JSON (null for none)")}
			}
			if err := nonEmptyFlags(cmd, "sensitive-field"); err != nil {
				return err
			}
			if !json.Valid([]byte(payload)) {
				return usageError{errors.New("--payload is not JSON")}
			}
			if strings.TrimSpace(rev.Actor) == "" {
				return usageError{errors.New("--actor is empty: give who revises, or leave the flag out for $USER")}
			}
			rev.Payload = json.RawMessage(payload)
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			wf, replayed, err := b.ReviseWorkflowStep(cmd.Context(), args[0], args[1], rev)
			if err != nil {
				return refusedInput(b.stepWhere(cmd.Context(), args[0], args[1], bf.again(), err))
			}
			if replayed {
				// A repeat adds the paths it names to the step's
				// (ReviseWorkflowStep): that much may have changed.
				changed := ", nothing changed"
				if len(rev.SensitiveFields) > 0 {
					changed = "; its --sensitive-field paths are masked from now on, nothing else changed"
				}
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s step %s: this revision was already recorded%s; the workflow is %s\n",
					cell(wf.Key), cell(args[1]), changed, cell(string(wf.Status)))
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s step %s: revised to version %d, which needs an approval of exactly that content; the workflow is %s: %s\n",
				cell(wf.Key), cell(args[1]), rev.Version, cell(string(wf.Status)), cell(wf.Reason))
			return err
		},
	}
	bf.add(cmd)
	cmd.Flags().Int64Var(&rev.Version, "version", 0, "the new version, above the current one (required)")
	cmd.Flags().StringVar(&payload, "payload", "", "the new content, JSON (required)")
	cmd.Flags().StringVar(&rev.Actor, "actor", defaultOperator(), "who revises (env USER)")
	cmd.Flags().StringSliceVar(&rev.SensitiveFields, "sensitive-field", nil, "a payload path to mask from now on, e.g. customer.email (repeat the flag, or separate with commas); added to the step's, none removed")
	return cmd
}

func newWorkflowsCancelCmd() *cobra.Command {
	var (
		bf             backendFlags
		reason, opName string
	)
	cmd := &cobra.Command{
		Use:   "cancel KEY --reason TEXT",
		Short: "Give up on a workflow whose next step cannot be recorded, or whose step failed",
		Long: `cancel ends a workflow whose current step has no operation, most often a stuck one
(its step cannot be recorded from the earlier steps' results), or whose current step's
operation failed (rejected, exhausted or cancelled): the workflow is cancelled at that
step, the steps not recorded yet are never recorded, and it leaves the stuck list and
figures and the open workflows. Steps already recorded are not changed. The decision
(who, why, when) is kept on the workflow and shown by 'workflows show'. A workflow whose
current step's operation has not finished (awaiting approval, pending, in progress,
uncertain, held) is refused: cancel or settle that operation first ('ops cancel KEY/STEP'
fails it, and the workflow with it). The same decision again (same operator and reason)
records nothing.`,
		Example: `  opledger workflows cancel onboarding:C-17 --reason "customer withdrew; nothing more to send"`,
		Args:    workflowArgs(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkReasonFlags(reason, opName, "the workflow is given up on"); err != nil {
				return err
			}
			b, err := bf.openWorkflows(cmd.Context())
			if err != nil {
				return err
			}
			defer b.Close()
			wf, replayed, err := b.CancelWorkflow(cmd.Context(), args[0], opledger.WorkflowCancel{Reason: reason, Operator: opName})
			if err != nil {
				return refusedInput(b.notFound(cmd.Context(), args[0], bf.again(), err))
			}
			if replayed {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is %s: this decision was already recorded, nothing changed\n",
					cell(wf.Key), cell(string(wf.Status)))
				return err
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s is now %s: %s\n", cell(wf.Key), cell(string(wf.Status)), cell(wf.Reason))
			return err
		},
	}
	bf.add(cmd)
	addReasonFlags(cmd, &reason, &opName)
	return cmd
}
