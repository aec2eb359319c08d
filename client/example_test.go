package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
)

// startExample serves the HTTP API on 127.0.0.1 over a ledger in a SQLite
// file in a fresh temporary directory, and returns a client with a token
// of it.
func startExample() (*client.Client, func()) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "opledger-client-example")
	if err != nil {
		log.Fatal(err)
	}
	l, err := opledger.Open(ctx, "sqlite:"+filepath.Join(dir, "ledger.db"), opledger.Options{})
	if err != nil {
		log.Fatal(err)
	}
	token, _, err := l.CreateToken(ctx, "example", opledger.ReadWrite)
	if err != nil {
		log.Fatal(err)
	}
	h, err := httpapi.New(l, httpapi.Options{Auth: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	return client.New(srv.URL, token, nil), func() { srv.Close(); l.Close(); os.RemoveAll(dir) }
}

// A worker claims an operation, recording it in the same request, marks
// the recovery point just before it calls the destination, and reports
// the outcome. A later claim of the same key replays the saved result:
// nothing is sent again.
func ExampleClient_Claim() {
	ctx := context.Background()
	c, done := startExample()
	defer done()

	key := "intake:I18:create"
	claim, err := c.Claim(ctx, key, client.ClaimRequest{Worker: "w1", Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"submission":"847"}`)}})
	if err != nil {
		log.Fatal(err)
	}
	op, err := c.Dispatch(ctx, key, claim.AttemptID, claim.FencingToken)
	if err != nil {
		log.Fatal(err) // a stale fencing token: do not call the destination
	}
	fmt.Println(op.State, op.Dispatched)

	// ... call the CRM here, sending claim.IdempotencyKey if it takes one ...
	res, err := c.Report(ctx, key, claim.AttemptID, client.Report{FencingToken: claim.FencingToken,
		Outcome: opledger.OutcomeSucceeded, DestinationRef: "H42", Response: json.RawMessage(`{"id":"H42"}`)})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.State, res.DestinationRef)

	_, err = c.Claim(ctx, key, client.ClaimRequest{Worker: "w2"})
	var replay *client.ReplayError
	if errors.As(err, &replay) {
		fmt.Println("replayed:", replay.Operation.DestinationRef, string(replay.Operation.Response))
	}
	// Output:
	// in_progress true
	// succeeded H42
	// replayed: H42 {"id":"H42"}
}

// A refusal comes back as an *Error with the API's problem; it matches
// the library's sentinel errors.
func ExampleError() {
	ctx := context.Background()
	c, done := startExample()
	defer done()

	key := "intake:I19:create"
	in := client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"submission":"848"}`)}
	if _, _, err := c.Record(ctx, key, in); err != nil {
		log.Fatal(err)
	}
	in.Payload = json.RawMessage(`{"submission":"849"}`) // other content under the same key
	_, _, err := c.Record(ctx, key, in)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Kind(), e.Problem.State)
	}
	fmt.Println(errors.Is(err, opledger.ErrFingerprintMismatch))
	// Output:
	// 422 fingerprint_mismatch pending
	// true
}
