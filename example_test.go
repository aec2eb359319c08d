package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/opledger/opledger"
)

// openExample opens a ledger on a SQLite file in a fresh temporary
// directory.
func openExample() (*opledger.Ledger, func()) {
	dir, err := os.MkdirTemp("", "opledger-example")
	if err != nil {
		log.Fatal(err)
	}
	l, err := opledger.Open(context.Background(), "sqlite:"+filepath.Join(dir, "ledger.db"), opledger.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return l, func() { l.Close(); os.RemoveAll(dir) }
}

// Do runs an action at most once per key: the repeat replays the saved
// result instead of calling the CRM again.
func ExampleLedger_Do() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	calls := 0
	createInquiry := func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
		calls++ // a real action calls the CRM here, sending call.IdempotencyKey
		return opledger.Result{Ref: "H42", Response: json.RawMessage(`{"id":"H42"}`)}, nil
	}
	intent := opledger.Intent{
		Key:         "intake:I17:create",
		Action:      "crm.create_inquiry",
		Destination: "crm",
		Payload:     json.RawMessage(`{"submission":"847"}`),
	}
	for range 2 {
		op, err := ledger.Do(ctx, intent, createInquiry)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(op.State, op.DestinationRef)
	}
	fmt.Println("calls to the CRM:", calls)

	// The same key with other content is not a retry.
	intent.Payload = json.RawMessage(`{"submission":"848"}`)
	_, err := ledger.Do(ctx, intent, createInquiry)
	fmt.Println(errors.Is(err, opledger.ErrFingerprintMismatch))
	// Output:
	// succeeded H42
	// succeeded H42
	// calls to the CRM: 1
	// true
}

// A lost response leaves the operation uncertain; a lookup at the
// destination settles it without sending anything again.
func ExampleLedger_Reconcile() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	intent := opledger.Intent{Key: "intake:I18:create", Action: "crm.create_inquiry", Destination: "crm",
		Payload: json.RawMessage(`{"submission":"848"}`), Owner: "intake-team"}
	op, err := ledger.Do(ctx, intent, func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
		// The CRM created H43, but the connection dropped before the answer.
		return opledger.Result{}, opledger.Uncertain(errors.New("read: connection reset after request was written"))
	})
	// Not a refusal: the attempt ran, and its outcome is uncertain.
	var attemptErr *opledger.AttemptError
	if errors.As(err, &attemptErr) {
		fmt.Println(op.State, attemptErr.Outcome, errors.Is(err, opledger.ErrInvalidState))
	} else {
		fmt.Println(op.State, "and no *AttemptError:", err)
	}

	// Retrying now is refused: nobody knows whether H43 exists.
	_, err = ledger.Claim(ctx, intent.Key, opledger.ClaimOptions{})
	fmt.Println(err)

	// The reconciler looked the record up by its external reference.
	op, _, err = ledger.Reconcile(ctx, intent.Key, opledger.Finding{Found: true, Matches: true, DestinationRef: "H43"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(op.State, op.DestinationRef)
	// Output:
	// uncertain uncertain false
	// claim intake:I18:create: operation is uncertain
	// succeeded H43
}

// An owner's work list: the held operations, earliest review first, and
// how many are past their review time.
func ExampleLedger_List() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	for _, key := range []string{"mail:welcome:u17", "mail:welcome:u18"} {
		op, err := ledger.Do(ctx, opledger.Intent{Key: key, Action: "email.send", Destination: "email",
			Payload: json.RawMessage(`{"template":"welcome"}`), Owner: "ops-team"},
			func(ctx context.Context, call opledger.Call) (opledger.Result, error) {
				return opledger.Result{}, opledger.Uncertain(errors.New("timeout after the request was sent"))
			})
		fmt.Println(op.Key, op.State, err != nil)
	}
	// The provider offers no lookup: the reconciler hands u18, then u17,
	// to their owner.
	for _, key := range []string{"mail:welcome:u18", "mail:welcome:u17"} {
		if _, err := ledger.Hold(ctx, key, "the provider has no message lookup"); err != nil {
			log.Fatal(err)
		}
	}

	page, err := ledger.List(ctx, opledger.ListOptions{Order: opledger.OrderReview})
	if err != nil {
		log.Fatal(err)
	}
	for _, op := range page.Items {
		fmt.Println(op.Key, op.State, op.Owner)
	}
	stats, err := ledger.Stats(ctx, false)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("overdue reviews:", stats.ReviewsOverdue)
	// Output:
	// mail:welcome:u17 uncertain true
	// mail:welcome:u18 uncertain true
	// mail:welcome:u18 held ops-team
	// mail:welcome:u17 held ops-team
	// overdue reviews: 0
}

// The protocol step by step, for workers that do not run their action
// inside Do (for example, over the HTTP API).
func ExampleLedger_Claim() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	_, created, err := ledger.Record(ctx, opledger.Intent{Key: "mail:welcome:u17", Action: "email.send",
		Destination: "mailer", Payload: json.RawMessage(`{"template":"welcome"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", created)

	claim, err := ledger.Claim(ctx, "mail:welcome:u17", opledger.ClaimOptions{Worker: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	_, err = ledger.Claim(ctx, "mail:welcome:u17", opledger.ClaimOptions{Worker: "worker-2"})
	fmt.Println("second claim:", errors.Is(err, opledger.ErrInProgress))

	// The recovery point: from here on a lost worker means "uncertain".
	if _, err := ledger.Dispatch(ctx, "mail:welcome:u17", claim.AttemptID, claim.FencingToken); err != nil {
		log.Fatal(err)
	}
	op, err := ledger.Report(ctx, "mail:welcome:u17", claim.AttemptID, claim.FencingToken,
		opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "msg-981"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(op.State, op.DestinationRef, op.AttemptCount)
	// Output:
	// created: true
	// second claim: true
	// succeeded msg-981 1
}

// ReportOf turns what a call to the destination returned into the report
// a worker that claims on its own records: here a timeout after the
// destination said what it made, which is uncertain, never a retry.
func ExampleReportOf() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	if _, _, err := ledger.Record(ctx, opledger.Intent{Key: "crm:contact:c9", Action: "crm.create_contact",
		Destination: "crm", Payload: json.RawMessage(`{"list":"newsletter"}`)}); err != nil {
		log.Fatal(err)
	}
	claim, err := ledger.Claim(ctx, "crm:contact:c9", opledger.ClaimOptions{Worker: "worker-1"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := ledger.Dispatch(ctx, "crm:contact:c9", claim.AttemptID, claim.FencingToken); err != nil {
		log.Fatal(err)
	}
	// The call: the CRM created contact C-301, then the tag update timed out.
	res, callErr := opledger.Result{Ref: "C-301"}, opledger.Retryable(errors.New("tag update timed out"), 0)

	report := opledger.ReportOf(res, callErr)
	fmt.Println(report.Outcome, report.DestinationRef)
	op, err := ledger.Report(ctx, "crm:contact:c9", claim.AttemptID, claim.FencingToken, report)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s, confirmed ref %q\n", op.State, op.DestinationRef)
	// Output:
	// uncertain C-301
	// uncertain, confirmed ref ""
}

// Maintain does the ledger's periodic work (settling the leases of
// workers that died, moving workflows on, applying retention) for a
// program that embeds the library without opledger serve or opledger
// proxy, until its context ends or the ledger is closed.
func ExampleLedger_Maintain() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "opledger-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// The example moves the ledger's clock on by late, rather than
	// waiting for a lease to run out.
	var late atomic.Int64
	ledger, err := opledger.Open(ctx, "sqlite:"+filepath.Join(dir, "ledger.db"), opledger.Options{
		Clock: func(store time.Time) time.Time { return store.Add(time.Duration(late.Load())) }})
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	// A worker claimed an operation, started its call, and died.
	const key = "intake:I19:create"
	_, err = ledger.Claim(ctx, key, opledger.ClaimOptions{Worker: "worker-7", Lease: time.Minute, Dispatch: true,
		Intent: &opledger.Intent{Key: key, Action: "crm.create_inquiry", Destination: "crm"}})
	if err != nil {
		log.Fatal(err)
	}
	late.Store(int64(time.Hour)) // its lease has run out
	op, err := ledger.Get(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("before Maintain:", op.State)

	// Maintain logs what each of its runs changed.
	lines := make(logLines, 16)
	logger := slog.New(slog.NewTextHandler(lines, &slog.HandlerOptions{ReplaceAttr: withoutTime}))
	maintained, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		ledger.Maintain(maintained, opledger.MaintainOptions{Logger: logger}) // every 5 s and every hour
		close(stopped)
	}()
	fmt.Print(<-lines) // its first lease sweep, at once

	// ... the program's own work ...

	stop()
	<-stopped
	timeline, err := ledger.Timeline(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	last := timeline[len(timeline)-1]
	fmt.Printf("after Maintain: %s, by %s: %s (%s)\n", last.To, last.Actor, last.Event, last.Evidence)
	// Output:
	// before Maintain: in_progress
	// level=INFO msg="settled expired leases" count=1
	// after Maintain: uncertain, by system: lease expired after dispatch (the call may have reached the destination; worker worker-7 never reported)
}

// logLines is an io.Writer that hands each line a slog handler writes to
// a reader of the channel; lines nobody reads in time are dropped.
type logLines chan string

func (c logLines) Write(p []byte) (int, error) {
	select {
	case c <- string(p):
	default:
	}
	return len(p), nil
}

// withoutTime leaves out the time of a log line, so that it reads the
// same on every run.
func withoutTime(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}

// WithCredential makes the decisions of a handle name what its caller
// signed in with, after the name the caller gives: here a service that
// authenticated a request with a token passes that token on.
func ExampleLedger_WithCredential() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	if _, _, err := ledger.Record(ctx, opledger.Intent{Key: "intake:I18:create", Action: "crm.create_inquiry", Destination: "crm"}); err != nil {
		log.Fatal(err)
	}
	secret, _, err := ledger.CreateToken(ctx, "ops-laptop", opledger.ReadWrite)
	if err != nil {
		log.Fatal(err)
	}
	// A request arrives with secret: authenticate it, then decide through
	// a handle that carries its token. (The HTTP API passes
	// token.Credential(), which adds the token's ID to its name.)
	token, err := ledger.Authenticate(ctx, secret)
	if err != nil {
		log.Fatal(err)
	}
	signedIn, err := ledger.WithCredential("token " + token.Name)
	if err != nil {
		log.Fatal(err)
	}
	_, _, err = signedIn.Resolve(ctx, "intake:I18:create", opledger.Decision{
		Kind: opledger.DecisionCancel, Reason: "the applicant withdrew", Operator: "Maria"})
	if err != nil {
		log.Fatal(err)
	}
	timeline, err := ledger.Timeline(ctx, "intake:I18:create")
	if err != nil {
		log.Fatal(err)
	}
	last := timeline[len(timeline)-1]
	fmt.Println(last.Event, "by", last.Actor)
	// Output:
	// operator cancelled by Maria (token ops-laptop)
}

// A service that authenticates requests with the ledger's tokens checks
// their access itself: the library trusts its caller. A worker token may
// record, claim and report, but an operator's decision needs a token that
// may decide.
func ExampleTokenInfo_CanDecide() {
	ctx := context.Background()
	ledger, done := openExample()
	defer done()

	secret, _, err := ledger.CreateToken(ctx, "n8n", opledger.Worker)
	if err != nil {
		log.Fatal(err)
	}
	token, err := ledger.Authenticate(ctx, secret)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(token.Name, token.Access, "may write:", token.CanWrite(), "may decide:", token.CanDecide())
	// Output:
	// n8n worker may write: true may decide: false
}

// A ledger opened with DestinationsRequiringApproval makes every new
// operation for those destinations wait for a person's approval, even
// when the intent does not ask for one: approval is the service's rule,
// not the recorder's choice.
func ExampleOptions_destinationsRequiringApproval() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "opledger-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ledger, err := opledger.Open(ctx, "sqlite:"+filepath.Join(dir, "ledger.db"),
		opledger.Options{DestinationsRequiringApproval: []string{"payments"}})
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()

	op, _, err := ledger.Record(ctx, opledger.Intent{Key: "order:1042:capture", Action: "payments.capture",
		Destination: "payments", Payload: json.RawMessage(`{"cents":1200}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(op.State)
	_, err = ledger.Claim(ctx, op.Key, opledger.ClaimOptions{})
	fmt.Println("claim refused:", errors.Is(err, opledger.ErrInvalidState))

	op, _, err = ledger.Approve(ctx, op.Key, opledger.Approval{Version: op.Version, Fingerprint: op.Fingerprint, Approver: "Maria"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(op.State, "approved by", op.ApprovedBy)
	// Output:
	// awaiting_approval
	// claim refused: true
	// pending approved by Maria
}
