package console_test

import (
	"context"
	"encoding/json"
	"html"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestQueueFailedLinkLeavesOutCancelled: the exception queue's link to
// "all failed" lists the failed operations it counts, page by page: those
// an operator cancelled need no decision and are left out there too, so
// the list and the queue agree; the operations page can be asked for the
// same (except_cancelled=true, a checkbox of its filter), and its count
// and next page keep it.
func TestQueueFailedLinkLeavesOutCancelled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, s := pagedConsole(t, 1)
	for _, key := range []string{"rej:1", "rej:2"} {
		in := opledger.Intent{Key: key, Action: "a", Destination: "crm", Payload: json.RawMessage(`{}`)}
		cl, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &in})
		require.NoError(t, err)
		_, err = l.Report(ctx, key, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeRejected, Error: "422"})
		require.NoError(t, err)
	}
	_, _, err := l.Record(ctx, opledger.Intent{Key: "gone:1", Action: "a", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, _, err = l.Resolve(ctx, "gone:1", opledger.Decision{Kind: opledger.DecisionCancel, Reason: "not wanted"})
	require.NoError(t, err)

	queue := s.get("/")
	require.Contains(t, queue, "2 operations need attention")
	link := regexp.MustCompile(`<a href="([^"]*)">all failed</a>`).FindStringSubmatch(queue)
	require.Len(t, link, 2)
	list := s.get(html.UnescapeString(link[1]))
	require.Contains(t, list, "2 operations match", "the queue's two, not the cancelled one")
	require.Regexp(t, `<input[^>]*name="except_cancelled"[^>]*checked`, list, "the filter shows it")
	later := s.get(nextPageLink(t, list))
	require.Contains(t, later, "rej:1")
	require.NotContains(t, later, "gone:1", "the next page keeps the filter")

	all := s.get("/operations?state=failed")
	require.Contains(t, all, "3 operations match", "without it, every failed one")
}
