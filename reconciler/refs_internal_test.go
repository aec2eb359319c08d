package reconciler

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// reportedRefs gives the references newest attempt first, each once,
// without a rejected attempt's.
func TestReportedRefs(t *testing.T) {
	attempt := func(ref string, outcome opledger.Outcome) *opledger.Attempt {
		return &opledger.Attempt{DestinationRef: ref, Outcome: string(outcome)}
	}
	require.Empty(t, reportedRefs(nil))
	require.Empty(t, reportedRefs([]*opledger.Attempt{attempt("", opledger.OutcomeUncertain)}))
	require.Equal(t, []string{"C", "A", "B"}, reportedRefs([]*opledger.Attempt{
		attempt("B", opledger.OutcomeUncertain),
		attempt("A", opledger.OutcomeRetryable),
		attempt("X", opledger.OutcomeRejected),
		attempt("", opledger.AttemptLeaseExpired),
		attempt("A", opledger.AttemptLeaseExpired),
		attempt("C", opledger.OutcomeUncertain),
	}))
	require.Equal(t, `"C" (and 2 more)`, quoteRefs([]string{"C", "A", "B"}))
	require.Equal(t, `"C"`, quoteRefs([]string{"C"}))
}
