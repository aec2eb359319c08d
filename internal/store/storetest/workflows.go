package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// taskThenEmail is the two-step workflow of the issue: create a CRM task,
// then e-mail a link to it.
func taskThenEmail() opledger.WorkflowSpec {
	return opledger.WorkflowSpec{
		Owner: "campaign-team",
		Steps: []opledger.WorkflowStep{
			{Name: "create_task", Action: "crm.create_task", Destination: "crm",
				Payload: json.RawMessage(`{"campaign":"C-17","title":"Follow up"}`)},
			{Name: "send_email", Action: "email.send", Destination: "email",
				Payload: json.RawMessage(`{"template":"follow-up","task":"{steps.create_task.ref}","task_url":"{steps.create_task.response.url}","note":"literal {braces} stay"}`)},
		},
	}
}

// stepStates lists the states of a workflow's steps.
func stepStates(w *opledger.Workflow) []opledger.StepState {
	var out []opledger.StepState
	for _, s := range w.Steps {
		out = append(out, s.State)
	}
	return out
}

// succeedStep claims, dispatches and reports success for a step.
func (b *bundle) succeedStep(t *testing.T, key, ref string) *opledger.Operation {
	t.Helper()
	c := b.claimDispatched(t, key)
	b.report(t, key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: ref,
		Response: json.RawMessage(`{"id":"` + ref + `","url":"https://crm.example/tasks/` + ref + `"}`)})
	return c.Operation
}

func testWorkflows(t *testing.T, h Harness) {
	t.Run("PutSemantics", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		w, created, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, opledger.WorkflowRunning, w.Status)
		require.Equal(t, "create_task", w.CurrentStep)
		require.Equal(t, []opledger.StepState{"pending", opledger.StepWaiting}, stepStates(w))
		require.Equal(t, "wf:C-17/create_task", w.Steps[0].Key)
		require.Equal(t, "create_task", w.Steps[1].WaitingFor)
		require.Regexp(t, `^sha256:[0-9a-f]{64}$`, w.Fingerprint)
		op, err := b.ledger.Get(b.ctx, "wf:C-17/create_task")
		require.NoError(t, err)
		require.Equal(t, "campaign-team", op.Owner)
		_, err = b.ledger.Get(b.ctx, "wf:C-17/send_email")
		require.ErrorIs(t, err, opledger.ErrNotFound, "a waiting step is not an operation yet")

		again, created, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		require.False(t, created, "same steps: a repeat")
		require.Equal(t, w.Fingerprint, again.Fingerprint)

		other := taskThenEmail()
		other.Steps[0].Payload = json.RawMessage(`{"campaign":"C-17","title":"Call back"}`)
		_, _, err = b.ledger.PutWorkflow(b.ctx, "wf:C-17", other)
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		var me *opledger.MismatchError
		require.True(t, errors.As(err, &me))
		require.Equal(t, w.Fingerprint, me.Stored)

		got, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, w.Fingerprint, got.Fingerprint)
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:nope")
		require.ErrorIs(t, err, opledger.ErrNotFound)

		bad := map[string]func(*opledger.WorkflowSpec){
			"no steps":      func(s *opledger.WorkflowSpec) { s.Steps = nil },
			"same name":     func(s *opledger.WorkflowSpec) { s.Steps[1].Name = "create_task" },
			"slash in name": func(s *opledger.WorkflowSpec) { s.Steps[1].Name = "a/b" },
			"later ref":     func(s *opledger.WorkflowSpec) { s.Steps[0].Payload = json.RawMessage(`{"x":"{steps.send_email.ref}"}`) },
			"unknown ref":   func(s *opledger.WorkflowSpec) { s.Steps[1].Payload = json.RawMessage(`{"x":"{steps.nope.ref}"}`) },
			"bad ref field": func(s *opledger.WorkflowSpec) {
				s.Steps[1].Payload = json.RawMessage(`{"x":"{steps.create_task.secret}"}`)
			},
			"no action":      func(s *opledger.WorkflowSpec) { s.Steps[0].Action = "" },
			"bad json":       func(s *opledger.WorkflowSpec) { s.Steps[0].Payload = json.RawMessage(`{`) },
			"personal email": func(s *opledger.WorkflowSpec) { s.Steps[0].Name = "ana@example.com" },
		}
		for name, change := range bad {
			spec := taskThenEmail()
			change(&spec)
			_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:bad", spec)
			require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
		}
		_, _, err = b.ledger.PutWorkflow(b.ctx, "wf:bad@x", taskThenEmail())
		require.ErrorIs(t, err, opledger.ErrInvalidKey)
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:bad")
		require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded from bad input")

		// An operation recorded on its own at a step's key would become
		// that step, due before its turn: the workflow is refused.
		_, _, err = b.ledger.Record(b.ctx, opledger.Intent{Key: "wf:C-18/send_email", Action: "email.send", Destination: "email",
			Payload: json.RawMessage(`{"template":"other"}`)})
		require.NoError(t, err)
		_, _, err = b.ledger.PutWorkflow(b.ctx, "wf:C-18", taskThenEmail())
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		require.ErrorContains(t, err, "step send_email has the key of an operation recorded on its own (wf:C-18/send_email)")
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:C-18")
		require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")
		_, err = b.ledger.Get(b.ctx, "wf:C-18/create_task")
		require.ErrorIs(t, err, opledger.ErrNotFound, "no step recorded")
	})

	// A repeat that names sensitive fields the steps lack adds them: to the
	// recorded step's operation and, for a step still waiting, to the
	// definition it will be recorded from.
	t.Run("RepeatAddsSensitiveFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:S-1", taskThenEmail())
		require.NoError(t, err)
		spec := taskThenEmail()
		spec.Steps[0].SensitiveFields = []string{"campaign"}
		spec.Steps[1].SensitiveFields = []string{"template"}
		w, created, err := b.ledger.PutWorkflow(b.ctx, "wf:S-1", spec)
		require.NoError(t, err)
		require.False(t, created, "sensitive fields are not part of the fingerprint")
		require.JSONEq(t, `"***"`, string(mustField(t, w.Steps[1].Payload, "template")), "the waiting step is shown masked")
		op, err := b.ledger.Get(b.ctx, "wf:S-1/create_task")
		require.NoError(t, err)
		require.Equal(t, []string{"campaign"}, op.SensitiveFields)
		require.Contains(t, b.events(t, "wf:S-1/create_task"), "sensitive fields added")

		b.succeedStep(t, "wf:S-1/create_task", "T-1")
		_, err = b.ledger.ResumeWorkflow(b.ctx, "wf:S-1")
		require.NoError(t, err)
		op, err = b.ledger.Get(b.ctx, "wf:S-1/send_email")
		require.NoError(t, err)
		require.Equal(t, []string{"template"}, op.SensitiveFields, "recorded from the definition the repeat changed")
	})

	t.Run("FilledFromMaskedValueStaysMasked", func(t *testing.T) {
		// A step filled from what an earlier step keeps masked (its
		// response at a sensitive path, or an echo of a sensitive
		// payload value) keeps those payload paths sensitive too.
		t.Parallel()
		b := setup(t, h)
		spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "signup", Action: "crm.create_contact", Destination: "crm", SensitiveFields: []string{"email", "account.pin"},
				Payload: json.RawMessage(`{"email":"ana@example.invalid","account":{"pin":"4711"},"plan":"basic"}`)},
			{Name: "welcome", Action: "email.send", Destination: "email",
				Payload: json.RawMessage(`{"to":"{steps.signup.response.contact.email}","account":"{steps.signup.response.account}",` +
					`"greeting":"Your pin is {steps.signup.response.pin_echo}","plan":"{steps.signup.response.plan}","contact":"{steps.signup.ref}","tags":[{"pin":"{steps.signup.response.account.pin}"}]}`)},
		}}
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:M-1", spec)
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:M-1/signup")
		b.report(t, "wf:M-1/signup", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "C-1",
			Response: json.RawMessage(`{"contact":{"email":"ana@example.invalid"},"account":{"pin":"4711","id":"A-1"},"pin_echo":"4711","plan":"basic"}`)})
		_, err = b.ledger.AdvanceWorkflowOf(b.ctx, "wf:M-1/signup")
		require.NoError(t, err)

		op, err := b.ledger.Get(b.ctx, "wf:M-1/welcome")
		require.NoError(t, err)
		require.JSONEq(t, `{"to":"ana@example.invalid","account":{"pin":"4711","id":"A-1"},"greeting":"Your pin is 4711","plan":"basic","contact":"C-1","tags":[{"pin":"4711"}]}`,
			string(op.Payload), "the step is sent the real values")
		require.ElementsMatch(t, []string{"to", "account.pin", "greeting", "tags.pin"}, op.SensitiveFields,
			"the paths filled from masked values, and no others")
		shown, err := json.Marshal(op)
		require.NoError(t, err)
		require.NotContains(t, string(shown), "4711")
		require.NotContains(t, string(shown), "ana@example")
		require.Contains(t, string(shown), `"plan":"basic"`, "values shown in the earlier step are shown here too")
	})
	t.Run("FilledFromMaskedTextStaysMasked", func(t *testing.T) {
		// A value filled from an earlier step's reference or response
		// text that holds one of its sensitive values (shown masked
		// there, "created for ***") is sensitive in the later step too.
		t.Parallel()
		b := setup(t, h)
		spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "signup", Action: "crm.create_contact", Destination: "crm", SensitiveFields: []string{"email"},
				Payload: json.RawMessage(`{"email":"ana@example.invalid","plan":"basic"}`)},
			{Name: "welcome", Action: "email.send", Destination: "email",
				Payload: json.RawMessage(`{"contact":"{steps.signup.ref}","note":"{steps.signup.response.note}","id":"{steps.signup.response.id}",` +
					`"summary":"welcome {steps.signup.ref} ({steps.signup.response.id})","plan":"{steps.signup.response.plan}"}`)},
		}}
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:M-2", spec)
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:M-2/signup")
		b.report(t, "wf:M-2/signup", c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "contact/ana@example.invalid",
			Response: json.RawMessage(`{"note":"created for ANA@example.invalid","id":"A-1","plan":"basic"}`)})
		_, err = b.ledger.AdvanceWorkflowOf(b.ctx, "wf:M-2/signup")
		require.NoError(t, err)

		op, err := b.ledger.Get(b.ctx, "wf:M-2/welcome")
		require.NoError(t, err)
		require.JSONEq(t, `{"contact":"contact/ana@example.invalid","note":"created for ANA@example.invalid","id":"A-1",`+
			`"summary":"welcome contact/ana@example.invalid (A-1)","plan":"basic"}`, string(op.Payload), "the step is sent the real values")
		require.ElementsMatch(t, []string{"contact", "note", "summary"}, op.SensitiveFields,
			"the paths filled from masked text, and no others")
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:M-2")
		require.NoError(t, err)
		shown, err := json.Marshal(w)
		require.NoError(t, err)
		require.NotContains(t, strings.ToLower(string(shown)), "ana@")
		require.Contains(t, string(shown), `"id":"A-1"`, "values shown in the earlier step are shown here too")
	})
	t.Run("ConcurrentPut", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		const n = 8
		var wg sync.WaitGroup
		createdCount := make([]bool, n)
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, createdCount[i], errs[i] = b.ledger.PutWorkflow(b.ctx, "wf:race", taskThenEmail())
			}()
		}
		wg.Wait()
		created := 0
		for i := range n {
			require.NoError(t, errs[i])
			if createdCount[i] {
				created++
			}
		}
		require.Equal(t, 1, created)
		require.Equal(t, []string{"recorded", "workflow step recorded"}, b.events(t, "wf:race/create_task"))
	})

	// A workflow put while an operation is recorded at one of its step
	// keys: one of the two is refused, never neither (the workflow would
	// take the operation for its step). On PostgreSQL each reads before
	// the other commits; a lock on the step's key orders them.
	t.Run("ConcurrentPutAndStepKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		for round := range 30 {
			key := fmt.Sprintf("wf:step-race-%d", round)
			foreign := opledger.Intent{Key: key + "/send_email", Action: "email.send", Destination: "email",
				Payload: json.RawMessage(`{"template":"other"}`)}
			var putErr, recordErr error
			var wg sync.WaitGroup
			start := make(chan struct{})
			wg.Go(func() {
				<-start
				_, _, putErr = b.ledger.PutWorkflow(b.ctx, key, taskThenEmail())
			})
			wg.Go(func() {
				<-start
				_, _, recordErr = b.ledger.Record(b.ctx, foreign)
			})
			close(start)
			wg.Wait()
			require.True(t, putErr == nil || errors.Is(putErr, opledger.ErrInvalidState), "%v", putErr)
			require.True(t, recordErr == nil || errors.Is(recordErr, opledger.ErrInvalidState), "%v", recordErr)
			require.False(t, putErr == nil && recordErr == nil, "round %d: both the workflow and the operation at its step key were recorded", round)
			require.False(t, putErr != nil && recordErr != nil, "round %d: both refused", round)
		}
	})

	t.Run("StepsInOrderWithFrozenRefs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "wf:C-17/create_task", c.Operation.Key)
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "step 2 waits for step 1")
		_, err = b.ledger.Dispatch(b.ctx, c.Operation.Key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		b.report(t, c.Operation.Key, c, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "T-9",
			Response: json.RawMessage(`{"id":"T-9","url":"https://crm.example/tasks/T-9"}`)})

		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowRunning, w.Status)
		require.Equal(t, "send_email", w.CurrentStep)
		require.Contains(t, w.Reason, "due to be recorded")

		w, err = b.ledger.AdvanceWorkflowOf(b.ctx, "wf:C-17/create_task")
		require.NoError(t, err)
		require.Equal(t, []opledger.StepState{"succeeded", "pending"}, stepStates(w))
		email, err := b.ledger.Get(b.ctx, "wf:C-17/send_email")
		require.NoError(t, err)
		require.JSONEq(t, `{"template":"follow-up","task":"T-9","task_url":"https://crm.example/tasks/T-9","note":"literal {braces} stay"}`,
			string(email.Payload), "refs resolved once, when the step is recorded")
		none, err := b.ledger.AdvanceWorkflowOf(b.ctx, "intake:I17:create")
		require.NoError(t, err)
		require.Nil(t, none, "not a workflow step")

		sent := b.succeedStep(t, "wf:C-17/send_email", "MSG-1")
		require.Equal(t, email.Fingerprint, sent.Fingerprint, "the stored content is what runs")
		n, err := b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		require.Empty(t, w.CurrentStep)
		n, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "nothing left to advance")
	})

	// A step's key is the workflow's: recorded on its own (by Record, a
	// claim with an intent, an event's rule) after the workflow, the step
	// would run before its turn with other content. A key under the
	// workflow's that names no step is an ordinary key.
	t.Run("StepKeysBelongToTheWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		spec := taskThenEmail()
		spec.Steps[1].RequiresApproval = new(true)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-30", spec)
		require.NoError(t, err)
		foreign := opledger.Intent{Key: "wf:C-30/send_email", Action: "email.send", Destination: "email",
			Payload: json.RawMessage(`{"template":"other"}`)}
		_, _, err = b.ledger.Record(b.ctx, foreign)
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		require.ErrorContains(t, err, "wf:C-30/send_email is the key of step send_email of workflow wf:C-30")
		_, err = b.ledger.Claim(b.ctx, foreign.Key, opledger.ClaimOptions{Intent: &foreign, Dispatch: true})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "a claim with an intent")
		_, err = b.ledger.Get(b.ctx, foreign.Key)
		require.ErrorIs(t, err, opledger.ErrNotFound, "the waiting step is not recorded")

		rules, err := opledger.ParseRules([]byte(`
rules:
  - name: campaign-mail
    type: campaign.mail
    operations:
      - key: "wf:{data.campaign}/send_email"
        action: email.send
        destination: email
        payload: {body: "{data.body}"}
`))
		require.NoError(t, err)
		res, err := b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "forms", EventID: "e1", Type: "campaign.mail",
			Payload: json.RawMessage(`{"campaign":"C-30","body":"other"}`)})
		require.NoError(t, err)
		require.Equal(t, opledger.EventConflict, res.Status)
		require.Contains(t, res.Event.Reason, "operation wf:C-30/send_email is step send_email of workflow wf:C-30")
		require.Empty(t, res.Operations)
		_, err = b.ledger.Get(b.ctx, foreign.Key)
		require.ErrorIs(t, err, opledger.ErrNotFound, "nor by an event")

		other := opledger.Intent{Key: "wf:C-30/notes", Action: "crm.note", Destination: "crm", Payload: json.RawMessage(`{}`)}
		_, created, err := b.ledger.Record(b.ctx, other)
		require.NoError(t, err)
		require.True(t, created, "a key that names no step")

		// In its turn, the workflow records the step with its own content,
		// waiting for its approval; a repeat of the recorded step is a
		// repeat, and a rule may not revise it.
		b.succeedStep(t, "wf:C-30/create_task", "T-30")
		w, err := b.ledger.ResumeWorkflow(b.ctx, "wf:C-30")
		require.NoError(t, err)
		require.Equal(t, []opledger.StepState{"succeeded", "awaiting_approval"}, stepStates(w))
		require.JSONEq(t, `"follow-up"`, string(mustField(t, w.Steps[1].Operation.Payload, "template")))
		_, _, err = b.ledger.Record(b.ctx, foreign)
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch, "the recorded step is an operation like any other")
		res, err = b.ledger.ReceiveEvent(b.ctx, rules, opledger.Event{Source: "forms", EventID: "e2", Type: "campaign.mail",
			Payload: json.RawMessage(`{"campaign":"C-30","body":"newer"}`)})
		require.NoError(t, err)
		require.Equal(t, opledger.EventConflict, res.Status, "a recorded step awaiting approval is not revised by a rule")
		op, err := b.ledger.Get(b.ctx, foreign.Key)
		require.NoError(t, err)
		require.Equal(t, int64(1), op.Version)
	})

	// A new workflow whose step key holds a tombstone (an operation
	// compacted by retention) is refused: it would take the tombstone for
	// its step, succeeded, and skip the step.
	t.Run("StepKeyWithTombstoneRefused", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		in := opledger.Intent{Key: "wf:C-31/create_task", Action: "crm.create_task", Destination: "crm",
			Payload: json.RawMessage(`{"unrelated":true}`)}
		_, _, err := b.ledger.Record(b.ctx, in)
		require.NoError(t, err)
		b.succeedStep(t, in.Key, "FOREIGN")
		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, res.Tombstoned)
		_, _, err = b.ledger.PutWorkflow(b.ctx, "wf:C-31", taskThenEmail())
		require.ErrorIs(t, err, opledger.ErrInvalidState)
		require.ErrorContains(t, err, "step create_task has the key of an operation finished and compacted before (wf:C-31/create_task)")
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:C-31")
		require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")
		_, err = b.ledger.Get(b.ctx, "wf:C-31/send_email")
		require.ErrorIs(t, err, opledger.ErrNotFound, "no step recorded")
	})

	t.Run("RetentionNeverRepeatsSteps", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		compact := func() opledger.CompactResult {
			t.Helper()
			res, err := b.ledger.Compact(b.ctx)
			require.NoError(t, err)
			return res
		}
		// Day 0: both workflows' first steps succeed.
		for _, key := range []string{"wf:R-1", "wf:R-2"} {
			_, _, err := b.ledger.PutWorkflow(b.ctx, key, taskThenEmail())
			require.NoError(t, err)
			b.succeedStep(t, key+"/create_task", "T-"+key)
			_, err = b.ledger.ResumeWorkflow(b.ctx, key)
			require.NoError(t, err)
		}
		b.clock.Advance(retention + day) // day 31: the first steps are kept whole, their workflows unfinished
		require.Equal(t, opledger.CompactResult{}, compact())
		b.clock.Advance(169 * day) // day 200: wf:R-2 finishes; wf:R-1 never does
		b.succeedStep(t, "wf:R-2/send_email", "MSG-2")
		w, err := b.ledger.ResumeWorkflow(b.ctx, "wf:R-2")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		b.clock.Advance(232 * day) // day 432: wf:R-2's steps become tombstones
		require.Equal(t, opledger.CompactResult{Tombstoned: 2}, compact())

		step, err := b.ledger.Get(b.ctx, "wf:R-1/create_task")
		require.NoError(t, err)
		require.False(t, step.Tombstoned, "a step of an unfinished workflow is kept whole")
		require.Equal(t, opledger.StateSucceeded, step.State)
		step, err = b.ledger.Get(b.ctx, "wf:R-2/create_task")
		require.NoError(t, err)
		require.True(t, step.Tombstoned)
		for _, key := range []string{"wf:R-1", "wf:R-2"} {
			w, err := b.ledger.ResumeWorkflow(b.ctx, key)
			require.NoError(t, err)
			require.Equal(t, opledger.StepState(opledger.StateSucceeded), w.Steps[0].State, key)
		}
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:R-1")
		require.NoError(t, err)
		require.Equal(t, []opledger.StepState{"succeeded", "pending"}, stepStates(w))
		require.Equal(t, "send_email", w.CurrentStep)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:R-2")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		require.Equal(t, []opledger.StepState{"succeeded", "succeeded"}, stepStates(w))
		n, err := b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.NoError(t, err)
		require.Equal(t, "wf:R-1/send_email", c.Operation.Key)
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "nothing else to run")

		// A finished workflow goes once it has been finished for the
		// tombstone retention, and its steps' tombstones after theirs;
		// an unfinished one stays.
		b.clock.Advance(200 * day) // day 632
		require.Equal(t, opledger.CompactResult{WorkflowsForgotten: 1}, compact())
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:R-2")
		require.ErrorIs(t, err, opledger.ErrNotFound)
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:R-1")
		require.NoError(t, err)
		b.clock.Advance(201 * day) // day 833
		require.Equal(t, opledger.CompactResult{Forgotten: 2}, compact())
		_, err = b.ledger.Get(b.ctx, "wf:R-1/create_task")
		require.NoError(t, err, "still whole")
	})

	t.Run("RetentionKeepsFailedStep", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:F-1", taskThenEmail())
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:F-1/create_task")
		b.report(t, "wf:F-1/create_task", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422 campaign closed"})
		b.inState(t, "plain:failed", opledger.StateFailed)
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:F-1")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowFailed, w.Status)

		b.clock.Advance(retention + day)
		res, err := b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		require.Equal(t, opledger.CompactResult{Tombstoned: 2}, res)
		forgotten := 0
		for range 2 { // past the tombstone retention, and long after it
			b.clock.Advance(tombstoneRetention + day)
			res, err = b.ledger.Compact(b.ctx)
			require.NoError(t, err)
			require.Zero(t, res.WorkflowsForgotten, "a failed workflow is kept")
			forgotten += res.Forgotten
			w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:F-1")
			require.NoError(t, err)
			require.Equal(t, opledger.WorkflowFailed, w.Status, "the workflow still shows that it failed")
			require.Equal(t, []opledger.StepState{"failed", "waiting"}, stepStates(w))
			require.NotNil(t, w.Steps[0].Operation)
			require.True(t, w.Steps[0].Operation.Tombstoned, "the failed step's tombstone stays while its workflow does")
			_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
			require.ErrorIs(t, err, opledger.ErrNothingDue, "the failed step is not recorded again")
		}
		require.Equal(t, 1, forgotten, "the tombstone of the operation outside any workflow went")
		_, err = b.ledger.Get(b.ctx, "plain:failed")
		require.ErrorIs(t, err, opledger.ErrNotFound)
	})

	t.Run("RetentionKeepsStepsWhileFailedStepMayBeRetried", func(t *testing.T) {
		t.Parallel()
		b := setupRetention(t, h)
		spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "create_task", Action: "crm.create_task", Destination: "crm", Payload: json.RawMessage(`{"title":"Follow up"}`)},
			{Name: "assign", Action: "crm.assign", Destination: "crm", Payload: json.RawMessage(`{"task":"{steps.create_task.ref}"}`)},
			{Name: "send_email", Action: "email.send", Destination: "email",
				Payload: json.RawMessage(`{"task_url":"{steps.create_task.response.url}"}`)},
		}}
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:K-1", spec)
		require.NoError(t, err)
		b.succeedStep(t, "wf:K-1/create_task", "T-1") // day 0
		_, err = b.ledger.ResumeWorkflow(b.ctx, "wf:K-1")
		require.NoError(t, err)

		// Day 40: the second step, long held up, is rejected; its owner
		// repairs the cause and authorizes a retry the next day, well
		// within the retention period of its failure.
		b.clock.Advance(40 * day)
		c := b.claimDispatched(t, "wf:K-1/assign")
		b.report(t, "wf:K-1/assign", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "403 not allowed"})
		_, err = b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		step, err := b.ledger.Get(b.ctx, "wf:K-1/create_task")
		require.NoError(t, err)
		require.False(t, step.Tombstoned, "a step is kept whole while a decision on the failed step may still let the workflow go on")

		b.clock.Advance(day)
		_, _, err = b.ledger.Resolve(b.ctx, "wf:K-1/assign", opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "permission granted"})
		require.NoError(t, err)
		b.succeedStep(t, "wf:K-1/assign", "A-1")
		w, err := b.ledger.ResumeWorkflow(b.ctx, "wf:K-1")
		require.NoError(t, err)
		require.Equal(t, []opledger.StepState{"succeeded", "succeeded", "pending"}, stepStates(w))
		email, err := b.ledger.Get(b.ctx, "wf:K-1/send_email")
		require.NoError(t, err)
		require.JSONEq(t, `{"task_url":"https://crm.example/tasks/T-1"}`, string(email.Payload))

		// A failed step nobody decided about within the retention period
		// lets its workflow's steps go, as any operation.
		_, _, err = b.ledger.PutWorkflow(b.ctx, "wf:K-2", spec)
		require.NoError(t, err)
		b.succeedStep(t, "wf:K-2/create_task", "T-2")
		_, err = b.ledger.ResumeWorkflow(b.ctx, "wf:K-2")
		require.NoError(t, err)
		c = b.claimDispatched(t, "wf:K-2/assign")
		b.report(t, "wf:K-2/assign", c, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "403 not allowed"})
		b.clock.Advance(retention + day)
		_, err = b.ledger.Compact(b.ctx)
		require.NoError(t, err)
		for _, key := range []string{"wf:K-2/create_task", "wf:K-2/assign"} {
			step, err = b.ledger.Get(b.ctx, key)
			require.NoError(t, err)
			require.True(t, step.Tombstoned, key)
		}
	})

	t.Run("ResumeAfterApproverChangedWaitingStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		// The approver rewrites the e-mail while step 1 is still running.
		revision := opledger.Revision{
			Payload: json.RawMessage(`{"template":"follow-up-v2","task":"{steps.create_task.ref}"}`), Version: 2, Actor: "lea"}
		w, replayed, err := b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", revision)
		require.NoError(t, err)
		require.False(t, replayed)
		require.Equal(t, "lea", w.Steps[1].RevisedBy)
		require.True(t, w.Steps[1].RequiresApproval)
		// Sent again, its answer lost: nothing written.
		again, replayed, err := b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", revision)
		require.NoError(t, err)
		require.True(t, replayed, "the same revision of the waiting step")
		require.True(t, w.UpdatedAt.Equal(again.UpdatedAt), "nothing written")
		_, _, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Revision{Payload: json.RawMessage(`{}`), Version: 2})
		require.ErrorIs(t, err, opledger.ErrInvalidInput, "a revision needs a higher version")

		b.succeedStep(t, "wf:C-17/create_task", "T-9")
		// The process dies here; on restart the workflow is resumed.
		w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowAwaitingApproval, w.Status)
		require.Equal(t, []opledger.StepState{"succeeded", "awaiting_approval"}, stepStates(w))
		step2 := w.Steps[1].Operation
		require.EqualValues(t, 2, step2.Version)
		require.JSONEq(t, `{"template":"follow-up-v2","task":"T-9"}`, string(step2.Payload))
		// The revision sent again once the step is recorded with it (its
		// answer lost while the step waited): still a replay.
		recorded := b.events(t, "wf:C-17/send_email")
		_, replayed, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", revision)
		require.NoError(t, err)
		require.True(t, replayed, "the revision the recorded step was made with")
		require.Equal(t, recorded, b.events(t, "wf:C-17/send_email"), "nothing recorded")
		_, err = b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{})
		require.ErrorIs(t, err, opledger.ErrNothingDue, "step 2 waits for approval; step 1 is not repeated")
		w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, 1, w.Steps[0].Operation.AttemptCount, "resuming again repeats nothing")

		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Approval{Version: 2, Fingerprint: step2.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		sent := b.succeedStep(t, "wf:C-17/send_email", "MSG-1")
		require.JSONEq(t, `{"template":"follow-up-v2","task":"T-9"}`, string(sent.Payload), "the approved content is sent")
		attempts, err := b.ledger.Attempts(b.ctx, "wf:C-17/create_task")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
	})

	t.Run("ResumeAfterApproverChangedRecordedStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		b.succeedStep(t, "wf:C-17/create_task", "T-9")
		w, err := b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.StatePending, w.Steps[1].Operation.State)

		revision := opledger.Revision{Payload: json.RawMessage(`{"template":"follow-up-v2","task":"T-9"}`), Version: 2, Actor: "lea"}
		w, _, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", revision)
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowAwaitingApproval, w.Status)
		require.Contains(t, w.Reason, "send_email awaits approval of version 2")
		before := b.events(t, "wf:C-17/send_email")
		_, replayed, err := b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", revision)
		require.NoError(t, err)
		require.True(t, replayed, "the same revision of the recorded step")
		require.Equal(t, before, b.events(t, "wf:C-17/send_email"), "nothing recorded")

		w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, []opledger.StepState{"succeeded", "awaiting_approval"}, stepStates(w))
		require.Equal(t, 1, w.Steps[0].Operation.AttemptCount, "step 1 is not repeated")
		require.EqualValues(t, 2, w.Steps[1].Operation.Version)

		// Once dispatched, content is fixed.
		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Approval{
			Version: 2, Fingerprint: w.Steps[1].Operation.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		b.claimDispatched(t, "wf:C-17/send_email")
		_, _, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Revision{Payload: json.RawMessage(`{}`), Version: 3})
		require.ErrorIs(t, err, opledger.ErrInvalidState)
	})

	t.Run("HeldStepHoldsWorkflow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		spec := taskThenEmail()
		spec.Steps[1].Payload = json.RawMessage(`{"template":"follow-up","task":"{steps.create_task.ref}"}`)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", spec)
		require.NoError(t, err)
		c := b.claimDispatched(t, "wf:C-17/create_task")
		b.report(t, "wf:C-17/create_task", c, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after write"})
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowRunning, w.Status)
		require.Contains(t, w.Reason, "uncertain")
		_, _, err = b.ledger.Reconcile(b.ctx, "wf:C-17/create_task", opledger.Finding{Evidence: "CRM offers no lookup"})
		require.NoError(t, err)

		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowHeld, w.Status)
		require.Equal(t, "create_task", w.CurrentStep)
		require.Contains(t, w.Reason, "step create_task is held for campaign-team")
		require.Contains(t, w.Reason, "CRM offers no lookup")
		require.Equal(t, opledger.StepWaiting, w.Steps[1].State)
		n, err := b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a held step holds the workflow")

		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-17/create_task", opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
			DestinationRef: "T-42", Reason: "found the task in the CRM by hand", Operator: "lea"})
		require.NoError(t, err)
		n, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowRunning, w.Status)
		require.Equal(t, opledger.StatePending, w.Steps[1].Operation.State)
		require.JSONEq(t, `{"template":"follow-up","task":"T-42"}`, string(w.Steps[1].Operation.Payload), "the operator's ref is used")
	})

	t.Run("UnfillableStepIsVisible", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err)
		b.inState(t, "unrelated", opledger.StatePending)
		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-17/create_task", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "campaign stopped"})
		require.NoError(t, err)
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowFailed, w.Status)
		require.Contains(t, w.Reason, "create_task failed (cancelled)")
		// An operator confirms the task exists after all, without a
		// response: {steps.create_task.response.url} cannot be filled.
		_, _, err = b.ledger.Resolve(b.ctx, "wf:C-17/create_task", opledger.Decision{Kind: opledger.DecisionMarkSucceeded,
			DestinationRef: "T-42", Reason: "created by hand"})
		require.NoError(t, err)
		n, err := b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n)
		_, err = b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		var se *opledger.StepError
		require.True(t, errors.As(err, &se))
		require.Equal(t, "send_email", se.Step)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowHeld, w.Status)
		require.Contains(t, w.Reason, "steps.create_task.response")
		again, created, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", taskThenEmail())
		require.NoError(t, err, "a repeat still answers")
		require.False(t, created)
		require.Equal(t, opledger.WorkflowHeld, again.Status)

		_, _, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Revision{
			Payload: json.RawMessage(`{"template":"follow-up","task":"{steps.create_task.ref}"}`), Version: 2, Actor: "lea"})
		require.NoError(t, err)
		n, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		op, err := b.ledger.Get(b.ctx, "wf:C-17/send_email")
		require.NoError(t, err)
		require.Equal(t, opledger.StateAwaitingApproval, op.State)
		require.JSONEq(t, `{"template":"follow-up","task":"T-42"}`, string(op.Payload))
	})

	t.Run("PreApprovedStep", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		yes := true
		spec := opledger.WorkflowSpec{Owner: "ops", Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)},
			{Name: "b", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"body":"Hello"}`), RequiresApproval: &yes},
			{Name: "c", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"ref":"{steps.a.ref}"}`), RequiresApproval: &yes},
		}}
		w, _, err := b.ledger.PutWorkflow(b.ctx, "wf:pre", spec)
		require.NoError(t, err)
		fp := w.Steps[1].Fingerprint
		require.NotEmpty(t, fp, "a waiting step without placeholders shows its future fingerprint")
		require.Empty(t, w.Steps[2].Fingerprint)

		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "b", opledger.Approval{Version: 1, Fingerprint: "sha256:0", Approver: "lea"})
		require.ErrorIs(t, err, opledger.ErrFingerprintMismatch)
		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "c", opledger.Approval{Version: 1, Fingerprint: fp, Approver: "lea"})
		require.ErrorIs(t, err, opledger.ErrInvalidState, "content not known yet")
		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "zz", opledger.Approval{Version: 1, Fingerprint: fp, Approver: "lea"})
		require.ErrorIs(t, err, opledger.ErrNotFound)
		approval := opledger.Approval{Version: 1, Fingerprint: fp, Approver: "lea"}
		w, replayed, err := b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "b", approval)
		require.NoError(t, err)
		require.False(t, replayed)
		require.Equal(t, "lea", w.Steps[1].PreApprovedBy)
		again, replayed, err := b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "b", approval)
		require.NoError(t, err)
		require.True(t, replayed, "the same approval of the waiting step again")
		require.True(t, w.UpdatedAt.Equal(again.UpdatedAt), "nothing written")

		b.succeedStep(t, "wf:pre/a", "A-1")
		w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:pre")
		require.NoError(t, err)
		op := w.Steps[1].Operation
		require.Equal(t, opledger.StatePending, op.State, "approved ahead of its turn")
		require.Equal(t, "lea", op.ApprovedBy)
		require.Equal(t, fp, op.Fingerprint)
		require.Equal(t, []string{"recorded", "workflow step recorded", "approved"}, b.events(t, "wf:pre/b"))
		_, replayed, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:pre", "b", approval)
		require.NoError(t, err)
		require.True(t, replayed, "the approval given while it waited, sent again once it is recorded")
		require.Equal(t, []string{"recorded", "workflow step recorded", "approved"}, b.events(t, "wf:pre/b"))

		b.succeedStep(t, "wf:pre/b", "M-1")
		w, err = b.ledger.ResumeWorkflow(b.ctx, "wf:pre")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowAwaitingApproval, w.Status)
		require.JSONEq(t, `{"ref":"A-1"}`, string(w.Steps[2].Operation.Payload))
	})

	t.Run("TaskThenEmailAfterLostResponse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		yes := true
		spec := taskThenEmail()
		spec.Steps[1].RequiresApproval = &yes
		_, _, err := b.ledger.PutWorkflow(b.ctx, "wf:C-17", spec)
		require.NoError(t, err)
		// The worker creates the task, the response is lost and the
		// process dies: the lease runs out after dispatch.
		c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{Lease: time.Second})
		require.NoError(t, err)
		_, err = b.ledger.Dispatch(b.ctx, c.Operation.Key, c.AttemptID, c.FencingToken)
		require.NoError(t, err)
		b.clock.Advance(time.Minute)
		n, err := b.ledger.ExpireLeases(b.ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		b.requireState(t, "wf:C-17/create_task", opledger.StateUncertain)
		n, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "no e-mail while the task is uncertain")
		// On restart the reconciler finds the task by lookup: no second task.
		_, _, err = b.ledger.Reconcile(b.ctx, "wf:C-17/create_task", opledger.Finding{Found: true, Matches: true, DestinationRef: "T-9"})
		require.NoError(t, err)
		n, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		require.Zero(t, n, "the lookup gave no response: the url cannot be filled")
		w, err := b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowHeld, w.Status)
		require.Contains(t, w.Reason, "step send_email cannot be recorded")
		// The approver drops the url and approves the body.
		w, _, err = b.ledger.ReviseWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Revision{
			Payload: json.RawMessage(`{"template":"follow-up","task":"{steps.create_task.ref}"}`), Version: 2, Actor: "lea"})
		require.NoError(t, err)
		require.Equal(t, "send_email", w.CurrentStep)
		_, err = b.ledger.ResumeWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		op, err := b.ledger.Get(b.ctx, "wf:C-17/send_email")
		require.NoError(t, err)
		_, _, err = b.ledger.ApproveWorkflowStep(b.ctx, "wf:C-17", "send_email", opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "lea"})
		require.NoError(t, err)
		sent := b.drain(t)
		require.Equal(t, []string{"wf:C-17/send_email"}, sent, "the e-mail is sent once; the task is not created again")
		attempts, err := b.ledger.Attempts(b.ctx, "wf:C-17/create_task")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		_, err = b.ledger.AdvanceWorkflows(b.ctx)
		require.NoError(t, err)
		w, err = b.ledger.GetWorkflow(b.ctx, "wf:C-17")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		st, err := b.ledger.Stats(b.ctx, false)
		require.NoError(t, err)
		require.Equal(t, 2, st.ConfirmedEffects)
	})

	t.Run("ManyStepsTenantsAndMasking", func(t *testing.T) {
		t.Parallel()
		b := setup(t, h)
		var steps []opledger.WorkflowStep
		for i := range 5 {
			p := `{"n":` + fmt.Sprint(i) + `,"email":"ana@example.com"}`
			if i > 0 {
				p = fmt.Sprintf(`{"n":%d,"prev":"{steps.s%d.ref}","email":"ana@example.com"}`, i, i-1)
			}
			steps = append(steps, opledger.WorkflowStep{Name: fmt.Sprintf("s%d", i), Action: "a", Destination: "d",
				Payload: json.RawMessage(p), SensitiveFields: []string{"email"}})
		}
		acme, err := b.ledger.WithTenant("acme")
		require.NoError(t, err)
		_, _, err = acme.PutWorkflow(b.ctx, "wf:m", opledger.WorkflowSpec{Steps: steps})
		require.NoError(t, err)
		_, err = b.ledger.GetWorkflow(b.ctx, "wf:m")
		require.ErrorIs(t, err, opledger.ErrNotFound, "tenants see nothing of each other")
		for i := range 5 {
			c, err := b.ledger.ClaimNext(b.ctx, opledger.ClaimNextOptions{AllTenants: true})
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("wf:m/s%d", i), c.Operation.Key)
			if i > 0 {
				require.Contains(t, string(c.Operation.Payload), fmt.Sprintf(`"prev":"R%d"`, i-1))
			}
			_, err = acme.Dispatch(b.ctx, c.Operation.Key, c.AttemptID, c.FencingToken)
			require.NoError(t, err)
			_, err = acme.Report(b.ctx, c.Operation.Key, c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: fmt.Sprintf("R%d", i)})
			require.NoError(t, err)
			n, err := b.ledger.AdvanceWorkflows(b.ctx)
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
		w, err := acme.GetWorkflow(b.ctx, "wf:m")
		require.NoError(t, err)
		require.Equal(t, opledger.WorkflowSucceeded, w.Status)
		out, err := json.Marshal(w)
		require.NoError(t, err)
		require.NotContains(t, string(out), "ana@example.com", "sensitive fields masked")
	})
}

// mustField returns the member name of the JSON object doc.
func mustField(t *testing.T, doc json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(doc, &m))
	return m[name]
}
