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

// Compare orders numbers by their exact value, whatever their spelling
// and exponents.
func TestCompare(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		x, y string
		want int
	}{
		{"10", "9.99", 1}, {"9.99", "10", -1}, {"2.50", "2.5", 0}, {"1e2", "100", 0},
		{"-0", "0", 0}, {"0", "-1e-400", 1}, {"-10", "-9.99", -1}, {"-1", "1", -1},
		{"9007199254740993", "9007199254740992", 1}, {"1e999999", "9e999998", 1},
		{"0.001", "1e-3", 0}, {"123", "1.24e2", -1},
	} {
		x, err := jsonnum.Parse(c.x)
		require.NoError(t, err, c.x)
		y, err := jsonnum.Parse(c.y)
		require.NoError(t, err, c.y)
		require.Equal(t, c.want, jsonnum.Compare(x, y), "%s vs %s", c.x, c.y)
		require.Equal(t, -c.want, jsonnum.Compare(y, x), "%s vs %s", c.y, c.x)
	}
}
