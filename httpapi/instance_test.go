package httpapi_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
)

// TestRefusedKeyNotInInstance: a problem about a path whose key (or event
// id, or step) is not a valid key has no instance, since the path would
// repeat the value a refusal never repeats (an e-mail address); a problem
// about a path of valid keys names the path.
func TestRefusedKeyNotInInstance(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	for _, c := range []struct {
		method, path, body string
		status             int
		kind               string
	}{
		{"GET", "/v1/operations/ana%40example.invalid", "", 400, "invalid_key"},
		{"PUT", "/v1/operations/ana%40example.invalid", `{"action":"a","destination":"d"}`, 400, "invalid_key"},
		{"POST", "/v1/operations/ana%40example.invalid/claim", `{}`, 400, "invalid_key"},
		{"GET", "/v1/workflows/ana%40example.invalid", "", 400, "invalid_key"},
		{"GET", "/v1/events/forms/ana%40example.invalid", "", 400, "invalid_input"},
		// A step's name takes the key syntax: refused before the
		// workflow (unknown here) is looked up.
		{"POST", "/v1/workflows/wf-1/steps/ana%40example.invalid/approve", `{"version":1,"fingerprint":"sha256:00","approver":"lead"}`, 400, "invalid_input"},
	} {
		status, data := b.raw(t, c.method, c.path, b.token, []byte(c.body))
		require.Equal(t, c.status, status, "%s %s: %s", c.method, c.path, data)
		require.Equal(t, c.kind, problemKind(t, data), "%s %s", c.method, c.path)
		require.NotContains(t, string(data), "ana", "%s %s", c.method, c.path)
		var p map[string]any
		require.NoError(t, json.Unmarshal(data, &p))
		require.NotContains(t, p, "instance", "%s %s", c.method, c.path)
	}

	status, data := b.raw(t, "GET", "/v1/operations/order:17:prepare", b.token, nil)
	require.Equal(t, http.StatusNotFound, status)
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(data, &p))
	require.Equal(t, "/v1/operations/order:17:prepare", p.Instance, "a path of valid keys is the instance")
}
