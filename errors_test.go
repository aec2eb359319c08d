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
