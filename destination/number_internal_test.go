package destination

import "testing"

// TestNumberEqual: JSON numbers compare by exact value. Numbers that
// float64 cannot tell apart (past 2^53, or with more digits than it
// keeps) are different amounts and must not match; the same value
// written otherwise must.
func TestNumberEqual(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		x, y string
		want bool
	}{
		{"2", "2.0", true},
		{"2.50", "2.5", true},
		{"1e2", "100", true},
		{"-0.25E-2", "-0.0025", true},
		{"0", "-0", true},
		{"9007199254740993", "9007199254740992", false},
		{"9007199254740993.0", "9007199254740992", false},
		{"12345678901234567.5", "12345678901234568", false},
		{"0.1", "0.10000000000000001", false},
		{"1e400", "10e399", true},       // beyond float64, exactly
		{"1e400", "1e401", false},       // both +Inf as float64
		{"1e100000", "1e100001", false}, // past the exponent bound: only the same text
		{"1e100000", "1e100000", true},
	} {
		if got := numberEqual(tc.x, tc.y); got != tc.want {
			t.Errorf("numberEqual(%s, %s) = %v, want %v", tc.x, tc.y, got, tc.want)
		}
	}
}
