package opledger

import (
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
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, compareOrder(tc.a, tc.b), "%s vs %s", tc.a, tc.b)
	}
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
