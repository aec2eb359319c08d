package opledger_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// A pending operation's not_before is named only where it is the reason:
// a refused claim. A decision refused on a pending operation (say, right
// after a retry was authorized) does not say "until" a time that may
// already have passed.
func TestStateErrorNamesNotBeforeOnlyForClaims(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 9, 54, 35, 2_000_000, time.UTC)
	op := &opledger.Operation{State: opledger.StatePending, NotBefore: &at}
	claim := &opledger.StateError{Op: "claim", Key: "k1", State: opledger.StatePending, Operation: op}
	require.EqualError(t, claim, "claim k1: operation is pending until 2026-12-02T09:54:35.002Z")
	require.ErrorIs(t, claim, opledger.ErrNotDue)
	resolve := &opledger.StateError{Op: "mark_succeeded", Key: "k1", State: opledger.StatePending, Operation: op}
	require.EqualError(t, resolve, "mark_succeeded k1: operation is pending: mark_succeeded applies to an operation that is held, uncertain, or failed")
	require.NotErrorIs(t, resolve, opledger.ErrNotDue)
}

// TestInvalidInputDetail: the text of an invalid input error without its
// "invalid input: " start, as a message of one's own quotes it; another
// error's text whole.
func TestInvalidInputDetail(t *testing.T) {
	t.Parallel()
	err := opledger.CheckOwner("ops\x00team")
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.Equal(t, "invalid input: "+opledger.InvalidInputDetail(err), err.Error())
	require.NotContains(t, opledger.InvalidInputDetail(err), "invalid input")
	require.Equal(t, "store down", opledger.InvalidInputDetail(errors.New("store down")))
}

// The ledger's error types are exported, so a program builds them too: a
// fake of the ledger in its own tests, or a wrapper that refuses before
// calling it. Describing one that lacks a field the ledger always fills
// (the operation, the recorded scope, the cause) gives what it has,
// never a nil-pointer panic in the middle of logging an error.
func TestErrorTypesDescribeThemselvesWithMissingFields(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"StaleError without Operation", &opledger.StaleError{Key: "k", AttemptID: "a1", FencingToken: 2, Current: 3},
			"k: attempt a1 with fencing token 2 no longer holds the operation (a newer claim holds token 3); nothing was recorded"},
		{"StaleError of another token without Operation", &opledger.StaleError{Key: "k", AttemptID: "a1", FencingToken: 2, AttemptToken: 1},
			"k: fencing token 2 is not attempt a1's (it was issued token 1); nothing was recorded"},
		{"zero StaleError", &opledger.StaleError{}, ""},
		{"KeyScopeChangedError without Recorded", &opledger.KeyScopeChangedError{Settings: map[string]string{"tenant": "b"}, Changed: []string{"tenant"}},
			"its operation keys were derived with tenant (not set), now \"b\""},
		{"zero KeyScopeChangedError", &opledger.KeyScopeChangedError{}, ""},
		{"RuleError without Err", &opledger.RuleError{Rule: "intake", Field: "operations[0].key"}, `rule "intake": operations[0].key`},
		{"zero RuleError", &opledger.RuleError{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var msg string
			require.NotPanics(t, func() { msg = tc.err.Error() })
			require.Contains(t, msg, tc.want)
		})
	}
}

// TestReasonRequiredIsInvalidInput: a decision without a reason is a
// request with a field missing, so its refusal matches ErrInvalidInput as
// well as ErrReasonRequired: code that treats every refused input alike
// (a CLI's usage error, a form shown again) treats it so too. The sentinel
// itself matches, and so does the error Resolve returns.
func TestReasonRequiredIsInvalidInput(t *testing.T) {
	t.Parallel()
	require.ErrorIs(t, opledger.ErrReasonRequired, opledger.ErrInvalidInput)
	require.NotErrorIs(t, opledger.ErrInvalidInput, opledger.ErrReasonRequired, "not every invalid input is a missing reason")
	l := openSQLiteLedger(t)
	ctx := t.Context()
	const key = "intake:R1:create"
	_, _, err := l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm"})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, key, opledger.Decision{Kind: opledger.DecisionCancel, Reason: "  ", Operator: "Maria"})
	require.ErrorIs(t, err, opledger.ErrReasonRequired)
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.EqualError(t, err, "cancel: a reason is required", "its text is unchanged")
}
