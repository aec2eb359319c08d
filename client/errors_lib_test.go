package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
)

// A decision without a reason is refused by the API as reason_required
// (unchanged), and the client's error matches what the library's does:
// opledger.ErrReasonRequired and opledger.ErrInvalidInput.
func TestReasonRequiredMatchesAsInTheLibrary(t *testing.T) {
	t.Parallel()
	c := serve(t)
	ctx := context.Background()
	const key = "order:R1:create"
	_, _, err := c.Record(ctx, key, client.Intent{Action: "crm.create", Destination: "crm"})
	require.NoError(t, err)
	_, _, err = c.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Operator: "Maria"})
	var e *client.Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "reason_required", e.Kind(), "the API's answer is unchanged")
	require.Equal(t, 400, e.Status)
	require.ErrorIs(t, err, opledger.ErrReasonRequired)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
}

// TestErrorsAsInTheLibrary: a program written against the library and
// moved to the client keeps what it relied on. The same refused request,
// made once through the library and once through the client (a refusal
// records nothing, so both meet the operation in the same state), gives
// an error that errors.As makes the same *opledger.StateError or
// *opledger.StaleError of, and of which opledger.OperationOf gives the
// operation; where the problem does not carry what the library's error
// holds, errors.As finds none.
func TestErrorsAsInTheLibrary(t *testing.T) {
	t.Parallel()
	b := setup(t)
	c, l := b.client, b.ledger
	ctx := context.Background()

	// An uncertain operation: a claim and a decision it does not allow.
	const uncertain = "order:A1:create"
	cl, err := c.Claim(ctx, uncertain, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Ada"}`)}})
	require.NoError(t, err)
	_, err = c.Report(ctx, uncertain, cl.AttemptID, client.Report{FencingToken: cl.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	// An operation in progress: a claim, and a dispatch with a token that
	// is not the attempt's.
	const held = "order:A2:create"
	cl2, err := c.Claim(ctx, held, client.ClaimRequest{Worker: "w1", Intent: &client.Intent{
		Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Bob"}`)}})
	require.NoError(t, err)

	sameState := func(t *testing.T, libErr, cliErr error) {
		t.Helper()
		var lib, cli *opledger.StateError
		require.ErrorAs(t, libErr, &lib)
		require.ErrorAs(t, cliErr, &cli, "%v", cliErr)
		require.Equal(t, lib.Op, cli.Op)
		require.Equal(t, lib.Key, cli.Key)
		require.Equal(t, lib.State, cli.State)
		require.NotNil(t, cli.Operation)
		require.Equal(t, lib.Operation.Key, cli.Operation.Key)
		require.Equal(t, lib.Operation.State, cli.Operation.State)
		require.True(t, lib.Operation.UpdatedAt.Equal(cli.Operation.UpdatedAt))
		require.Equal(t, lib.Error(), cli.Error(), "the library's own words")
		for _, target := range []error{opledger.ErrInvalidState, opledger.ErrInProgress, opledger.ErrAlreadySucceeded, opledger.ErrNotDue} {
			require.Equal(t, errors.Is(libErr, target), errors.Is(cli, target), "%v", target)
		}
		require.NotNil(t, opledger.OperationOf(cliErr))
		require.Equal(t, opledger.OperationOf(libErr).Key, opledger.OperationOf(cliErr).Key)
		require.Equal(t, opledger.OperationOf(libErr).State, opledger.OperationOf(cliErr).State)
	}
	t.Run("claim", func(t *testing.T) {
		_, libErr := l.Claim(ctx, uncertain, opledger.ClaimOptions{Worker: "w2"})
		_, cliErr := c.Claim(ctx, uncertain, client.ClaimRequest{Worker: "w2"})
		sameState(t, libErr, cliErr)
		_, libErr = l.Claim(ctx, held, opledger.ClaimOptions{Worker: "w2"})
		_, cliErr = c.Claim(ctx, held, client.ClaimRequest{Worker: "w2"})
		sameState(t, libErr, cliErr)
		require.ErrorIs(t, cliErr, opledger.ErrInProgress)
	})
	t.Run("decisions", func(t *testing.T) {
		d := opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn", Operator: "Maria"}
		_, _, libErr := l.Resolve(ctx, held, d)
		_, _, cliErr := c.Resolve(ctx, held, d)
		sameState(t, libErr, cliErr)
		a := opledger.Approval{Version: 1, Fingerprint: cl.Operation.Fingerprint, Approver: "Maria"}
		_, _, libErr = l.Approve(ctx, uncertain, a)
		_, _, cliErr = c.Approve(ctx, uncertain, a)
		sameState(t, libErr, cliErr)
		r := opledger.Revision{Payload: json.RawMessage(`{"name":"Eve"}`), Version: 2}
		_, _, libErr = l.Revise(ctx, uncertain, r)
		_, _, cliErr = c.Revise(ctx, uncertain, r)
		sameState(t, libErr, cliErr)
		f := opledger.Finding{Found: false, Authoritative: true}
		_, _, libErr = l.Reconcile(ctx, held, f)
		_, _, cliErr = c.Reconcile(ctx, held, client.Finding{Found: false, Authoritative: true})
		sameState(t, libErr, cliErr)
	})
	t.Run("stale fencing token", func(t *testing.T) {
		wrong := cl2.FencingToken + 1
		for name, call := range map[string]func() (error, error){
			"dispatch": func() (error, error) {
				_, libErr := l.Dispatch(ctx, held, cl2.AttemptID, wrong)
				_, cliErr := c.Dispatch(ctx, held, cl2.AttemptID, wrong)
				return libErr, cliErr
			},
			"release": func() (error, error) {
				_, libErr := l.Release(ctx, held, cl2.AttemptID, wrong, "")
				_, cliErr := c.Release(ctx, held, cl2.AttemptID, wrong, "")
				return libErr, cliErr
			},
			"extend lease": func() (error, error) {
				_, libErr := l.ExtendLease(ctx, held, cl2.AttemptID, wrong, time.Minute)
				_, cliErr := c.ExtendLease(ctx, held, cl2.AttemptID, wrong, time.Minute)
				return libErr, cliErr
			},
			"report": func() (error, error) {
				_, libErr := l.Report(ctx, held, cl2.AttemptID, wrong, opledger.Report{Outcome: opledger.OutcomeRetryable})
				_, cliErr := c.Report(ctx, held, cl2.AttemptID, client.Report{FencingToken: wrong, Outcome: opledger.OutcomeRetryable})
				return libErr, cliErr
			},
		} {
			t.Run(name, func(t *testing.T) {
				libErr, cliErr := call()
				var lib, cli *opledger.StaleError
				require.ErrorAs(t, libErr, &lib)
				require.ErrorAs(t, cliErr, &cli, "%v", cliErr)
				require.Equal(t, lib.Key, cli.Key)
				require.Equal(t, lib.AttemptID, cli.AttemptID)
				require.Equal(t, lib.FencingToken, cli.FencingToken)
				require.Equal(t, lib.Current, cli.Current)
				require.False(t, cli.Recorded)
				require.Equal(t, lib.Recorded, cli.Recorded)
				require.Equal(t, lib.AttemptToken, cli.AttemptToken, "the current attempt's is the operation's")
				require.Equal(t, lib.Error(), cli.Error())
				require.Equal(t, lib.Operation.State, cli.Operation.State)
				require.ErrorIs(t, cli, opledger.ErrStaleFencingToken)
				require.Equal(t, held, opledger.OperationOf(cliErr).Key)
			})
		}
	})
	t.Run("stale fencing token of an earlier attempt", func(t *testing.T) {
		// The problem carries the token the earlier attempt was issued
		// (attempt_token): AttemptToken is the library's, and the error
		// says what the library's says.
		const retried = "order:A4:create"
		first, err := c.Claim(ctx, retried, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
			Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Cy"}`)}})
		require.NoError(t, err)
		_, err = c.Report(ctx, retried, first.AttemptID, client.Report{FencingToken: first.FencingToken, Outcome: opledger.OutcomeUncertain, Error: "timeout"})
		require.NoError(t, err)
		_, _, err = c.Resolve(ctx, retried, opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "not in the CRM", Operator: "Maria"})
		require.NoError(t, err)
		_, err = c.Claim(ctx, retried, client.ClaimRequest{Worker: "w2"})
		require.NoError(t, err)
		_, libErr := l.Dispatch(ctx, retried, first.AttemptID, first.FencingToken)
		_, cliErr := c.Dispatch(ctx, retried, first.AttemptID, first.FencingToken)
		var lib, cli *opledger.StaleError
		require.ErrorAs(t, libErr, &lib)
		require.ErrorAs(t, cliErr, &cli)
		require.Equal(t, first.FencingToken, lib.AttemptToken)
		require.Equal(t, lib.AttemptToken, cli.AttemptToken, "from the problem's attempt_token")
		require.Equal(t, lib.Current, cli.Current)
		require.Equal(t, lib.Error(), cli.Error())
	})
	t.Run("refusals that carry the operation", func(t *testing.T) {
		// ErrStaleDecision: no typed error, but the operation.
		d := opledger.Decision{Kind: opledger.DecisionCancel, Reason: "withdrawn", Operator: "Maria", SeenUpdatedAt: time.Unix(1, 0)}
		_, _, libErr := l.Resolve(ctx, uncertain, d)
		_, _, cliErr := c.Resolve(ctx, uncertain, d)
		require.ErrorIs(t, cliErr, opledger.ErrStaleDecision)
		require.Equal(t, opledger.OperationOf(libErr).State, opledger.OperationOf(cliErr).State)
		require.Equal(t, uncertain, opledger.OperationOf(cliErr).Key)
		require.False(t, errors.As(cliErr, new(*opledger.StateError)), "the library's is no *StateError either")
		require.False(t, errors.As(libErr, new(*opledger.StateError)))
	})
	t.Run("replay", func(t *testing.T) {
		const done = "order:A3:create"
		succeed(t, c, done)
		_, libErr := l.Claim(ctx, done, opledger.ClaimOptions{})
		_, cliErr := c.Claim(ctx, done, client.ClaimRequest{})
		var replay *client.ReplayError
		require.ErrorAs(t, cliErr, &replay)
		sameState(t, libErr, cliErr)
		require.Equal(t, "R1", opledger.OperationOf(cliErr).DestinationRef)
	})
	t.Run("retry of the step a workflow was cancelled at", func(t *testing.T) {
		// The library refuses it matching ErrInvalidState, with the
		// operation, but without a *StateError (failed is a state
		// authorize_retry applies to): so does the client.
		_, _, err := c.PutWorkflow(ctx, "wf:A5", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"x":1}`)}}})
		require.NoError(t, err)
		cl, err := c.Claim(ctx, "wf:A5/a", client.ClaimRequest{Worker: "w1", Dispatch: true})
		require.NoError(t, err)
		_, err = c.Report(ctx, "wf:A5/a", cl.AttemptID, client.Report{FencingToken: cl.FencingToken, Outcome: opledger.OutcomeRejected, Error: "invalid"})
		require.NoError(t, err)
		_, _, err = c.CancelWorkflow(ctx, "wf:A5", opledger.WorkflowCancel{Reason: "given up", Operator: "Maria"})
		require.NoError(t, err)
		d := opledger.Decision{Kind: opledger.DecisionAuthorizeRetry, Reason: "try again", Operator: "Maria"}
		_, _, libErr := l.Resolve(ctx, "wf:A5/a", d)
		_, _, cliErr := c.Resolve(ctx, "wf:A5/a", d)
		for _, err := range []error{libErr, cliErr} {
			require.ErrorIs(t, err, opledger.ErrInvalidState)
			require.False(t, errors.As(err, new(*opledger.StateError)), "%v", err)
			require.Equal(t, opledger.StateFailed, opledger.OperationOf(err).State)
		}
	})
	t.Run("mismatch", func(t *testing.T) {
		// The problem of a fingerprint_mismatch carries what the
		// library's *MismatchError holds (mismatch): errors.As builds the
		// same one, for a plain intent, an approval of another version,
		// an intent older than a revision, and a workflow's steps.
		other := json.RawMessage(`{"name":"Other"}`)
		const approve, revised = "order:A7:create", "order:A8:create"
		_, _, err := c.Record(ctx, approve, client.Intent{Action: "crm.create", Destination: "crm", RequiresApproval: true,
			Payload: json.RawMessage(`{"name":"Ed"}`)})
		require.NoError(t, err)
		_, _, err = c.Record(ctx, revised, client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Flo"}`)})
		require.NoError(t, err)
		_, _, err = c.Revise(ctx, revised, opledger.Revision{Version: 2, Payload: json.RawMessage(`{"name":"Flo B."}`), Actor: "Maria"})
		require.NoError(t, err)
		wrongVersion := opledger.Approval{Version: 2, Fingerprint: "sha256:0", Approver: "Maria"}
		for name, call := range map[string]func() (error, error){
			"intent": func() (error, error) {
				_, _, libErr := l.Record(ctx, opledger.Intent{Key: uncertain, Action: "crm.create", Destination: "crm", Payload: other})
				_, _, cliErr := c.Record(ctx, uncertain, client.Intent{Action: "crm.create", Destination: "crm", Payload: other})
				return libErr, cliErr
			},
			"approval": func() (error, error) {
				_, _, libErr := l.Approve(ctx, approve, wrongVersion)
				_, _, cliErr := c.Approve(ctx, approve, wrongVersion)
				return libErr, cliErr
			},
			"revised since": func() (error, error) {
				_, _, libErr := l.Record(ctx, opledger.Intent{Key: revised, Action: "crm.create", Destination: "crm", Payload: other})
				_, _, cliErr := c.Record(ctx, revised, client.Intent{Action: "crm.create", Destination: "crm", Payload: other})
				return libErr, cliErr
			},
			"workflow": func() (error, error) {
				spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{{Name: "a", Action: "crm.create", Destination: "crm", Payload: other}}}
				_, _, libErr := l.PutWorkflow(ctx, "wf:A5", spec)
				_, _, cliErr := c.PutWorkflow(ctx, "wf:A5", spec)
				return libErr, cliErr
			},
		} {
			t.Run(name, func(t *testing.T) {
				libErr, cliErr := call()
				var lib, cli *opledger.MismatchError
				require.ErrorAs(t, libErr, &lib)
				require.ErrorAs(t, cliErr, &cli, "%v", cliErr)
				require.Equal(t, *lib, *cli)
				require.Equal(t, lib.Error(), cli.Error())
				require.ErrorIs(t, cliErr, opledger.ErrFingerprintMismatch)
			})
		}
	})
	t.Run("not built", func(t *testing.T) {
		// A release after the dispatch: no *StateError in the library
		// either, but the operation.
		const sent = "order:A6:create"
		cl, err := c.Claim(ctx, sent, client.ClaimRequest{Worker: "w1", Dispatch: true, Intent: &client.Intent{
			Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"name":"Di"}`)}})
		require.NoError(t, err)
		_, libErr := l.Release(ctx, sent, cl.AttemptID, cl.FencingToken, "")
		_, cliErr := c.Release(ctx, sent, cl.AttemptID, cl.FencingToken, "")
		for _, err := range []error{libErr, cliErr} {
			require.ErrorIs(t, err, opledger.ErrAlreadyDispatched)
			require.False(t, errors.As(err, new(*opledger.StateError)), "%v", err)
			require.Equal(t, sent, opledger.OperationOf(err).Key)
		}
		// Nothing found carries no operation, and OperationOf's nil
		// takes a chained call.
		_, cliErr = c.Claim(ctx, "order:none", client.ClaimRequest{})
		require.ErrorIs(t, cliErr, opledger.ErrNotFound)
		require.Nil(t, opledger.OperationOf(cliErr))
		require.False(t, errors.As(cliErr, new(*opledger.StateError)))
		// A problem from something in front of the API carries no
		// operation: nothing is made up.
		front := &client.Error{Status: 409, Problem: httpapi.Problem{Type: httpapi.ProblemTypeBase + "invalid_state", State: opledger.StateHeld}}
		require.False(t, errors.As(front, new(*opledger.StateError)))
		require.Nil(t, opledger.OperationOf(front))
	})
}
