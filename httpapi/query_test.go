package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestQueryParameters: the GET routes read their query string strictly. A
// misspelled, unknown or repeated parameter and a query string that does
// not parse are refused with 400 invalid_input naming the parameter (they
// used to be dropped, or cut to their first value, and the list answered
// unfiltered or filtered otherwise than asked); duplicate_effects takes
// true or false only; a cursor of one list of events is refused by
// another.
func TestQueryParameters(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			ctx := context.Background()
			for i := range 3 {
				_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: fmt.Sprintf("q:%d", i), Action: "crm.create", Destination: "crm",
					Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
				_, err = b.ledger.ReceiveEvent(ctx, nil, opledger.Event{Source: "forms", EventID: fmt.Sprintf("e-%d", i), Type: "t",
					Payload: json.RawMessage(`{}`)})
				require.NoError(t, err)
			}
			refused := func(t *testing.T, path string, details ...string) {
				t.Helper()
				status, body := b.raw(t, "GET", path, b.token, nil)
				require.Equal(t, http.StatusBadRequest, status, "%s: %s", path, body)
				var p httpapi.Problem
				require.NoError(t, json.Unmarshal(body, &p))
				require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type, path)
				for _, d := range details {
					require.Contains(t, p.Detail, d, path)
				}
			}
			page := func(t *testing.T, path string) []string {
				t.Helper()
				status, body := b.raw(t, "GET", path, b.token, nil)
				require.Equal(t, http.StatusOK, status, "%s: %s", path, body)
				var p struct {
					Items []struct {
						Key     string `json:"key"`
						EventID string `json:"event_id"`
					} `json:"items"`
					NextCursor string `json:"next_cursor"`
				}
				require.NoError(t, json.Unmarshal(body, &p))
				out := []string{p.NextCursor}
				for _, it := range p.Items {
					out = append(out, it.Key+it.EventID)
				}
				return out
			}
			const opsTake = "this route takes state, owner, destination, duplicate_effects, except_cancelled, order, limit, cursor"
			const eventsTake = "this route takes source, status, limit, cursor"

			// Unknown and misspelled parameters.
			t.Run("unknown", func(t *testing.T) {
				refused(t, "/v1/operations?states=held", `unknown query parameter "states"`, opsTake)
				refused(t, "/v1/operations?stat=held", `unknown query parameter "stat"`, opsTake)
				refused(t, "/v1/operations?state=pending&since=2030-01-01", `unknown query parameter "since"`)
				refused(t, "/v1/operations?Limit=1", `unknown query parameter "Limit"`)
				refused(t, "/v1/operations?state=held,done", `unknown state "done" (states: awaiting_approval, pending, in_progress, uncertain, held, succeeded, failed)`)
				refused(t, "/v1/events?sourc=x", `unknown query parameter "sourc"`, eventsTake)
				refused(t, "/v1/events?type=t", `unknown query parameter "type"`, eventsTake)
			})

			// Repeated parameters.
			t.Run("repeated", func(t *testing.T) {
				refused(t, "/v1/operations?state=held&state=uncertain", `query parameter "state" is given 2 times`,
					"several states as one comma-separated list")
				refused(t, "/v1/operations?limit=5&limit=9999", `query parameter "limit" is given 2 times`)
				refused(t, "/v1/operations?owner=a&owner=a", `query parameter "owner" is given 2 times`)
				refused(t, "/v1/events?source=forms&source=shop", `query parameter "source" is given 2 times`)
				refused(t, "/v1/events?limit=1&limit=2", `query parameter "limit" is given 2 times`)
			})

			// Limits out of range, said the same way for each.
			t.Run("limit", func(t *testing.T) {
				for _, route := range []string{"/v1/operations", "/v1/events"} {
					refused(t, route+"?limit=0", `limit takes a whole number from 1 to 500 (got "0")`)
					refused(t, route+"?limit=501", `limit takes a whole number from 1 to 500 (got "501")`)
					refused(t, route+"?limit=ten", `limit takes a whole number from 1 to 500 (got "ten")`)
				}
			})

			// Malformed query strings.
			t.Run("malformed", func(t *testing.T) {
				refused(t, "/v1/operations?cursor=%%%", `query parameter "cursor" is malformed`, `invalid URL escape "%%%"`)
				refused(t, "/v1/operations?limit=5;state=held", `query parameter "limit" holds a ';'`)
				refused(t, "/v1/operations?%zz=1", "the name of a query parameter is malformed")
				refused(t, "/v1/events?cursor=%%%", `query parameter "cursor" is malformed`)
				refused(t, "/v1/events?source=forms;status=unmapped", `query parameter "source" holds a ';'`)
			})

			// duplicate_effects is a boolean: true or false, nothing else.
			t.Run("duplicate_effects", func(t *testing.T) {
				for _, v := range []string{"1", "0", "t", "T", "TRUE", "True", "yes", ""} {
					path := "/v1/operations?duplicate_effects=" + url.QueryEscape(v)
					if v == "" {
						require.Len(t, page(t, path), 4, "empty: no filter")
						continue
					}
					refused(t, path, "duplicate_effects must be true or false")
				}
				require.Equal(t, []string{""}, page(t, "/v1/operations?duplicate_effects=true"))
				require.Len(t, page(t, "/v1/operations?duplicate_effects=false"), 4)
			})

			// What is allowed still answers: one comma-separated list of
			// states, an empty parameter (no filter), escapes.
			t.Run("allowed", func(t *testing.T) {
				require.Equal(t, []string{"", "q:2", "q:1", "q:0"}, page(t, "/v1/operations?state=pending,%20held"))
				require.Len(t, page(t, "/v1/operations?state=&owner="), 4)
				require.Len(t, page(t, "/v1/events?source=forms&status=unmapped&limit=50"), 4)
			})

			// Routes that take no query parameters refuse any.
			t.Run("no_parameters", func(t *testing.T) {
				for _, path := range []string{"/v1/stats?all=true", "/v1/operations/q:1?version=2", "/v1/events/forms/e-1?deliveries=false",
					"/v1/workflows/wf-1?x=1", "/v1/stats?%zz"} {
					refused(t, path)
				}
				refused(t, "/v1/stats?tenant=other", `unknown query parameter "tenant"`, "this route takes no query parameters")
				status, body := b.raw(t, "GET", "/v1/stats", b.token, nil)
				require.Equal(t, http.StatusOK, status, "%s", body)
			})

			// Writes take none either: their fields go in the body, and
			// nothing is recorded when a query string comes with them.
			t.Run("writes", func(t *testing.T) {
				for _, tc := range []struct{ method, path, body, detail string }{
					{"PUT", "/v1/operations/q:new?b", `{"action":"crm.create","destination":"crm","payload":{}}`, `unknown query parameter "b"`},
					{"POST", "/v1/operations/q:1/claim?lease_seconds=5", `{}`, `unknown query parameter "lease_seconds"`},
					{"POST", "/v1/operations/q:1/resolve?%zz", `{"decision":"cancel","reason":"x"}`, "the name of a query parameter is malformed"},
				} {
					status, body := b.raw(t, tc.method, tc.path, b.token, []byte(tc.body))
					require.Equal(t, http.StatusBadRequest, status, "%s %s: %s", tc.method, tc.path, body)
					var p httpapi.Problem
					require.NoError(t, json.Unmarshal(body, &p))
					require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type, tc.path)
					require.Contains(t, p.Detail, tc.detail, tc.path)
					require.Contains(t, p.Detail, "a write takes its fields in its JSON body", tc.path)
				}
				_, err := b.ledger.Get(ctx, "q:new")
				require.ErrorIs(t, err, opledger.ErrNotFound, "the PUT recorded nothing")
				op, err := b.ledger.Get(ctx, "q:1")
				require.NoError(t, err)
				require.Equal(t, opledger.StatePending, op.State, "the claim claimed nothing")
			})

			// A cursor of events continues only its list.
			t.Run("event_cursor", func(t *testing.T) {
				first := page(t, "/v1/events?status=unmapped&limit=1")
				require.Equal(t, "e-2", first[1])
				cursor := url.QueryEscape(first[0])
				for _, other := range []string{"status=applied", "", "source=forms", "source=shop&status=unmapped"} {
					refused(t, "/v1/events?"+other+"&cursor="+cursor, "cursor does not continue this list")
				}
				require.Equal(t, []string{"", "e-1", "e-0"}, page(t, "/v1/events?status=unmapped&limit=5&cursor="+cursor))
			})

			// The list of workflows: the same strictness, its own largest
			// page, open as a boolean, a prefix that a key can start with.
			// (Last: its workflows' first steps are operations.)
			t.Run("workflows", func(t *testing.T) {
				for _, key := range []string{"wf:2", "wf:0", "other:1", "wf:1"} {
					_, _, err := b.ledger.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
						{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
					require.NoError(t, err)
				}
				const workflowsTake = "this route takes prefix, open, limit, cursor"
				refused(t, "/v1/workflows?status=held", `unknown query parameter "status"`, workflowsTake)
				refused(t, "/v1/workflows?open=true&open=true", `query parameter "open" is given 2 times`)
				refused(t, "/v1/workflows?limit=201", `limit takes a whole number from 1 to 200 (got "201")`)
				refused(t, "/v1/workflows?open=yes", `open must be true or false, not "yes"`)
				status, body := b.raw(t, "GET", "/v1/workflows?prefix=a%40b", b.token, nil)
				require.Equal(t, http.StatusBadRequest, status, "%s", body)
				require.Contains(t, string(body), "prefix: invalid key")

				require.Equal(t, []string{"", "other:1", "wf:0", "wf:1", "wf:2"}, page(t, "/v1/workflows"))
				require.Equal(t, []string{"", "wf:0", "wf:1", "wf:2"}, page(t, "/v1/workflows?open=true&prefix=wf:"))
				first := page(t, "/v1/workflows?prefix=wf:&limit=2")
				require.Equal(t, []string{"wf:0", "wf:1"}, first[1:])
				cursor := url.QueryEscape(first[0])
				refused(t, "/v1/workflows?limit=2&cursor="+cursor, "cursor does not continue this list: it was issued for another prefix or open filter")
				refused(t, "/v1/workflows?cursor=bad", "cursor does not continue this list: it was issued for another prefix or open filter, or not by opledger (give the same prefix and open filter, or start without a cursor)")
				refused(t, "/v1/events?cursor="+cursor, "cursor does not continue this list")
				require.Equal(t, []string{"", "wf:2"}, page(t, "/v1/workflows?prefix=wf:&cursor="+cursor))
			})
		})
	}
}

// A state list with no state in it (state=, or state=%20,) used to list
// every state, as if the filter were left out, while the CLI refuses
// --state ",": a script that builds state=$A,$B from unset variables
// would page through every operation. It is refused with 400
// invalid_input; state= (empty, as a form sends it) still means no
// filter.
func TestStateListWithNoStateRefused(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: "s:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	for _, q := range []string{"state=,", "state=,,", "state=%20,%20", "state=%20"} {
		status, body := b.raw(t, "GET", "/v1/operations?"+q, b.token, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(body, &p))
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type, q)
		require.Contains(t, p.Detail, "state: entry 1 of ", q)
		require.Contains(t, p.Detail, " is empty: give states separated by commas", q)
	}
	for _, q := range []string{"", "state=", "state=pending", "state=pending,held"} {
		status, body := b.raw(t, "GET", "/v1/operations?"+q, b.token, nil)
		require.Equal(t, http.StatusOK, status, "%s: %s", q, body)
		require.Contains(t, string(body), `"key":"s:1"`, q)
	}
}

// An empty entry beside a state (state=held, as state=held,$B gives when
// B is unset) used to be skipped, while the CLI refuses --state "held,":
// the list then held fewer states than the caller meant. It is refused
// with 400 invalid_input naming the empty entry, before the store is
// read; the other list filters take one value each, and none of them
// has entries.
func TestStateListEmptyEntryRefused(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	for q, detail := range map[string]string{
		"state=pending,":                   `state: entry 2 of "pending," is empty`,
		"state=,pending":                   `state: entry 1 of ",pending" is empty`,
		"state=held,,uncertain":            `state: entry 2 of "held,,uncertain" is empty`,
		"state=held,%20":                   `state: entry 2 of "held, " is empty`,
		"state=held,uncertain,failed,,":    `state: entry 4 of "held,uncertain,failed,," is empty`,
		"state=pending,,done&owner=ops":    `state: entry 2 of "pending,,done" is empty`,
		"state=held,&order=review&limit=5": `state: entry 2 of "held," is empty`,
	} {
		status, body := b.raw(t, "GET", "/v1/operations?"+q, b.token, nil)
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", q, body)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(body, &p))
		require.Equal(t, httpapi.ProblemTypeBase+"invalid_input", p.Type, q)
		require.Contains(t, p.Detail, detail, q)
		require.Contains(t, p.Detail, "give states separated by commas, with no empty entry (states: awaiting_approval, pending,", q)
	}
}
