package lab_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/lab"
)

// TestCaseFile runs every case of lab/cases.csv on each store and requires
// every one to pass.
func TestCaseFile(t *testing.T) {
	t.Parallel()
	f, err := os.Open("cases.csv")
	require.NoError(t, err)
	defer f.Close()
	cases, err := lab.ParseCases(f)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(cases), 12)
	for _, s := range testdb.Stores() {
		t.Run(s.Name, func(t *testing.T) {
			t.Parallel()
			for _, c := range cases {
				t.Run(c.ID, func(t *testing.T) {
					r := lab.RunCase(context.Background(), s.NewDSN(t), c, lab.RunOptions{})
					t.Log("\n" + stepsText(r.Steps))
					require.Empty(t, r.Error)
					require.True(t, r.Pass, "case %s (line %d): %s\nsteps:\n%s", c.ID, c.Line,
						strings.Join(r.Differences, "; "), stepsText(r.Steps))
				})
			}
		})
	}
}

func stepsText(steps []lab.StepOutcome) string {
	var b strings.Builder
	for _, s := range steps {
		b.WriteString("  " + s.Step + " → " + s.State + ": " + s.Explanation + "\n")
	}
	return b.String()
}
