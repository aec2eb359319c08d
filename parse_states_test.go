package opledger_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// ParseStates takes the comma-separated lists the API's state parameter
// and the CLI's --state take: an empty list is no filter, an empty entry
// or an unknown name is refused naming it, never skipped (a list built
// from a variable left unset would otherwise list fewer states, or every
// state).
func TestParseStates(t *testing.T) {
	t.Parallel()
	for list, want := range map[string][]opledger.State{
		"":                  nil,
		"held":              {opledger.StateHeld},
		"held,uncertain":    {opledger.StateHeld, opledger.StateUncertain},
		" held , failed ":   {opledger.StateHeld, opledger.StateFailed},
		"pending,pending":   {opledger.StatePending, opledger.StatePending},
		"awaiting_approval": {opledger.StateAwaitingApproval},
	} {
		got, err := opledger.ParseStates(list)
		require.NoError(t, err, list)
		require.Equal(t, want, got, list)
	}
	for list, msg := range map[string]string{
		",":               `entry 1 of "," is empty`,
		" ":               `entry 1 of " " is empty`,
		"held,":           `entry 2 of "held," is empty`,
		"held,,uncertain": `entry 2 of "held,,uncertain" is empty`,
		"held,done":       `unknown state "done"`,
		"Held":            `unknown state "Held"`,
		"held;uncertain":  `unknown state "held;uncertain"`,
	} {
		got, err := opledger.ParseStates(list)
		require.Nil(t, got, list)
		require.True(t, errors.Is(err, opledger.ErrInvalidInput), "%s: %v", list, err)
		require.Contains(t, err.Error(), msg, list)
		require.Contains(t, err.Error(), "(states: "+opledger.StateNames()+")", list)
	}
}
