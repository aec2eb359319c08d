package destination_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testrig"
)

// echoDestinations are destinations on echoServer (@ECHO@ stands for its
// URL), each sending the rig's token in its Authorization header.
const echoDestinations = `
destinations:
  - name: echo
    url: @ECHO@/ok
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /id
    timeout: 5s
  - name: echo-ref
    url: @ECHO@/ok
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /headers/Authorization/0
    timeout: 5s
  - name: refuse
    url: @ECHO@/refuse
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /id
    timeout: 5s
  - name: flaky
    url: @ECHO@/flaky
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /id
    timeout: 5s
    lookup:
      url: @ECHO@/flaky?ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1s
      match:
        - record: /external_ref
          value: "{{.Key}}"
  - name: throttled
    url: @ECHO@/throttled
    headers:
      Authorization: Bearer ${RIG_TOKEN}
    ref: /id
    timeout: 5s
    lookup:
      url: @ECHO@/throttled?ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1s
      match:
        - record: /external_ref
          value: "{{.Key}}"
`

// echoServer answers as careless destinations do: it echoes the request's
// headers in a success (as they came, with a JSON escape, and as a member
// name), and quotes the Authorization header in the status line and the
// body of a refusal (/refuse), of a 502 to a create and of a 503 to a
// lookup (/flaky).
func echoServer(t *testing.T) *httptest.Server {
	t.Helper()
	// hijacked writes an answer whose status line quotes auth: net/http
	// writes only the standard reason phrase.
	hijacked := func(w http.ResponseWriter, status, auth, body string, header ...string) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		defer conn.Close()
		fmt.Fprintf(buf, "HTTP/1.1 %s rejected credential %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%sConnection: close\r\n\r\n%s",
			status, auth, len(body), strings.Join(header, ""), body)
		_ = buf.Flush()
	}
	quoted := func(auth string) string {
		b, _ := json.Marshal(map[string]string{"error": "invalid credential " + auth})
		return string(b)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/ok":
			headers, _ := json.Marshal(r.Header)
			name, _ := json.Marshal(auth)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"id": "r-1", "headers": %s, "escaped": "%s", "by_credential": {%s: true}}`,
				headers, strings.ReplaceAll(auth, "-", `\u002d`), name)
		case "/refuse":
			hijacked(w, "401", auth, quoted(auth))
		case "/flaky":
			if r.Method == http.MethodGet {
				hijacked(w, "503", auth, quoted(auth))
				return
			}
			hijacked(w, "502", auth, quoted(auth))
		case "/throttled":
			if r.Method == http.MethodGet {
				hijacked(w, "429", auth, quoted(auth), "Retry-After: 600\r\n")
				return
			}
			hijacked(w, "502", auth, quoted(auth))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	require.True(t, strings.HasPrefix(srv.URL, "http://127.0.0.1:"), srv.URL)
	return srv
}

// TestHeaderSecretsNeverStored: a destination that echoes the request's
// headers, or quotes its credential in a refusal's status line and body,
// has the credential (the value of the header's ${RIG_TOKEN}) masked in
// everything the ledger keeps of the operation: its response, reference
// and error, its attempts, its timeline (a failed lookup's evidence
// included); and the rig checks its logs. Any reader of the operation
// would see what is kept.
func TestHeaderSecretsNeverStored(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		srv := echoServer(t)
		r := testrig.New(t, newDSN, func(o *testrig.Options) {
			o.YAML = strings.ReplaceAll(echoDestinations, "@ECHO@", srv.URL)
		})
		stored := func(key string) string {
			t.Helper()
			op := r.Get(key)
			tl, err := r.Ledger.Timeline(r.Ctx, key)
			require.NoError(t, err)
			b, err := json.Marshal([]any{op, op.Masked(), r.Attempts(key), tl})
			require.NoError(t, err)
			require.NotContains(t, strings.ToLower(string(b)), strings.ToLower(testrig.Token), "what is kept of %s", key)
			return string(b)
		}

		r.Record("echo:1", "echo", `{"n": 1}`)
		op := r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, "r-1", op.DestinationRef)
		stored("echo:1")
		var response struct {
			Headers      map[string][]string `json:"headers"`
			Escaped      string              `json:"escaped"`
			ByCredential map[string]bool     `json:"by_credential"`
		}
		require.NoError(t, json.Unmarshal(r.Get("echo:1").Response, &response))
		require.Equal(t, []string{opledger.Mask}, response.Headers["Authorization"], "the whole value is masked")
		require.Equal(t, []string{"opledger"}, response.Headers["User-Agent"], "the rest of the answer stays")
		require.Equal(t, opledger.Mask, response.Escaped)
		require.Equal(t, map[string]bool{opledger.Mask: true}, response.ByCredential)

		r.Record("echo-ref:1", "echo-ref", `{"n": 1}`)
		op = r.Step()
		require.Equal(t, opledger.StateSucceeded, op.State)
		require.Equal(t, opledger.Mask, op.DestinationRef)
		stored("echo-ref:1")

		r.Record("refuse:1", "refuse", `{"n": 1}`)
		op = r.Step()
		require.Equal(t, opledger.StateFailed, op.State)
		text := stored("refuse:1")
		require.Contains(t, text, "401 rejected credential "+opledger.Mask, "the status line is kept, masked")
		require.JSONEq(t, `{"error": "invalid credential `+opledger.Mask+`"}`, string(r.Get("refuse:1").Response))

		r.Record("flaky:1", "flaky", `{"n": 1}`)
		op = r.Step()
		require.Equal(t, opledger.StateUncertain, op.State)
		r.Clock.Advance(2 * 1e9)
		_, err := r.Rec.RunOnce(r.Ctx)
		require.NoError(t, err)
		require.Contains(t, r.Evidence("flaky:1", "reconcile deferred"), "503 rejected credential "+opledger.Mask)
		stored("flaky:1")

		// A throttled lookup whose status line quotes the credential keeps
		// the wait it asked for, and its text no mark, once masked.
		r.Record("throttled:1", "throttled", `{"n": 1}`)
		op = r.Step()
		require.Equal(t, opledger.StateUncertain, op.State)
		r.Clock.Advance(2 * 1e9)
		_, err = r.Rec.RunOnce(r.Ctx)
		require.NoError(t, err)
		evidence := r.Evidence("throttled:1", "reconcile deferred")
		require.Contains(t, evidence, "429 rejected credential "+opledger.Mask)
		require.Contains(t, evidence, "the destination asked to wait 10m0s")
		require.NotContains(t, evidence, "retryable")
		op = r.Get("throttled:1")
		require.Equal(t, 600*time.Second, op.NotBefore.Sub(op.UpdatedAt))
		stored("throttled:1")
	})
}

// TestHeaderSecretsRule: only values from the environment of 3 bytes or
// more are masked; literal header values and shorter values stay as the
// destination answered them.
func TestHeaderSecretsRule(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	h, err := destination.NewHTTP(destination.HTTPConfig{Name: "echo", URL: srv.URL + "/ok", Ref: "/id",
		Headers: map[string]string{"X-Api-Key": "${LONG}", "X-Session-Token": "${SHORT}", "X-Client": "opledger-lab", "X-Region": "${REGION}"}},
		destination.LoadOptions{LookupEnv: env(map[string]string{"LONG": "k3y-0f-the-lab", "SHORT": "eu", "REGION": "eu-west"})})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	res, err := h.Call(context.Background(), call(operation("echo:1", `{}`)))
	require.NoError(t, err)
	var answer struct {
		Headers map[string][]string `json:"headers"`
	}
	require.NoError(t, json.Unmarshal(res.Response, &answer))
	require.Equal(t, []string{opledger.Mask}, answer.Headers["X-Api-Key"])
	require.Equal(t, []string{"eu"}, answer.Headers["X-Session-Token"], "shorter than 3 bytes")
	require.Equal(t, []string{"opledger-lab"}, answer.Headers["X-Client"], "a literal value")
	require.Equal(t, []string{"eu-west"}, answer.Headers["X-Region"], "a variable in no credential's header: configuration")
}

// TestHeaderSecretsRepeatedMember: a destination whose JSON writer
// repeats a member name, the first one echoing the credential, has it
// masked in the response kept with a success and with a refusal: the
// decoded answer holds only the last member, but the answer as written
// is never kept when it holds the credential.
func TestHeaderSecretsRepeatedMember(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/refuse" {
			w.WriteHeader(http.StatusBadRequest)
		} else {
			w.WriteHeader(http.StatusCreated)
		}
		fmt.Fprintf(w, `{"id": "r-1", "auth": %q, "auth": "redacted"}`, r.Header.Get("Authorization"))
	}))
	t.Cleanup(srv.Close)
	for path, want := range map[string]opledger.Outcome{"/ok": opledger.OutcomeSucceeded, "/refuse": opledger.OutcomeRejected} {
		h := newHTTP(t, destination.HTTPConfig{Name: "crm", URL: srv.URL + path, Ref: "/id",
			Headers: map[string]string{"Authorization": "Bearer ${CRM_TOKEN}"}})
		r := opledger.ReportOf(h.Call(context.Background(), call(operation("k1", `{}`))))
		require.Equal(t, want, r.Outcome, path)
		require.JSONEq(t, `{"id": "r-1", "auth": "redacted"}`, string(r.Response), path)
		require.NotContains(t, string(r.Response), "crm-s3cret", path)
	}
}
