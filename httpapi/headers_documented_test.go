package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/httpapi"
)

// openAPIHeader is a header of a response in the OpenAPI document, its
// $ref resolved.
type openAPIHeader struct {
	Ref         string          `json:"$ref"`
	Description string          `json:"description"`
	Required    bool            `json:"required"`
	Schema      json.RawMessage `json:"schema"`
}

// documentedHeaders returns, for every response of the OpenAPI document
// ("METHOD /pattern STATUS"), its headers by name, each $ref resolved
// against components/headers (a $ref that resolves to nothing fails).
func documentedHeaders(t *testing.T) map[string]map[string]openAPIHeader {
	t.Helper()
	var doc struct {
		Components struct {
			Headers map[string]openAPIHeader `json:"headers"`
		} `json:"components"`
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Headers map[string]openAPIHeader `json:"headers"`
			} `json:"responses"`
		} `json:"paths"`
	}
	require.NoError(t, json.Unmarshal(httpapi.OpenAPI, &doc))
	out := map[string]map[string]openAPIHeader{}
	for path, methods := range doc.Paths {
		for method, op := range methods {
			for status, resp := range op.Responses {
				name := strings.ToUpper(method) + " " + path + " " + status
				out[name] = map[string]openAPIHeader{}
				for h, v := range resp.Headers {
					if v.Ref != "" {
						c, ok := doc.Components.Headers[strings.TrimPrefix(v.Ref, "#/components/headers/")]
						require.True(t, ok && strings.HasPrefix(v.Ref, "#/components/headers/"), "%s: header %s: $ref %s resolves to nothing", name, h, v.Ref)
						v = c
					}
					require.NotEmpty(t, v.Description, "%s: header %s", name, h)
					require.NotEmpty(t, v.Schema, "%s: header %s", name, h)
					out[name][h] = v
				}
			}
		}
	}
	require.NotEmpty(t, out)
	return out
}

// TestResponseHeadersDocumented: the headers the server sends (checked on
// every answer of TestAPI by rawHeaders, and by the tests of each 503)
// are declared in the OpenAPI document, not only told in descriptions:
// X-Request-Id on every response, WWW-Authenticate on every 401 (Bearer,
// or Signature on the webhook route), and Retry-After on every 503 a
// request the store could not take answers (store_busy, unavailable).
// /readyz's 503 sends no Retry-After and declares none.
func TestResponseHeadersDocumented(t *testing.T) {
	t.Parallel()
	for response, headers := range documentedHeaders(t) {
		id, ok := headers["X-Request-Id"]
		require.True(t, ok, "%s: every answer carries X-Request-Id: the document must declare it", response)
		require.True(t, id.Required, "%s: X-Request-Id is always sent", response)
		pattern, status := response[:strings.LastIndex(response, " ")], response[strings.LastIndex(response, " ")+1:]
		switch status {
		case "401":
			auth, ok := headers["WWW-Authenticate"]
			require.True(t, ok, "%s: a 401 carries WWW-Authenticate: the document must declare it", response)
			require.True(t, auth.Required, response)
			scheme := "Bearer"
			if strings.HasPrefix(pattern, "POST /v1/webhooks/") {
				scheme = "Signature"
			}
			require.Contains(t, auth.Description, scheme+` realm="opledger"`, response)
		case "503":
			_, ok := headers["Retry-After"]
			if pattern == "GET /readyz" {
				require.False(t, ok, "/readyz sends no Retry-After")
				continue
			}
			require.True(t, ok, "%s: store_busy and unavailable carry Retry-After: the document must declare it", response)
		}
	}
}
