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

// TestCaseResultStandsStill: the lab clock stands still between steps and
// the lab's retry policy draws no random backoff, so a case's result
// never depends on how long a step took. A refused send (503) leaves the
// operation due at once; the worker that crashes after claiming it holds
// it, every time (it used to depend on the random backoff and on how
// long a worker process took to start).
func TestCaseResultStandsStill(t *testing.T) {
	t.Parallel()
	cases, err := lab.ParseCases(strings.NewReader(strings.Join(lab.CaseColumns, ",") +
		"\nretry-then-crash,production,crm,5xx_before_commit,send; crash after_claim,2,0,0,0,0,in_progress,t,t,e,e\n"))
	require.NoError(t, err)
	for range 5 {
		r := lab.RunCase(context.Background(), testdb.SQLiteDSN(t), cases[0], lab.RunOptions{})
		require.Empty(t, r.Error)
		require.True(t, r.Pass, "%s\n%s", strings.Join(r.Differences, "; "), stepsText(r.Steps))
	}
}
