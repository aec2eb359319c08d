package cli_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestWorkflowsCommands: workflows list, show, resume and approve, on
// the store and through a server: what each prints, that show names the
// command that moves a workflow on, that a repeated approval exits 0
// with nothing changed, that refusals exit non-zero with one line, and
// that a sensitive field never reaches the output.
func TestWorkflowsCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	yes := true
	spec := opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
		{Name: "create_task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"title":"Call"}`)},
		{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"ana@example.invalid","task":"{steps.create_task.ref}"}`),
			SensitiveFields: []string{"to"}},
		{Name: "note", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`{"t":1}`), RequiresApproval: &yes},
	}}
	for _, k := range []string{"onb:C-2", "onb:C-1", "pay:1"} {
		_, _, err := l.PutWorkflow(ctx, k, spec)
		require.NoError(t, err)
	}
	c, err := l.Claim(ctx, "onb:C-1/create_task", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "onb:C-1/create_task", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "T1"})
	require.NoError(t, err)
	// stuck:1's second step reads a member its first step's answer lacks.
	_, _, err = l.PutWorkflow(ctx, "stuck:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}})
	require.NoError(t, err)
	c, err = l.Claim(ctx, "stuck:1/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "stuck:1/a", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	// list: key order, a prefix, paging.
	out, errOut, code := run(t, "workflows", "list", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^KEY +STATUS +CURRENT STEP +DONE +OWNER +UPDATED +REASON\n`+
		`onb:C-1 +running +mail +1/3 +ops +\S+ ago +step mail is due to be recorded; resume the workflow\n`+
		`onb:C-2 +running +create_task +0/3 .*\npay:1 `, out)
	out, errOut, code = run(t, "workflows", "list", "--db", dsn, "--prefix", "onb:", "--limit", "1", "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"key":"onb:C-1"`)
	require.NotContains(t, out, "onb:C-2")
	require.NotContains(t, out, "example.invalid")
	cursor := strings.TrimSpace(strings.TrimPrefix(errOut, "more: run it again with --cursor "))
	out, errOut, code = run(t, "workflows", "list", "--db", dsn, "--prefix", "onb:", "--limit", "1", "--cursor", cursor)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "onb:C-2")
	require.NotContains(t, out, "onb:C-1")
	require.Empty(t, errOut, "the last page")

	// A failed step: show says to retry or resolve it, not to cancel it
	// (a failed operation cannot be cancelled).
	_, errOut, code = run(t, "ops", "cancel", "pay:1/create_task", "--reason", "customer withdrew", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	out, errOut, code = run(t, "workflows", "show", "pay:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "pay:1  failed\n")
	// Each command it suggests names the ledger as this one did, so that
	// it acts there when pasted.
	require.Contains(t, out, "Next: opledger ops show pay:1/create_task --db "+dsn+" (then ops retry or ops resolve it, "+
		"or give up: opledger workflows cancel pay:1 --reason TEXT --db "+dsn+")\n")

	// show, then resume as it says.
	out, errOut, code = run(t, "workflows", "show", "onb:C-1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Next: opledger workflows resume onb:C-1 --db "+dsn+"\n")
	require.Regexp(t, `1 +create_task +succeeded +crm.create_task → crm +1 +1 +T1 +-\n`, out)
	require.Regexp(t, `3 +note +waiting +crm.note → crm +1 +- +- +after mail; needs approval\n`, out)
	ahead := regexp.MustCompile(`opledger workflows approve onb:C-1 note --version 1 --fingerprint sha256:[0-9a-f]+`).FindString(out)
	require.NotEmpty(t, ahead, "show says how to approve the waiting step ahead of its turn")
	out, errOut, code = run(t, "workflows", "resume", "onb:C-1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "onb:C-1 is running: step mail is pending\n", out)
	out, errOut, code = run(t, "workflows", "show", "onb:C-1", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"state": "pending"`)
	require.NotContains(t, out, "example.invalid")

	// A next step that cannot be filled: resume says it is held, and why,
	// and exits 0 (the API answers 200); show says what to do.
	out, errOut, code = run(t, "workflows", "resume", "stuck:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^stuck:1 is held: step b cannot be recorded: .*url.*; revise the step\n$`, out)
	out, errOut, code = run(t, "workflows", "show", "stuck:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "Next: opledger workflows revise stuck:1 b --version 2 --payload JSON --db "+dsn+", with content that can be filled "+
		"(or give up: opledger workflows cancel stuck:1 --reason TEXT --db "+dsn+")\n")
	// list --stuck finds it, and only it; ops stats counts it.
	out, errOut, code = run(t, "workflows", "list", "--stuck", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^KEY .*\nstuck:1 +held +b +1/2 .*step b cannot be recorded`, out)
	require.Equal(t, 2, strings.Count(out, "\n"), "the header and stuck:1: %s", out)
	require.Empty(t, errOut, "all of them")
	_, errOut, code = run(t, "workflows", "list", "--stuck", "--limit", "1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "more may be stuck: 'ops stats' counts them; settle these first ('workflows show KEY' says how: a revision, or, for a destination that no longer serves the tenant, serving it again and a resume), or raise --limit (at most 200)\n", errOut)
	out, errOut, code = run(t, "ops", "stats", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^Workflows that cannot go on: +1 \(workflows list --stuck names them\)$`, out)
	// Revised as it says, resumed, approved as show then says.
	revise := []string{"workflows", "revise", "stuck:1", "b", "--version", "2", "--payload", `{"link":"{steps.a.ref}"}`, "--db", dsn}
	out, errOut, code = run(t, revise...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "stuck:1 step b: revised to version 2, which needs an approval of exactly that content; the workflow is running: step b is due to be recorded; resume the workflow\n", out)
	out, errOut, code = run(t, revise...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "stuck:1 step b: this revision was already recorded, nothing changed; the workflow is running\n", out)
	out, errOut, code = run(t, "workflows", "list", "--stuck", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, out, "revised, it can go on")
	out, errOut, code = run(t, "workflows", "resume", "stuck:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^stuck:1 is awaiting_approval: step b awaits approval of version 2 \(sha256:[0-9a-f]+\)\n$`, out)
	out, errOut, code = run(t, "workflows", "show", "stuck:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	approve := regexp.MustCompile(`Next: (opledger workflows approve stuck:1 b --version 2 --fingerprint sha256:[0-9a-f]+ --db (\S+))\n`).FindStringSubmatch(out)
	require.Len(t, approve, 3, out)
	require.Equal(t, dsn, approve[2])
	out, errOut, code = run(t, strings.Fields(approve[1])[1:]...) // as printed
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "stuck:1 step b: version 2 approved; the workflow is running: step b is pending")
	for _, bad := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--version", "3"}, "--payload is required"},
		{[]string{"--version", "3", "--payload", "{"}, "--payload is not JSON"},
		{[]string{"--payload", "{}"}, "--version is required"},
		{[]string{"--version", "1", "--payload", "{}"}, "--version 1 is not above the step's current version"},
	} {
		_, errOut, code = run(t, append([]string{"workflows", "revise", "stuck:1", "b", "--db", dsn}, bad.args...)...)
		require.Equal(t, 2, code, "%v: %s", bad.args, errOut)
		require.Contains(t, errOut, bad.msg, bad.args)
	}
	// Approved, not yet sent: revised again, with a field to mask.
	out, errOut, code = run(t, "workflows", "revise", "stuck:1", "b", "--version", "3", "--payload", `{"link":"https://x.example/SECRET-77"}`,
		"--sensitive-field", "link", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "revised to version 3")
	out, errOut, code = run(t, "ops", "show", "stuck:1/b", "--json", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"sensitive_fields": [`)
	require.NotContains(t, out, "SECRET-77")

	// approve ahead, as show printed it; again (a replay); refusals.
	args := append(strings.Fields(ahead)[1:], "--db", dsn, "--approver", "lea")
	out, errOut, code = run(t, args...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "onb:C-1 step note: version 1 approved; the workflow is running: step mail is pending\n", out)
	out, errOut, code = run(t, args...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "onb:C-1 step note: this approval was already recorded, nothing changed; the workflow is running\n", out)
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"workflows", "approve", "onb:C-1", "note", "--db", dsn, "--version", "1"}, 2, "--fingerprint is required: the fingerprint 'workflows show' gave"},
		{[]string{"workflows", "approve", "onb:C-1", "--db", dsn, "--version", "1", "--fingerprint", "sha256:00"}, 2, "give the workflow key and the step name"},
		{[]string{"workflows", "approve", "onb:C-1", "note", "--db", dsn, "--version", "2", "--fingerprint", "sha256:00"}, 1, "the approval names version 2"},
		{[]string{"workflows", "approve", "onb:C-1", "nope", "--db", dsn, "--version", "1", "--fingerprint", "sha256:00"}, 1, "workflow onb:C-1 has no step nope (its steps: "},
		{[]string{"workflows", "revise", "onb:C-1", "nope", "--db", dsn, "--version", "2", "--payload", "{}"}, 1, "workflow onb:C-1 has no step nope (its steps: "},
		{[]string{"workflows", "revise", "onb:C-9", "nope", "--db", dsn, "--version", "2", "--payload", "{}"}, 1, `not found in tenant "default"`},
		{[]string{"workflows", "show", "onb:C-9", "--db", dsn}, 1, `not found in tenant "default" (if it is in another tenant, --tenant names that one)`},
		{[]string{"workflows", "show", "onb:C-1/note", "--db", dsn}, 1,
			"onb:C-1/note is not a workflow: it names step note of workflow onb:C-1: opledger workflows show onb:C-1"},
		{[]string{"workflows", "resume", "a@b", "--db", dsn}, 2, "invalid key"},
		{[]string{"workflows", "list", "--db", dsn, "--limit", "201"}, 2, "--limit takes a whole number from 1 to 200"},
		{[]string{"workflows", "list", "--db", dsn, "--prefix", "x@y"}, 2, "--prefix: invalid key"},
		{[]string{"workflows", "list", "--db", dsn, "--prefix", ""}, 2, "--prefix is empty"},
		{[]string{"workflows", "list", "--db", dsn, "--cursor", cursor}, 2, "cursor does not continue this list"},
	} {
		_, errOut, code := run(t, tc.args...)
		require.Equal(t, tc.code, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.msg, tc.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(strings.Split(errOut, "\nRun '")[0]), "\n")+1, "one line: %q", errOut)
	}
	out, errOut, code = run(t, "workflows", "show", "onb:C-1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "approved ahead by lea (command line on")
	require.NotContains(t, out, "May be approved ahead")
	out, _, code = run(t, "workflows", "list", "--db", dsn, "--tenant", "other")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "onb:")

	// Through a server: the same list; --open; the token's tenant.
	out, errOut, code = run(t, "tokens", "create", "--db", dsn, "--tenant", "default")
	require.Equal(t, 0, code, errOut)
	token := strings.TrimSpace(out)
	url, _ := startServe(t, dsn)
	out, errOut, code = run(t, "workflows", "list", "--server", url, "--token", token, "--open", "--prefix", "onb:C-1")
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `onb:C-1 +running +mail +1/3 `, out)
	out, errOut, code = run(t, "workflows", "show", "onb:C-2", "--server", url, "--token", token)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "onb:C-2  running\n  step create_task is pending\n")
	_, errOut, code = run(t, "workflows", "show", "onb:C-2", "--server", url, "--token", token, "--tenant", "x")
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--tenant is for the store")
}

// TestWorkflowsShowCompactedStep: a step compacted by retention shows
// the count of attempts its tombstone keeps (migration 020), not "-".
func TestWorkflowsShowCompactedStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
	var offset atomic.Int64
	l, err := opledger.Open(ctx, dsn, opledger.Options{Retention: time.Hour,
		Clock: func(now time.Time) time.Time { return now.Add(time.Duration(offset.Load())) }})
	require.NoError(t, err)
	_, _, err = l.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
	}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "wf:1/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "wf:1/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	_, err = l.AdvanceWorkflowOf(ctx, "wf:1/a")
	require.NoError(t, err)
	offset.Store(int64(2 * time.Hour))
	res, err := l.Compact(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, res.Tombstoned)
	require.NoError(t, l.Close())

	out, errOut, code := run(t, "workflows", "show", "wf:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `crm\.create → crm\s+1\s+1\s+R1`, out, "version 1, one attempt")
}

// TestWorkflowsCancelCommand: 'workflows cancel' gives up on a stuck
// workflow, or one whose step failed: --reason is required, a workflow
// whose step is recorded and not finished is refused, the decision is
// shown by 'workflows show', the workflow leaves 'list --stuck' and 'ops
// stats', and the same decision again exits 0 with nothing changed.
func TestWorkflowsCancelCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
		{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"link":"{steps.a.response.url}"}`)},
	}}
	for _, k := range []string{"stuck:1", "fine:1"} {
		_, _, err = l.PutWorkflow(ctx, k, spec)
		require.NoError(t, err)
	}
	c, err := l.Claim(ctx, "stuck:1/a", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = l.Report(ctx, "stuck:1/a", c.AttemptID, c.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "A1", Response: json.RawMessage(`{"id":1}`)})
	require.NoError(t, err)
	require.NoError(t, l.Close())

	_, errOut, code := run(t, "workflows", "cancel", "stuck:1", "--db", dsn)
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "--reason is required")
	_, errOut1, code := run(t, "workflows", "cancel", "fine:1", "--reason", "not needed", "--db", dsn)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut1, "fine:1/a")
	cancel := []string{"workflows", "cancel", "stuck:1", "--reason", "customer withdrew", "--operator", "ana", "--db", dsn}
	out, errOut, code := run(t, cancel...)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^stuck:1 is now cancelled: cancelled by ana \(command line on .*\) at step b: customer withdrew; its remaining steps are not recorded\n$`, out)
	out, errOut, code = run(t, cancel...)
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "stuck:1 is cancelled: this decision was already recorded, nothing changed\n", out)
	_, errOut, code = run(t, "workflows", "cancel", "stuck:1", "--reason", "other", "--operator", "bob", "--db", dsn)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "was cancelled by ana")
	out, errOut, code = run(t, "workflows", "show", "stuck:1", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `stuck:1  cancelled\n  cancelled by ana \(command line on .*\) at step b: customer withdrew`, out)
	require.Regexp(t, `(?m)^  cancelled 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ by ana \(command line on .*\) at step b: customer withdrew$`, out,
		"show says when, by whom and why")
	require.NotContains(t, out, "Next:")
	require.Regexp(t, `2 +b +cancelled +mail.send → mail +1 +- +- +-\n`, out, "it never runs, and waits for nothing")
	_, errOut, code = run(t, "ops", "show", "stuck:1/b", "--db", dsn)
	require.NotEqual(t, 0, code)
	require.Regexp(t, `stuck:1/b is step b of workflow stuck:1, which was cancelled before the step was recorded; it never runs \(cancelled by ana .* at step b: customer withdrew; .*\): opledger workflows show stuck:1 --db `, errOut)
	out, errOut, code = run(t, "workflows", "list", "--stuck", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Empty(t, out)
	out, errOut, code = run(t, "ops", "stats", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `(?m)^Workflows that cannot go on: +0`, out)

	// A workflow whose step is recorded and has not finished is refused
	// until that step fails; then it can be given up on too.
	require.Contains(t, errOut1, "its step a is pending, not finished; cancel or settle its operation fine:1/a first")
	_, errOut, code = run(t, "ops", "cancel", "fine:1/a", "--reason", "wrong customer", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	out, errOut, code = run(t, "workflows", "cancel", "fine:1", "--reason", "customer withdrew", "--operator", "ana", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^fine:1 is now cancelled: cancelled by ana \(command line on .*\) at step a: customer withdrew`, out)
	out, errOut, code = run(t, "ops", "show", "fine:1/a", "--db", dsn)
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `ana \(command line on .*\) +workflow cancelled: workflow fine:1 cancelled at this step: customer withdrew\n`, out,
		"the failed step's timeline says it")
	require.Contains(t, out, "next decision:          none\n  reason:                 its workflow was cancelled at this step by ana")
	_, errOut, code = run(t, "ops", "retry", "fine:1/a", "--reason", "try again", "--db", dsn)
	require.NotEqual(t, 0, code)
	require.Contains(t, errOut, "its workflow was cancelled at this step by ana")
}

// TestOpsResolveAdvancesWorkflow: 'ops resolve --succeeded --db' on a
// workflow's step records the next step at once, as a resolve through the
// server does, instead of leaving it for a server's sweep or 'workflows
// resume'; a next step that cannot be recorded is noted on stderr, and
// the decision stands (exit 0).
func TestOpsResolveAdvancesWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "wf.db")
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	for key, next := range map[string]string{"onb:1": `{"task":"{steps.a.ref}"}`, "stuck:1": `{"link":"{steps.a.response.url}"}`} {
		_, _, err := l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			{Name: "b", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(next)},
		}})
		require.NoError(t, err)
		c, err := l.Claim(ctx, key+"/a", opledger.ClaimOptions{})
		require.NoError(t, err)
		_, err = l.Report(ctx, key+"/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
	}
	require.NoError(t, l.Close())

	out, errOut, code := run(t, "ops", "resolve", "onb:1/a", "--db", dsn, "--succeeded", "--ref", "A1", "--reason", "found A1 in the CRM")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "onb:1/a is now succeeded\n", out)
	require.Empty(t, errOut)
	out, errOut, code = run(t, "ops", "show", "onb:1/b", "--db", dsn, "--json")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `"state": "pending"`, "the next step is recorded, its reference filled")
	require.Contains(t, out, `A1`)

	out, errOut, code = run(t, "ops", "resolve", "stuck:1/a", "--db", dsn, "--succeeded", "--ref", "A2", "--reason", "found A2 in the CRM")
	require.Equal(t, 0, code, errOut)
	require.Equal(t, "stuck:1/a is now succeeded\n", out)
	require.Regexp(t, `^note: its workflow cannot go on: workflow stuck:1 step b: .*response.*; 'opledger workflows show stuck:1 --db `+regexp.QuoteMeta(dsn)+`' says how to revise the step\n$`, errOut)
}
