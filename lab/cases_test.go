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
	for range 5 {
		runOneCase(t, "retry-then-crash,production,crm,5xx_before_commit,send; crash after_claim,2,0,0,0,0,in_progress,t,t,e,e")
	}
}

// TestVerifyTellsTheLedgersReason: a payment whose answers were lost three
// times is held by the third verify because the retry limit is reached,
// while its idempotency key is still remembered (no time passed); the
// narration says so, not that the key was forgotten.
func TestVerifyTellsTheLedgersReason(t *testing.T) {
	t.Parallel()
	r := runOneCase(t, "exhausted-protected,interactive,payment,lost_response;lost_response;lost_response,send; verify; retry; verify; retry; verify,3,1,0,0,0,held,t,t,e,e")
	last := r.Steps[len(r.Steps)-1].Explanation
	require.Contains(t, last, "the retry limit is reached")
	require.NotContains(t, last, "no longer remembered")
}

// TestVerifyTellsFailedLookups: a verify whose lookup fails says so, and
// that the operation stays uncertain with nothing sent, not that the CRM
// does not show the record yet (which a lookup that answered would have
// said); the verify whose failed lookup reaches the reconciler's limit
// says the operation is held for its owner because the lookups failed,
// not because the CRM has other content.
func TestVerifyTellsFailedLookups(t *testing.T) {
	t.Parallel()
	r := runOneCase(t, "lookups-fail,interactive,crm,lost_response;lookup_error;lookup_error,send; verify; advance 10s; verify,1,1,2,0,0,uncertain,t,t,e,e")
	for i, want := range map[int]string{1: "1 since the operation became uncertain)", 3: "2 since the operation became uncertain)"} {
		got := r.Steps[i].Explanation
		require.Contains(t, got, "The lookup at the lab-crm failed (failed lookup "+want)
		require.Contains(t, got, "the operation stays uncertain")
		require.NotContains(t, got, "visibility delay")
	}
	// The reconciler's backoff: 10 s after the first failure, doubling.
	require.Contains(t, r.Steps[1].Explanation, "looks again in 10s.")
	require.Contains(t, r.Steps[3].Explanation, "looks again in 20s.")
	r = runOneCase(t, "lookups-keep-failing,interactive,crm,lost_response"+strings.Repeat(";lookup_error", 8)+
		",send; verify; advance 10s; verify; advance 20s; verify; advance 40s; verify; advance 80s; verify; advance 160s; verify; advance 320s; verify; advance 640s; verify,1,1,8,0,0,held,t,t,e,e")
	last := r.Steps[len(r.Steps)-1].Explanation
	require.Contains(t, last, "The lookup at the lab-crm failed again (failed lookup 8 since the operation became uncertain)")
	require.Contains(t, last, "held for its owner")
	require.NotContains(t, last, "other content")
}

// runOneCase runs the case of one CSV row (without the header) on a fresh
// SQLite store and requires it to pass.
func runOneCase(t *testing.T, row string) lab.CaseResult {
	t.Helper()
	cases, err := lab.ParseCases(strings.NewReader(strings.Join(lab.CaseColumns, ",") + "\n" + row + "\n"))
	require.NoError(t, err)
	r := lab.RunCase(context.Background(), testdb.SQLiteDSN(t), cases[0], lab.RunOptions{})
	require.Empty(t, r.Error)
	require.True(t, r.Pass, "%s\n%s", strings.Join(r.Differences, "; "), stepsText(r.Steps))
	return r
}

// TestNarrationSaysWhatHappened: the workers step counts the calls the
// destination received, answered or not (an answer lost still reached
// it); a lookup that found nothing is the destination's word, not a fact
// (a lagging index hides a record it made).
func TestNarrationSaysWhatHappened(t *testing.T) {
	t.Parallel()
	r := runOneCase(t, "w,production,crm,lost_response,workers 2,2,1,0,0,0,uncertain,t,t,e,e")
	// The second worker finds the operation in progress or, when the
	// first has finished, uncertain (refused otherwise): either way one
	// call reached the CRM.
	require.Regexp(t, `^2 workers sent the operation at once: 1 call\(s\) reached the lab-crm, (1 found it in progress, 0 got the saved result, 0 were refused otherwise|0 found it in progress, 0 got the saved result, 1 were refused otherwise); 1 effect\(s\)\.$`,
		r.Steps[0].Explanation)
	r = runOneCase(t, "l,interactive,crm,delayed_visibility,send; verify,1,1,1,0,0,pending,t,t,e,e")
	require.Contains(t, r.Steps[1].Explanation, "takes the destination at its word that the attempt had no effect")
}

// TestNarrationNotDueYet: a retry made before the destination's
// Retry-After has passed is not sent yet, and the step says so and until
// when, not that opledger refused a second attempt (which it makes once
// the time has passed).
func TestNarrationNotDueYet(t *testing.T) {
	t.Parallel()
	r := runOneCase(t, "early,interactive,crm,429,send; retry; advance 2s; retry,3,1,0,0,0,succeeded,t,t,e,e")
	early := r.Steps[1].Explanation
	require.NotContains(t, early, "refused a second attempt")
	require.Regexp(t, `^Not sent yet: the operation is pending until \d\d:\d\d:\d\dZ \(2s from now\), when the lab-crm's Retry-After or the retry policy's backoff ends; opledger sent nothing\.$`, early)
	require.Contains(t, r.Steps[3].Explanation, "opledger sent it again (attempt 2;")
}

// TestNarrationInProgress: a retry while a worker still holds the
// operation (its lease not yet expired) says so, not that opledger
// refused a second attempt: once the lease has expired the retry is
// sent.
func TestNarrationInProgress(t *testing.T) {
	t.Parallel()
	r := runOneCase(t, "held,production,crm,none,crash after_claim; retry; advance 1m; retry,3,1,0,0,0,succeeded,t,t,e,e")
	busy := r.Steps[1].Explanation
	require.NotContains(t, busy, "refused a second attempt")
	require.Equal(t, "Not sent yet: a worker holds the operation (in progress) until it reports or its lease ends; opledger sent nothing.", busy)
	require.Contains(t, r.Steps[3].Explanation, "opledger sent it again (attempt 2;")
}
