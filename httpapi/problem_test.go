package httpapi_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
	"github.com/opledger/opledger/webhook"
)

// TestProblemTitles: every problem kind the API and the proxy answer with
// has a title.
func TestProblemTitles(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{
		"fingerprint_mismatch", "in_progress", "not_due", "invalid_state", "stale_fencing_token",
		"stale_finding", "stale_decision", "not_found", "invalid_key", "invalid_input", "invalid_json",
		"reason_required", "unauthorized", "forbidden", "invalid_signature", "payload_too_large", "method_not_allowed",
		"unsupported_media", "internal", "unavailable", "store_busy", "store_full", "schema_newer", "mapping_failed", "destination_not_served",
		// The Idempotency-Key proxy's.
		"idempotency_key_required", "invalid_idempotency_key", "upstream_response_lost",
		"upstream_unreachable", "upstream_conflict", "no_upstream", "request_timeout", "key_scope_changed",
	} {
		rec := httptest.NewRecorder()
		httpapi.WriteProblem(rec, httptest.NewRequest(http.MethodGet, "/v1/stats", nil), http.StatusConflict, kind, "detail", nil)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p), kind)
		require.Equal(t, httpapi.ProblemTypeBase+kind, p.Type)
		require.NotEmpty(t, p.Title, kind)
	}
}

// TestTypeErrorsInCallersWords: a value of the wrong JSON type is named by
// its field and what it takes, a time that does not parse by its field and
// the form it takes, not in Go's terms.
func TestTypeErrorsInCallersWords(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	for _, tc := range []struct{ method, path, body, want string }{
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","version":"1"}`,
			`field version at line 1, column 46: expected a whole number, got JSON string`},
		// A whole number out of range says the range; a fraction does not.
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","version":9223372036854775808}`,
			`field version at line 1, column 62: expected a whole number from -9223372036854775808 to 9223372036854775807, got JSON number 9223372036854775808`},
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","version":1.5}`,
			`field version at line 1, column 46: expected a whole number, got JSON number 1.5`},
		{"PUT", "/v1/operations/k:1", `{"action":"a","destination":"d","requires_approval":"yes"}`,
			`field requires_approval at line 1, column 58: expected true or false, got JSON string`},
		{"POST", "/v1/operations/k:1/reconcile", `{"looked_at":"yesterday"}`,
			`field looked_at: a time is RFC 3339 text, such as "2026-12-04T10:00:00Z" (got "yesterday")`},
		{"POST", "/v1/events", `{"source":"s","event_id":"e","type":"t","occurred_at":"not-a-time","payload":{}}`,
			`field occurred_at: a time is RFC 3339 text`},
		{"PUT", "/v1/operations/k:1", "\xef\xbb\xbf" + `{"action":"a","destination":"d"}`,
			`request body starts with a byte order mark (EF BB BF): send the JSON object without one`},
		{"POST", "/v1/events", `{"source":"s","event_id":"e","type":"t","occurred_at":5,"payload":{}}`,
			`field occurred_at: a time is RFC 3339 text, such as "2026-12-04T10:00:00Z" (got JSON number)`},
		{"POST", "/v1/operations/k:1/resolve", `{"decision":"cancel","reason":"x","seen_updated_at":true}`,
			`field seen_updated_at: a time is RFC 3339 text, such as "2026-12-04T10:00:00Z" (got JSON boolean)`},
		// A member of a body that embeds another is named as sent, not
		// after the Go struct it comes from ("attemptBody.fencing_token").
		{"POST", "/v1/operations/k:1/attempts/a1/lease", `{"fencing_token":"1","lease_seconds":30}`,
			`field fencing_token at line 1, column 21: expected a whole number, got JSON string`},
	} {
		status, data := b.raw(t, tc.method, tc.path, b.token, []byte(tc.body))
		require.Equal(t, http.StatusBadRequest, status, string(data))
		var p struct{ Type, Detail string }
		require.NoError(t, json.Unmarshal(data, &p))
		require.Equal(t, "https://opledger.dev/problems/invalid_json", p.Type)
		require.Contains(t, p.Detail, tc.want)
	}
}

// TestClaimReplayMarked: a claim of an operation that succeeded answers
// 200 {replayed: true} with Idempotent-Replayed, as the other repeats
// the API answers without recording anything do.
func TestClaimReplayMarked(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: "k:1", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	c, err := b.ledger.Claim(ctx, "k:1", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "k:1", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeSucceeded, DestinationRef: "R1"})
	require.NoError(t, err)
	status, header, data := b.rawHeaders(t, http.MethodPost, "/v1/operations/k:1/claim", b.token, []byte(`{}`), nil)
	require.Equal(t, http.StatusOK, status, string(data))
	require.Equal(t, "true", header.Get(httpapi.HeaderReplayed))
	require.Contains(t, string(data), `"replayed":true`)
}

// TestClaimNotDueSaysWhen: a claim before the operation's next attempt
// is due answers 409 not_due with Retry-After, the seconds until its
// not_before (which the problem's operation carries too).
func TestClaimNotDueSaysWhen(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	_, _, err := b.ledger.Record(ctx, opledger.Intent{Key: "k:2", Action: "a", Destination: "d", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	c, err := b.ledger.Claim(ctx, "k:2", opledger.ClaimOptions{})
	require.NoError(t, err)
	_, err = b.ledger.Report(ctx, "k:2", c.AttemptID, c.FencingToken, opledger.Report{Outcome: opledger.OutcomeRetryable, Error: "429", RetryAfter: 2 * time.Minute})
	require.NoError(t, err)
	status, header, data := b.rawHeaders(t, http.MethodPost, "/v1/operations/k:2/claim", b.token, []byte(`{}`), nil)
	var p httpapi.Problem
	require.NoError(t, json.Unmarshal(data, &p), string(data))
	require.Equal(t, http.StatusConflict, status)
	require.Equal(t, httpapi.ProblemTypeBase+"not_due", p.Type)
	after, err := strconv.Atoi(header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", header.Get("Retry-After"))
	require.InDelta(t, 120, after, 30, "about the two minutes the destination asked for")
	require.NotNil(t, p.Operation)
	require.NotNil(t, p.Operation.NotBefore)
}

// TestBodyCutShort: a body that stops short of its Content-Length is
// refused as a body that could not be read (400 invalid_input), and one
// that stops coming as a request that timed out (408), not as malformed
// JSON; neither detail names the connection's addresses, and nothing is
// recorded.
func TestBodyCutShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name, kind, detail string
		status             int
		cut                bool
		// readTimeout is what ends the stalled request: short, so that
		// the test does not wait the default 30 s for it; the cut one
		// keeps the default, which a slow machine cannot reach first.
		readTimeout time.Duration
	}{
		{"cut", "invalid_input", "the request body could not be read to its end", http.StatusBadRequest, true, 0},
		{"stalled", "request_timeout", "the request body did not arrive in time", http.StatusRequestTimeout, false, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
			require.NoError(t, err)
			token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
			require.NoError(t, err)
			srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour,
				ReadTimeout: tc.readTimeout})
			conn, err := net.Dial("tcp", srv.Addr())
			require.NoError(t, err)
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "PUT /v1/operations/k:%s HTTP/1.1\r\nHost: opledger\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"action\":", tc.name, token)
			require.NoError(t, err)
			if tc.cut {
				require.NoError(t, conn.(*net.TCPConn).CloseWrite()) // the rest never comes
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, tc.status, resp.StatusCode)
			var p httpapi.Problem
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			require.Equal(t, httpapi.ProblemTypeBase+tc.kind, p.Type)
			require.Contains(t, p.Detail, tc.detail)
			require.NotContains(t, p.Detail, "127.0.0.1")
			_, err = l.Get(ctx, "k:"+tc.name)
			require.ErrorIs(t, err, opledger.ErrNotFound)
		})
	}
}

// TestStalledBodyDocumented: on every route that takes a body, one that
// does not arrive within the server's read timeout answers 408
// request_timeout, and the OpenAPI document lists that status for the
// route (it listed 408 for none, though every such route answers it).
func TestStalledBodyDocumented(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	acme, err := l.WithTenant("acme")
	require.NoError(t, err)
	token, _, err := acme.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	api := apiOptions(t)
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), SweepInterval: time.Hour,
		ReadTimeout: 2 * time.Second, API: api})
	documented := map[string]bool{}
	for _, s := range documentedStatuses(t) {
		documented[s] = true
	}
	routes := bodyRoutes(t)
	statuses := make([]int, len(routes))
	kinds := make([]string, len(routes))
	done := make(chan int)
	for i, pattern := range routes {
		method, path, _ := strings.Cut(pattern, " ")
		path = strings.NewReplacer("{key}", "k1", "{id}", "01J000000000000000000000AA", "{source}", "stripe",
			"{step}", "s1").Replace(path)
		go func() {
			defer func() { done <- i }()
			conn, err := net.Dial("tcp", srv.Addr())
			if !assert.NoError(t, err) {
				return
			}
			defer conn.Close()
			_, err = fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: opledger\r\nAuthorization: Bearer %s\r\n"+
				"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"action\":", method, path, token)
			if !assert.NoError(t, err) {
				return
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if !assert.NoError(t, err) {
				return
			}
			defer resp.Body.Close()
			var p httpapi.Problem
			assert.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			statuses[i], kinds[i] = resp.StatusCode, strings.TrimPrefix(p.Type, httpapi.ProblemTypeBase)
		}()
	}
	for range routes {
		<-done
	}
	for i, pattern := range routes {
		require.Equal(t, http.StatusRequestTimeout, statuses[i], pattern)
		require.Equal(t, "request_timeout", kinds[i], pattern)
		require.True(t, documented[pattern+" 408"], "%s answers 408: the OpenAPI document must list it", pattern)
	}
}

// TestCompressedBodyRefused: a body sent with a content coding other than
// identity (gzip here, a real one) is 415 unsupported_media, saying to
// send it uncompressed, with Accept-Encoding: identity (RFC 9110, section
// 15.5.16), not 400 "must be a JSON object"; nothing is recorded. A
// webhook's is refused the same way, before its signature is checked.
// identity, alone or named, is taken.
func TestCompressedBodyRefused(t *testing.T) {
	t.Parallel()
	b := startAPIWith(t, testdb.SQLiteDSN(t), nil, apiOptions(t))
	ctx := context.Background()
	body := []byte(`{"action":"a","destination":"d","payload":{}}`)
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	_, err := zw.Write(body)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	const detail = "is not supported: send the body uncompressed, without Content-Encoding"
	for _, coding := range []string{"gzip", "GZIP", "identity, gzip", "br"} {
		status, header, data := b.rawHeaders(t, http.MethodPut, "/v1/operations/k:1", b.token, zipped.Bytes(),
			http.Header{"Content-Encoding": {coding}})
		require.Equal(t, http.StatusUnsupportedMediaType, status, "%s: %s", coding, data)
		var p httpapi.Problem
		require.NoError(t, json.Unmarshal(data, &p), string(data))
		require.Equal(t, httpapi.ProblemTypeBase+"unsupported_media", p.Type)
		require.Equal(t, "Unsupported media type", p.Title)
		require.Equal(t, http.StatusUnsupportedMediaType, p.Status)
		require.Contains(t, p.Detail, "the request body's content coding (Content-Encoding: ")
		require.Contains(t, p.Detail, detail)
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		require.Equal(t, "identity", header.Get("Accept-Encoding"))
	}
	_, err = b.ledger.Get(ctx, "k:1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")

	hook := []byte(`{"id":"evt_gz_1","type":"invoice.paid","created":1764500000,"data":{"object":{"id":"in_1"}}}`)
	hdr := http.Header{webhook.StripeHeader: {webhook.SignStripe(testWebhookSecret, time.Now(), hook)}, "Content-Encoding": {"gzip"}}
	status, header, data := b.rawHeaders(t, http.MethodPost, "/v1/webhooks/stripe", "", hook, hdr)
	require.Equal(t, http.StatusUnsupportedMediaType, status, string(data))
	require.Equal(t, "unsupported_media", problemKind(t, data))
	require.Contains(t, string(data), detail)
	require.Equal(t, "identity", header.Get("Accept-Encoding"))
	_, err = b.ledger.GetEvent(ctx, "stripe", "evt_gz_1")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")

	for _, coding := range []string{"identity", "Identity"} {
		status, data := b.rawWith(t, http.MethodPut, "/v1/operations/k:"+coding, b.token, body, http.Header{"Content-Encoding": {coding}})
		require.Equal(t, http.StatusCreated, status, "%s: %s", coding, data)
	}
}
