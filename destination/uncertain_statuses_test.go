package destination_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// TestHTTPCallUncertainStatuses: a gateway in front of a destination may
// answer 503 after the backend acted (it gave up waiting for it). A 503
// was always retryable, so such a call was sent again and its effect
// could be made twice. A destination that declares uncertain_statuses
// has its calls answered with one of them recorded uncertain, whatever
// the status otherwise means; the other statuses keep their meaning, and
// a lookup's answer is read as before.
func TestHTTPCallUncertainStatuses(t *testing.T) {
	t.Parallel()
	c := &capture{status: http.StatusServiceUnavailable, answer: `{"error": "upstream timed out"}`}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	yaml := "destinations:\n  - name: crm\n    url: " + srv.URL + "/records\n    ref: /id\n" +
		"    uncertain_statuses: [502, 503, 504]\n" +
		"  - name: plain\n    url: " + srv.URL + "/records\n    ref: /id\n"
	set, err := destination.Load([]byte(yaml), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	plain, _ := set.Get("plain")
	op := operation("crm:R42:create", `{"id": "R42"}`)

	_, err = crm.Call(context.Background(), call(op))
	o, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, o, "a 503 the destination declared uncertain may have been acted on")
	require.ErrorContains(t, err, "503 Service Unavailable")

	_, err = plain.Call(context.Background(), call(op))
	o, _ = opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRetryable, o, "without the declaration a 503 is retryable, as ever")

	c.mu.Lock()
	c.status = http.StatusTooManyRequests
	c.mu.Unlock()
	_, err = crm.Call(context.Background(), call(op))
	o, _ = opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRetryable, o, "a status not listed keeps its meaning")

	// ClassifyStatus takes the list too, for hand-written calls.
	resp := &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{}}
	o, _ = opledger.OutcomeOf(destination.ClassifyStatus(resp, destination.HTTPPolicy{UncertainStatuses: []int{503}}))
	require.Equal(t, opledger.OutcomeUncertain, o)
}

// TestLoadUncertainStatusesChecked: uncertain_statuses takes 4xx and 5xx
// statuses, each once, none of them the unique reference's conflict
// status (which means "exists", looked up as such); an empty list or no
// value is refused, since it would declare nothing.
func TestLoadUncertainStatusesChecked(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    url: https://crm.example.com/x\n    ref: /id\n"
	for v, want := range map[string]string{
		"[200]":      "line 5: destination crm: uncertain_statuses.0: 200 is not a 4xx or 5xx status",
		"[503, 99]":  "line 5: destination crm: uncertain_statuses.1: 99 is not a 4xx or 5xx status",
		"[302]":      "line 5: destination crm: uncertain_statuses.0: 302 is not a 4xx or 5xx status",
		"[503, 503]": "line 5: destination crm: uncertain_statuses.1: 503 is listed twice",
		"[]":         "line 5: destination crm: uncertain_statuses: lists no status",
		"":           "line 5: destination crm: uncertain_statuses: has no value",
		"[five]":     "line 5: destination crm: uncertain_statuses.0: takes a whole number",
	} {
		_, err := destination.Load([]byte(base+"    uncertain_statuses: "+v+"\n"), destination.LoadOptions{})
		require.ErrorContains(t, err, want, v)
	}
	unique := base + "    uncertain_statuses: [409, 503]\n    unique_reference: {}\n" +
		"    lookup:\n      url: https://crm.example.com/x\n      match:\n        - record: /id\n          value: '{{.Key}}'\n"
	_, err := destination.Load([]byte(unique), destination.LoadOptions{})
	require.ErrorContains(t, err, "line 5: destination crm: uncertain_statuses.0: 409 is the unique_reference's conflict_status")

	_, err = destination.Load([]byte(base+"    uncertain_statuses: [500, 502, 503, 504, 429]\n"), destination.LoadOptions{})
	require.NoError(t, err)
}
