package jsonnum_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/jsonnum"
)

// Equal values share one exact form, whatever their spelling; different
// values never do, however many digits they have.
func TestExact(t *testing.T) {
	t.Parallel()
	for text, want := range map[string]string{
		"0": "0e0", "-0.0": "0e0", "0e99": "0e0",
		"100": "1e2", "1e2": "1e2", "1.00E+2": "1e2", "0.0100e4": "1e2",
		"-0.170":           "-17e-2",
		"9007199254740993": "9007199254740993e0",
		"9007199254740992": "9007199254740992e0",
		"1e-400":           "1e-400",
	} {
		got, err := jsonnum.Exact(text)
		require.NoError(t, err, text)
		require.Equal(t, want, got, text)
	}
	_, err := jsonnum.Exact("1e99999999999")
	require.ErrorContains(t, err, "exponent out of range")
	require.NotContains(t, err.Error(), "99999", "the error never repeats the number")
}
