package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// A sensitive value in a destination's reference or quoted in its
// response text is shown masked by the operation's detail (the
// operation and its attempts) and by the list, on both stores.
func TestSensitiveValuesMaskedInShownRefsAndResponses(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			in := intent(2) // email ana@example.invalid is sensitive
			c, err := b.acme.Claim(ctx, "contact:1", client.ClaimRequest{Intent: &in, Worker: "w", Dispatch: true})
			require.NoError(t, err)
			_, err = b.acme.Report(ctx, "contact:1", c.AttemptID, client.Report{FencingToken: c.FencingToken,
				Outcome: opledger.OutcomeSucceeded, DestinationRef: "contact/ana@example.invalid",
				Response: json.RawMessage(`{"note":"created for ana@example.invalid","id":"C-1"}`)})
			require.NoError(t, err)

			status, body := b.raw(t, "GET", "/v1/operations/"+url.PathEscape("contact:1"), b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			require.NotContains(t, string(body), "ana@", "nowhere in the detail")
			var d struct {
				DestinationRef string          `json:"destination_ref"`
				Response       json.RawMessage `json:"response"`
				Attempts       []struct {
					DestinationRef string `json:"destination_ref"`
				} `json:"attempts"`
			}
			require.NoError(t, json.Unmarshal(body, &d))
			require.Equal(t, "contact/***", d.DestinationRef)
			require.JSONEq(t, `{"note":"created for ***","id":"C-1"}`, string(d.Response))
			require.Len(t, d.Attempts, 1)
			require.Equal(t, "contact/***", d.Attempts[0].DestinationRef)

			status, body = b.raw(t, "GET", "/v1/operations", b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			require.NotContains(t, string(body), "ana@", "nowhere in the list")
			require.Contains(t, string(body), `"destination_ref":"contact/***"`)

			op, err := b.ledger.Get(ctx, "contact:1")
			require.NoError(t, err)
			require.Equal(t, "contact/ana@example.invalid", op.DestinationRef, "stored as reported")
		})
	}
}

// The worker that claims an operation gets its real payload, which it is
// about to send: an operation recorded by someone else (an event's rule,
// a workflow, another service) with sensitive fields is otherwise sent
// with "***" in them. Every other answer still masks them.
func TestClaimantGetsTheRealPayload(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			in := intent(3) // email ana@example.invalid is sensitive
			_, _, err := b.acme.Record(ctx, "contact:3", in)
			require.NoError(t, err)

			status, body := b.raw(t, "POST", "/v1/operations/"+url.PathEscape("contact:3")+"/claim", b.token, []byte(`{"worker":"w"}`))
			require.Equal(t, http.StatusCreated, status, string(body))
			var c struct {
				Operation struct {
					Payload         json.RawMessage `json:"payload"`
					SensitiveFields []string        `json:"sensitive_fields"`
				} `json:"operation"`
			}
			require.NoError(t, json.Unmarshal(body, &c))
			require.JSONEq(t, string(in.Payload), string(c.Operation.Payload), "the payload the claimant sends")
			require.Equal(t, in.SensitiveFields, c.Operation.SensitiveFields, "and which of its fields are sensitive")

			status, body = b.raw(t, "GET", "/v1/operations/"+url.PathEscape("contact:3"), b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			require.NotContains(t, string(body), "ana@", "the detail still masks it")

			// Through the client too; marshalled again, it is masked.
			_, _, err = b.acme.Record(ctx, "contact:4", in)
			require.NoError(t, err)
			claim, err := b.acme.Claim(ctx, "contact:4", client.ClaimRequest{Worker: "w"})
			require.NoError(t, err)
			require.JSONEq(t, string(in.Payload), string(claim.Operation.Payload))
			shown, err := json.Marshal(claim.Operation)
			require.NoError(t, err)
			require.NotContains(t, string(shown), "ana@")
		})
	}
}

// A sensitive value that an event's rule copies into other fields of the
// payload (whole, inside text, with the object that holds it) is shown
// masked there too, by the event's answer, the operation's detail, the
// list and the event's detail, on both stores; the worker that claims
// the operation gets the real payload.
func TestRuleCopiesOfSensitiveValuesMasked(t *testing.T) {
	t.Parallel()
	rules, err := opledger.ParseRules([]byte(`
rules:
  - name: intake
    source: forms
    type: submission.accepted
    operations:
      - key: "intake:{data.submission_id}:create"
        action: crm.create
        destination: crm
        payload:
          applicant: "{data.applicant}"
          greeting: "Hello {data.applicant.email}"
          copy: "{data.applicant.email}"
          again: "{data.applicant}"
        sensitive_fields: [applicant.email]
`))
	require.NoError(t, err)
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPIWith(t, st.NewDSN(t), nil, httpapi.Options{Rules: rules})
			status, body := b.raw(t, "POST", "/v1/events", b.token, []byte(`{"source":"forms","event_id":"e1","type":"submission.accepted",`+
				`"payload":{"submission_id":"1","applicant":{"email":"vic.secret@example.invalid"}}}`))
			require.Equal(t, http.StatusCreated, status, string(body))
			require.NotContains(t, string(body), "vic.secret", "the event's answer")

			key := "/v1/operations/" + url.PathEscape("intake:1:create")
			status, body = b.raw(t, "GET", key, b.token, nil)
			require.Equal(t, http.StatusOK, status, string(body))
			var op struct {
				Payload         json.RawMessage `json:"payload"`
				SensitiveFields []string        `json:"sensitive_fields"`
			}
			require.NoError(t, json.Unmarshal(body, &op))
			require.JSONEq(t, `{"applicant":{"email":"***"},"greeting":"***","copy":"***","again":{"email":"***"}}`, string(op.Payload))
			require.Equal(t, []string{"applicant.email", "again.email", "copy", "greeting"}, op.SensitiveFields)
			for _, path := range []string{"/v1/operations", "/v1/events/forms/e1"} {
				status, body = b.raw(t, "GET", path, b.token, nil)
				require.Equal(t, http.StatusOK, status, string(body))
				require.NotContains(t, string(body), "vic.secret", path)
			}

			status, body = b.raw(t, "POST", key+"/claim", b.token, []byte(`{"worker":"w"}`))
			require.Equal(t, http.StatusCreated, status, string(body))
			require.Contains(t, string(body), `"greeting":"Hello vic.secret@example.invalid"`, "the claimant sends the real payload")
		})
	}
}
