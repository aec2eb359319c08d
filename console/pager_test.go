package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestPagerOnlyWithAnotherPage: the operations, workflows and events
// lists show their pager (the paragraph of page links) only when there is
// another page to go to; a list that fits on one page has none, not an
// empty paragraph.
func TestPagerOnlyWithAnotherPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, s := pagedConsole(t, 2)
	pager := regexp.MustCompile(`<p class="pager">`)
	add := func(i int) {
		t.Helper()
		_, _, err := l.Record(ctx, opledger.Intent{Key: fmt.Sprintf("op:%d", i), Action: "a", Destination: "crm", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		_, _, err = l.PutWorkflow(ctx, fmt.Sprintf("wf:%d", i), opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "s", Action: "a", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
		require.NoError(t, err)
		_, err = l.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: fmt.Sprintf("e%d", i), Type: "t", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
	}
	lists := []string{"/operations?destination=crm", "/workflows?open=false", "/events"}
	for _, path := range lists {
		require.NotRegexp(t, pager, s.get(path), "%s: empty, no pager", path)
	}
	add(1)
	for _, path := range lists {
		require.NotRegexp(t, pager, s.get(path), "%s: one on one page, no pager", path)
	}
	for i := 2; i <= 3; i++ {
		add(i)
	}
	for _, path := range lists {
		first := s.get(path)
		require.Regexp(t, pager, first, "%s: a next page", path)
		require.Regexp(t, pager, s.get(nextPageLink(t, first)), "%s: the way back to the first page", path)
	}
}
