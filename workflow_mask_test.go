package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// A destination that keys its answer by a sensitive value (results by
// recipient) has the member's name masked where the answer is shown, and
// a later step filled from that object keeps it masked too: the path it
// inherits is the object's, never one that spells the name.
func TestMaskedMemberNamesAndInheritedPaths(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	const secret = "ana@example.invalid"
	_, _, err = l.PutWorkflow(ctx, "wf:m", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{"to":"` + secret + `"}`),
			SensitiveFields: []string{"to"}},
		{Name: "b", Action: "crm.note", Destination: "crm",
			Payload: json.RawMessage(`{"results":"{steps.a.response.results}","id":"{steps.a.response.id}"}`)},
	}})
	require.NoError(t, err)
	c, err := l.Claim(ctx, "wf:m/a", opledger.ClaimOptions{Dispatch: true})
	require.NoError(t, err)
	a, err := l.Report(ctx, "wf:m/a", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded,
		DestinationRef: "M1", Response: json.RawMessage(`{"id":"M1","results":{"` + secret + `":"sent","ANA@example.invalid":"dup"}}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"M1","results":{"***":"dup","*** (2)":"sent"}}`, string(a.Masked().Response),
		"member names masked, told apart in the order of the real names")

	_, err = l.AdvanceWorkflowOf(ctx, "wf:m/a")
	require.NoError(t, err)
	b, err := l.Get(ctx, "wf:m/b")
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"M1","results":{"`+secret+`":"sent","ANA@example.invalid":"dup"}}`, string(b.Payload),
		"the step is sent the real object")
	require.Equal(t, []string{"results"}, b.SensitiveFields)
	shown, err := json.Marshal(b)
	require.NoError(t, err)
	require.NotContains(t, string(shown), "example.invalid")
	require.Contains(t, string(shown), `"id":"M1"`)
}
