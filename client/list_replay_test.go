package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
)

// A *ReplayError matches what the library's *StateError for a succeeded
// operation matches: ErrAlreadySucceeded and ErrInvalidState.
func TestReplayErrorMatchesAsStateError(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	succeed(t, b.client, "order:replay:create")

	_, err := b.client.Claim(ctx, "order:replay:create", client.ClaimRequest{Worker: "w2"})
	var replay *client.ReplayError
	require.ErrorAs(t, err, &replay)
	_, libErr := b.ledger.Claim(ctx, "order:replay:create", opledger.ClaimOptions{Worker: "w2"})
	var se *opledger.StateError
	require.ErrorAs(t, libErr, &se)
	for _, target := range []error{opledger.ErrAlreadySucceeded, opledger.ErrInvalidState,
		opledger.ErrInProgress, opledger.ErrNotDue, opledger.ErrInvalidInput} {
		require.Equal(t, errors.Is(libErr, target), errors.Is(err, target), "%v", target)
	}
	require.ErrorIs(t, err, opledger.ErrInvalidState)
}

// List sends every field of ListOptions the API takes, and refuses the
// ones it cannot send before sending anything, rather than drop them.
func TestListOptions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	var sent atomic.Int64
	c := b.front(t, func(http.ResponseWriter, *http.Request) bool {
		sent.Add(1)
		return false
	})

	// Operations to tell the filters apart: owners, destinations,
	// cancelled ones, a held one and a rejected one.
	record := func(key, owner, dest string) {
		t.Helper()
		_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: key, Action: "x.create", Destination: dest, Owner: owner})
		require.NoError(t, err)
	}
	record("l:1", "ana", "crm")
	record("l:2", "bo", "crm")
	record("l:3", "ana", "mail")
	record("l:4", "ana", "crm")
	_, _, err := b.ledger.Resolve(ctx, "l:4", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
	require.NoError(t, err)
	claim, err := b.ledger.Claim(ctx, "l:2", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "l:2", claim.AttemptID, claim.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	_, _, err = b.ledger.Resolve(ctx, "l:2", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "checked"})
	require.NoError(t, err)
	record("l:5", "bo", "mail")
	claim, err = b.ledger.Claim(ctx, "l:5", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "l:5", claim.AttemptID, claim.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout"})
	require.NoError(t, err)
	_, _, err = b.ledger.Reconcile(ctx, "l:5", opledger.Finding{Found: true, Matches: false, DestinationRef: "M1", Authoritative: true, Evidence: "other content"})
	require.NoError(t, err)
	held, err := b.ledger.Get(ctx, "l:5")
	require.NoError(t, err)
	require.Equal(t, opledger.StateHeld, held.State)
	// A failed one no operator cancelled: the exception queue's.
	record("l:6", "bo", "crm")
	claim, err = b.ledger.Claim(ctx, "l:6", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "l:6", claim.AttemptID, claim.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "invalid"})
	require.NoError(t, err)

	keys := func(p *opledger.Page) []string {
		var ks []string
		for _, op := range p.Items {
			ks = append(ks, op.Key)
		}
		return ks
	}
	// Every field the API takes gives what the library gives.
	for name, o := range map[string]opledger.ListOptions{
		"all":              {},
		"states":           {States: []opledger.State{opledger.StatePending, opledger.StateHeld}},
		"owner":            {Owner: "ana"},
		"destination":      {Destination: "mail"},
		"duplicates":       {DuplicateEffects: true},
		"except cancelled": {States: []opledger.State{opledger.StateFailed}, ExceptCancelled: true},
		"review":           {Order: opledger.OrderReview},
		"newest":           {Order: opledger.OrderNewest, Limit: 2},
		"failed":           {States: []opledger.State{opledger.StateFailed}, Owner: "ana", Destination: "crm"},
	} {
		want, err := b.ledger.List(ctx, o)
		require.NoError(t, err, name)
		got, err := c.List(ctx, o)
		require.NoError(t, err, name)
		require.Equal(t, keys(want), keys(got), name)
		require.Equal(t, want.NextCursor != "", got.NextCursor != "", name)
		if got.NextCursor != "" {
			o.Cursor = got.NextCursor
			want, err = b.ledger.List(ctx, o)
			require.NoError(t, err, name)
			got, err = c.List(ctx, o)
			require.NoError(t, err, name)
			require.Equal(t, keys(want), keys(got), "%s, next page", name)
		}
	}
	// The failed one that needs a decision, without the cancelled ones.
	got, err := c.List(ctx, opledger.ListOptions{States: []opledger.State{opledger.StateFailed}, ExceptCancelled: true})
	require.NoError(t, err)
	require.Equal(t, []string{"l:6"}, keys(got))
	// The held one, by review time.
	got, err = c.List(ctx, opledger.ListOptions{Order: opledger.OrderReview})
	require.NoError(t, err)
	require.Equal(t, []string{"l:5"}, keys(got))

	// What the API cannot express is refused by the client, nothing sent.
	sentBefore := sent.Load()
	for name, tc := range map[string]struct {
		o    opledger.ListOptions
		text string
	}{
		"two states in one": {opledger.ListOptions{States: []opledger.State{"pending,held"}}, "ListOptions.States: unknown state"},
		"empty state":       {opledger.ListOptions{States: []opledger.State{opledger.StatePending, ""}}, "ListOptions.States: unknown state"},
	} {
		_, err := c.List(ctx, tc.o)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, name)
		require.ErrorContains(t, err, tc.text, name)
		var e *client.Error
		require.False(t, errors.As(err, &e), "%s: refused by the client, not the server: %v", name, err)
		// The library refuses the same states.
		_, libErr := b.ledger.List(ctx, tc.o)
		require.ErrorIs(t, libErr, opledger.ErrInvalidInput, name)
	}
	require.Equal(t, sentBefore, sent.Load(), "nothing was sent")
}

// TestNegativeLimitRefused: a negative Limit is refused, as the library
// refuses it (a mistake, never silently the default page); the client
// left it out of the request, so a caller whose remaining count went
// below zero got a full default page instead.
func TestNegativeLimitRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	for i := range 3 {
		_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: fmt.Sprintf("n:%d", i), Action: "x.create", Destination: "crm"})
		require.NoError(t, err)
	}
	_, err := b.ledger.List(ctx, opledger.ListOptions{Limit: -1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput, "the library refuses it")
	_, err = b.client.List(ctx, opledger.ListOptions{Limit: -1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = b.client.ListEvents(ctx, opledger.EventListOptions{Limit: -1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	_, err = b.client.ListWorkflows(ctx, opledger.WorkflowListOptions{Limit: -1})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	page, err := b.client.List(ctx, opledger.ListOptions{})
	require.NoError(t, err, "0 is the default page")
	require.Len(t, page.Items, 3)
}
