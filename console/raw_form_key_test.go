package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRawKeyEndingInFormName: an operation or workflow key holding a "/"
// whose last part is the name of a form's route (a workflow step named
// resolve or approve, a workflow key ending in /cancel), typed into the
// address with the "/" as it is, leads to its page (303 to the escaped
// address) like any other key with a "/", rather than being taken for
// the form's route and refused (405). A GET of a form's route whose key
// names nothing is still answered 405. A workflow's step not recorded
// yet, whose page says what it waits for, is led to as well. On both stores.
func TestRawKeyEndingInFormName(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, token, srv := storeConsole(t, st.NewDSN(t), opledger.Options{})
			_, _, err := l.PutWorkflow(ctx, "onb:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "resolve", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}})
			require.NoError(t, err)
			_, _, err = l.Record(ctx, opledger.Intent{Key: "mail:1/approve", Action: "email.send", Destination: "email", Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
			_, _, err = l.PutWorkflow(ctx, "wf:2/cancel", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}})
			require.NoError(t, err)
			// A step not recorded yet has a page too, which says what it
			// waits for.
			_, _, err = l.PutWorkflow(ctx, "onb:3", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
				{Name: "approve", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}})
			require.NoError(t, err)
			s := signIn(t, srv.URL, token)
			for raw, page := range map[string]string{
				"/operations/onb:3/approve":  "/operations/onb:3%2Fapprove",
				"/operations/onb:1/resolve":  "/operations/onb:1%2Fresolve",
				"/operations/mail:1/approve": "/operations/mail:1%2Fapprove",
				"/workflows/wf:2/cancel":     "/workflows/wf:2%2Fcancel",
			} {
				resp, err := s.hc.Get(srv.URL + raw)
				require.NoError(t, err)
				resp.Body.Close()
				require.Equal(t, http.StatusSeeOther, resp.StatusCode, raw)
				require.Equal(t, page, resp.Header.Get("Location"), raw)
				_, body := s.fetch(page)
				require.Contains(t, body, "<h1>", raw)
				require.NotContains(t, body, "no page at this address", raw)
			}
			for _, raw := range []string{"/operations/none:1/resolve", "/operations/none:1/approve", "/workflows/none:1/cancel"} {
				status, body := s.fetch(raw)
				require.Equal(t, http.StatusMethodNotAllowed, status, raw)
				require.Contains(t, body, "takes a form posted from a page of the console, not a link: nothing was done", raw)
			}
		})
	}
}
