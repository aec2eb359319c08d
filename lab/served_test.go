package lab_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/lab"
	"github.com/opledger/opledger/server"
)

// The destinations file Served writes loads, and declares for each
// destination what the destination itself says it offers.
func TestServedDestinationsYAML(t *testing.T) {
	t.Parallel()
	s := lab.NewServed()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	set, err := destination.Load([]byte(s.DestinationsYAML(srv.URL)), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { set.Close() })
	require.Equal(t, []string{"crm", "email", "payment"}, set.Names())
	for name, want := range map[string]destination.Capabilities{
		"crm": s.CRM.Capabilities(), "email": s.Email.Capabilities(), "payment": s.Payment.Capabilities(),
	} {
		d, ok := set.Get(name)
		require.True(t, ok, name)
		got := d.Capabilities()
		require.Equal(t, want.IdempotencyKey, got.IdempotencyKey, name)
		require.Equal(t, want.UniqueReference, got.UniqueReference, name)
		require.Equal(t, want.Lookup != nil, got.Lookup != nil, name)
		if got.Lookup != nil {
			require.True(t, got.Lookup.Authoritative, name)
		}
	}
	resp, err := http.Post(srv.URL+"/payment/faults", "application/json", strings.NewReader(`["429", "validation"]`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 2, s.Payment.PendingFaults())
	resp, err = http.Post(srv.URL+"/payment/faults", "application/json", strings.NewReader(`{"fault":"429"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// TestServedTenantsShareAKey: on a server that runs the destinations
// file Served writes, tenants that use the same operation key each get a
// record of their own at the CRM: one whose create is refused as a
// duplicate, or whose answer is lost, is never settled with another
// tenant's record.
func TestServedTenantsShareAKey(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := lab.NewServed()
			dest := httptest.NewServer(s.Handler())
			t.Cleanup(dest.Close)
			set, err := destination.Load([]byte(s.DestinationsYAML(dest.URL)), destination.LoadOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, set.Close()) })
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{DestinationRetryPolicies: set.RetryPolicies()})
			require.NoError(t, err)
			testrig.Serve(t, l, server.Config{Destinations: set, SweepInterval: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

			const key = "ord:1"
			send := func(tenant, order string) *opledger.Operation {
				t.Helper()
				tl, err := l.WithTenant(tenant)
				require.NoError(t, err)
				_, created, err := tl.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm",
					Payload: json.RawMessage(`{"order": "` + order + `"}`)})
				require.NoError(t, err)
				require.True(t, created)
				deadline := time.Now().Add(30 * time.Second)
				for {
					op, err := tl.Get(ctx, key)
					require.NoError(t, err)
					if op.State.Final() || op.State == opledger.StateHeld {
						return op
					}
					require.True(t, time.Now().Before(deadline), "%s's operation is still %s", tenant, op.State)
					time.Sleep(20 * time.Millisecond) // polling serve's executor and reconciler, with a deadline
				}
			}

			acme := send("acme", "A-1")
			require.Equal(t, opledger.StateSucceeded, acme.State)
			// Beta's create is made but its answer lost: the reconciler
			// looks it up and must find beta's record, not acme's.
			require.NoError(t, s.CRM.Inject(lab.FaultLostResponse))
			beta := send("beta", "B-7")
			require.Equal(t, opledger.StateSucceeded, beta.State, beta.LastError)
			// Gamma's create is answered: no duplicate of acme's.
			gamma := send("gamma", "G-3")
			require.Equal(t, opledger.StateSucceeded, gamma.State, gamma.LastError)

			require.Equal(t, []string{acme.DestinationRef, beta.DestinationRef, gamma.DestinationRef}, s.CRM.RefsFor(key),
				"each tenant's operation is settled with its own record")
			require.Equal(t, 3, s.CRM.Counters().Effects)
		})
	}
}

// TestServedLookupError: a lookup_error queued through the control API
// fails the CRM's next search (503, JSON {"error"}), not its next create;
// the failed search is counted, and the one after it is served.
func TestServedLookupError(t *testing.T) {
	t.Parallel()
	s := lab.NewServed()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	do := func(method, path, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	status, body := do(http.MethodPost, "/crm/faults", `["lookup_error"]`)
	require.Equal(t, http.StatusOK, status, body)
	require.JSONEq(t, `{"queued": 1}`, body)
	status, body = do(http.MethodPost, "/crm/records", `{"key": "k:1", "payload": {}}`)
	require.Equal(t, http.StatusCreated, status, "the create is not the lookup: %s", body)
	status, body = do(http.MethodGet, "/crm/records?external_ref=k:1", "")
	require.Equal(t, http.StatusServiceUnavailable, status)
	require.Contains(t, body, `"error"`)
	status, body = do(http.MethodGet, "/crm/records?external_ref=k:1", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `"k:1"`)
	require.Equal(t, lab.Counters{Attempts: 1, Effects: 1, Lookups: 2}, s.CRM.Counters())
}

// docs/lab.md shows the CRM's entry of the file Served writes, for the
// default address, as it is written.
func TestServedDocsShowTheCRMEntry(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/lab.md")
	require.NoError(t, err)
	shown := regexp.MustCompile("(?s)```yaml\n(  - name: crm\n.*?)```").FindSubmatch(doc)
	require.NotNil(t, shown, "docs/lab.md shows no crm entry")
	require.Contains(t, lab.NewServed().DestinationsYAML("http://127.0.0.1:9100"), string(shown[1]))
}

// Every refusal of the control API (faults, counters, and a path that is
// no destination's) is an RFC 9457 problem, as on the project's other
// HTTP surfaces, naming what was wrong; nothing is queued by a refused
// request. The simulated destinations' own routes keep answering as the
// simulated API would (a JSON {"error"} body).
func TestServedControlProblems(t *testing.T) {
	t.Parallel()
	s := lab.NewServed()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		kind, detail, allow      string
	}{
		{"not a list", http.MethodPost, "/crm/faults", `{"fault": "429"}`, http.StatusBadRequest, "invalid_json",
			`the body is a JSON list of faults, e.g. ["lost_response"]; faults: lost_response`, ""},
		{"empty body", http.MethodPost, "/email/faults", ``, http.StatusBadRequest, "invalid_json",
			`the body is a JSON list of faults`, ""},
		{"trailing data", http.MethodPost, "/crm/faults", `["429"] ["validation"]`, http.StatusBadRequest, "invalid_json",
			`the body is a JSON list of faults`, ""},
		{"null", http.MethodPost, "/email/faults", `null`, http.StatusBadRequest, "invalid_json",
			`the body is a JSON list of faults`, ""},
		{"unknown fault", http.MethodPost, "/payment/faults", `["429", "jump"]`, http.StatusBadRequest, "invalid_input",
			`unknown fault "jump" (want none, lost_response`, ""},
		{"no lookup to fail", http.MethodPost, "/email/faults", `["lost_response", "lookup_error"]`, http.StatusBadRequest, "invalid_input",
			`fault lookup_error fails a lookup, and email offers none`, ""},
		{"no lookup to fail either", http.MethodPost, "/payment/faults", `["lookup_error"]`, http.StatusBadRequest, "invalid_input",
			`fault lookup_error fails a lookup, and payment offers none`, ""},
		{"too large", http.MethodPost, "/crm/faults", `["` + strings.Repeat("x", 1<<16) + `"]`, http.StatusRequestEntityTooLarge,
			"payload_too_large", "the body is larger than 65536 bytes", ""},
		{"faults read", http.MethodGet, "/crm/faults", ``, http.StatusMethodNotAllowed, "method_not_allowed",
			"/crm/faults takes POST", http.MethodPost},
		{"counters written", http.MethodPost, "/payment/counters", `[]`, http.StatusMethodNotAllowed, "method_not_allowed",
			"/payment/counters takes GET", "GET, HEAD"},
		{"no destination", http.MethodGet, "/billing/counters", ``, http.StatusNotFound, "not_found",
			"no destination is served at this path; the destinations are under /crm/, /email/, /payment/", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			require.Equal(t, tc.allow, resp.Header.Get("Allow"))
			var p struct {
				Type   string `json:"type"`
				Title  string `json:"title"`
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			require.Equal(t, "https://opledger.dev/problems/"+tc.kind, p.Type)
			require.NotEmpty(t, p.Title)
			require.Equal(t, tc.status, p.Status)
			require.Contains(t, p.Detail, tc.detail)
		})
	}
	for _, d := range []interface{ PendingFaults() int }{s.CRM, s.Email, s.Payment} {
		require.Zero(t, d.PendingFaults(), "a refused request queued faults")
	}

	// The CRM's own refusal is the simulated CRM's, not the control API's.
	resp, err := http.Post(srv.URL+"/crm/records", "application/json", strings.NewReader(`[`))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	var body map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	require.Equal(t, "the body is not a JSON object", body["error"])
}
