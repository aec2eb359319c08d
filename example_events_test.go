package opledger_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/opledger/opledger"
)

// A webhook delivered twice is one event: the second delivery records the
// arrival and answers with the operation the first one produced.
func ExampleLedger_ReceiveEvent() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake-accepted
    source: forms
    type: submission.accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create_inquiry
        destination: crm
        payload: {submission: "{data.submission_id}", units: "{data.units}"}
`))
	if err != nil {
		log.Fatal(err)
	}
	ev := opledger.Event{Source: "forms", EventID: "evt-17", Type: "submission.accepted",
		Payload: json.RawMessage(`{"submission_id":"847","units":2}`)}
	for _, delivery := range []string{"d1", "d2"} {
		ev.DeliveryID = delivery
		res, err := ledger.ReceiveEvent(ctx, rules, ev)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Duplicate, res.Operations[0].Key, string(res.Operations[0].Payload))
	}
	stats, err := ledger.EventStats(ctx, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("events:", stats.Events, "deliveries:", stats.Deliveries, "duplicates:", stats.DuplicateDeliveries)
	// Output:
	// false intake:847:create {"submission":"847","units":2}
	// true intake:847:create {"submission":"847","units":2}
	// events: 1 deliveries: 2 duplicates: 1
}

// A workflow's second step is recorded once the first has succeeded, with
// the first step's reference filled in and then frozen.
func ExampleLedger_PutWorkflow() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	spec := opledger.WorkflowSpec{Owner: "campaign-team", Steps: []opledger.WorkflowStep{
		{Name: "create_task", Action: "crm.create_task", Destination: "crm",
			Payload: json.RawMessage(`{"campaign":"C-17"}`)},
		{Name: "send_email", Action: "email.send", Destination: "email",
			Payload: json.RawMessage(`{"template":"follow-up","task":"{steps.create_task.ref}"}`)},
	}}
	w, created, err := ledger.PutWorkflow(ctx, "wf:C-17", spec)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(created, w.Status, w.Steps[0].State, w.Steps[1].State)

	// A worker runs the first step.
	run := func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
		return opledger.Result{Ref: "T-9"}, nil
	}
	step1, err := ledger.Get(ctx, "wf:C-17/create_task")
	if err != nil {
		log.Fatal(err)
	}
	in := opledger.Intent{Key: step1.Key, Action: step1.Action, Destination: step1.Destination, Payload: step1.Payload, Owner: step1.Owner}
	if _, err := ledger.Do(ctx, in, run); err != nil {
		log.Fatal(err)
	}
	// After a success (or on restart) the workflow is resumed.
	w, err = ledger.AdvanceWorkflowOf(ctx, "wf:C-17/create_task")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(w.Status, w.Steps[0].State, w.Steps[1].State, string(w.Steps[1].Operation.Payload))
	// Output:
	// true running pending waiting
	// running succeeded pending {"task":"T-9","template":"follow-up"}
}

// The open workflows of one kind, a page at a time, each with its status
// and the reason an operator can act on.
func ExampleLedger_ListWorkflows() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	for _, key := range []string{"onboarding:C-2", "onboarding:C-1", "billing:B-1"} {
		spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "welcome", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{"template":"welcome"}`)},
		}}
		if _, _, err := ledger.PutWorkflow(ctx, key, spec); err != nil {
			log.Fatal(err)
		}
	}
	o := opledger.WorkflowListOptions{Prefix: "onboarding:", Open: true, Limit: 1}
	for {
		page, err := ledger.ListWorkflows(ctx, o)
		if err != nil {
			log.Fatal(err)
		}
		for _, w := range page.Items {
			fmt.Println(w.Key, w.Status+":", w.Reason)
		}
		if page.NextCursor == "" {
			break
		}
		o.Cursor = page.NextCursor
	}
	// Output:
	// onboarding:C-1 running: step welcome is pending
	// onboarding:C-2 running: step welcome is pending
}
