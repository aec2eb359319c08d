package opledger

import (
	"math/big"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCompareOrder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		a, b string
		want int
	}{
		{"9", "10", -1},
		{"10", "9", 1},
		{"2.5", "2.50", 0},
		{"1e3", "999", 1},
		{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00+02:00", 1},
		{"2026-03-01T10:00:00.5Z", "2026-03-01T10:00:00Z", 1},
		{"b", "a", 1},
		{"v10", "v9", -1}, // text compares as text: use numbers for versions
		{"7", "7", 0},
		// Exactly, however large the exponent: beyond big.Rat's limit
		// these compared as text.
		{"1e1000001", "5", 1},
		{"9e1000001", "10e1000001", -1},
		{"-1e999999", "-2e999999", 1},
		{"1e-1000001", "0", 1},
		{"12345678901234567891e-999999", "12345678901234567892e-999999", -1},
		{"0.0", "-0", 0},
		{"+1", "1.000e0", 0},
		{".5", "0.5", 0},
		{"7.", "7", 0},
		{"1e+-5", "1", 1}, // not a number: text
		{"1/2", "0.4", 1}, // what big.Rat reads besides decimals
		{"0x1F", "31", 0},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, compareOrder(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
	}
}

// FuzzCompareOrder checks that ordering values compare antisymmetrically,
// and that decimal numbers compare as big.Rat compares them (where its
// exponents are small enough to ask it).
func FuzzCompareOrder(f *testing.F) {
	for _, s := range [][2]string{{"9", "10"}, {"1e3", "999"}, {"-0.0", "0"}, {"1e999999", "2e999999"}, {".5e-3", "5e-4"},
		{"2026-03-01T10:00:00Z", "2026-03-01T11:00:00+02:00"}, {"v10", "v9"}, {"1/3", "0.3"}, {"0x1e", "30"}, {"-.0e+0", "0."}} {
		f.Add(s[0], s[1])
	}
	small := func(s string) bool {
		i := strings.IndexAny(s, "eE")
		return i < 0 || len(s)-i <= 5 || strings.Contains(s, "0x") || strings.Contains(s, "0X")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		c := compareOrder(a, b)
		if c < -1 || c > 1 || compareOrder(b, a) != -c || compareOrder(a, a) != 0 {
			t.Fatalf("compareOrder(%q, %q) = %d, reversed %d", a, b, c, compareOrder(b, a))
		}
		if _, ok := parseDecimal(a); !ok || !small(a) || !small(b) {
			return
		}
		if _, ok := parseDecimal(b); !ok {
			return
		}
		x, okx := new(big.Rat).SetString(a)
		y, oky := new(big.Rat).SetString(b)
		if !okx || !oky {
			t.Fatalf("%q or %q is a decimal big.Rat does not read", a, b)
		}
		if want := x.Cmp(y); c != want {
			t.Fatalf("compareOrder(%q, %q) = %d, big.Rat says %d", a, b, c, want)
		}
	})
}

func TestTemplates(t *testing.T) {
	t.Parallel()
	// Lenient (workflow payloads): unknown braces stay text.
	tp, err := parseTemplate("Hi {name}, task {steps.a.ref} {x", workflowRoots, false)
	require.NoError(t, err)
	out, err := tp.renderString(map[string]any{"steps": map[string]any{"a": map[string]any{"ref": "T-1"}}})
	require.NoError(t, err)
	require.Equal(t, "Hi {name}, task T-1 {x", out)
	// Strict (rules): every brace is a placeholder or escaped.
	_, err = parseTemplate("a}b", eventRoots, true)
	require.ErrorContains(t, err, "unmatched '}'")
	tp, err = parseTemplate("{{x}} {data.a}", eventRoots, true)
	require.NoError(t, err)
	out, err = tp.renderString(map[string]any{"data": map[string]any{"a": true}})
	require.NoError(t, err)
	require.Equal(t, "{x} true", out)
}
