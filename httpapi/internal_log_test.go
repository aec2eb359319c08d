package httpapi_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/store/sqlitestore"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestInternalErrorLogsNoKey: a request that fails inside the ledger
// (here a workflow whose stored definition was damaged) answers 500 and
// logs the cause, with the key of the request's path left out: keys may
// carry personal data and stay out of logs.
func TestInternalErrorLogsNoKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.PostgresDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	var logs testrig.LogBuffer
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	const key = "intake:alice.smith"
	_, _, err = l.PutWorkflow(ctx, key, opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
		{Name: "a", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	_, err = conn.Exec(ctx, `UPDATE workflows SET definition = 'not json'::bytea`)
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodGet, srv.URL()+"/v1/workflows/"+key, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
	require.Contains(t, logs.String(), "request failed")
	require.Contains(t, logs.String(), "decode workflow <key>: invalid character")
	require.NotContains(t, logs.String(), "alice")
}

// TestAttemptIDNotStorable: an attempt ID no attempt can have (a NUL byte,
// invalid UTF-8) is 404 on every store; PostgreSQL refused the lookup
// itself, and the API answered 500.
func TestAttemptIDNotStorable(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			b := startAPI(t, st.NewDSN(t), nil)
			status, _ := b.raw(t, "PUT", "/v1/operations/k1", b.token, []byte(`{"action":"a","destination":"d","payload":{}}`))
			require.Equal(t, http.StatusCreated, status)
			for _, id := range []string{"%00", "%FF", "01J%00"} {
				for _, route := range []string{"dispatch", "outcome"} {
					body := `{"fencing_token":1}`
					if route == "outcome" {
						body = `{"fencing_token":1,"outcome":"retryable"}`
					}
					status, data := b.raw(t, "POST", "/v1/operations/k1/attempts/"+id+"/"+route, b.token, []byte(body))
					require.Equal(t, http.StatusNotFound, status, "%s %s: %s", id, route, data)
					require.Equal(t, "not_found", problemKind(t, data))
				}
			}
		})
	}
}

// TestTextNotUTF8Refused: a name that is not UTF-8 (a Latin-1 byte, a
// lone surrogate escape) is refused, naming the member, not turned into
// U+FFFD (two different names became one, and a second PUT passed for a
// repeat). A report's error keeps its documented leniency.
func TestTextNotUTF8Refused(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	for _, body := range []string{
		"{\"action\":\"crm.create\xff\",\"destination\":\"d\",\"payload\":{}}",
		`{"action":"crm.create\ud800","destination":"d","payload":{}}`,
		`{"action":"crm.create","destination":"d\udc00x","payload":{}}`,
		"{\"action\":\"a\",\"destination\":\"d\",\"payload\":{\"name\":\"Jos\xe9\"}}",
		"{\"action\":\"a\",\"destination\":\"d\",\"payload\":{},\"owner\":\"ops\xc0\"}",
	} {
		status, data := b.raw(t, "PUT", "/v1/operations/k1", b.token, []byte(body))
		require.Equal(t, http.StatusBadRequest, status, "%q: %s", body, data)
		require.Equal(t, "invalid_input", problemKind(t, data))
		require.Contains(t, string(data), "not UTF-8")
	}
	// Pairs of surrogate escapes, other escapes and UTF-8 pass.
	status, data := b.raw(t, "PUT", "/v1/operations/k1", b.token,
		[]byte(`{"action":"crm.create","destination":"d","payload":{"e":"\ud83d\ude00 \\ud800 \"\u00e9\" é"}}`))
	require.Equal(t, http.StatusCreated, status, "%s", data)

	ctx := context.Background()
	c, err := b.acme.Claim(ctx, "k1", client.ClaimRequest{Worker: "w", Dispatch: true})
	require.NoError(t, err)
	status, data = b.raw(t, "POST", "/v1/operations/k1/attempts/"+c.AttemptID+"/outcome", b.token,
		[]byte(fmt.Sprintf("{\"fencing_token\":%d,\"outcome\":\"uncertain\",\"error\":\"read: conexi\xf3n cerrada\"}", c.FencingToken)))
	require.Equal(t, http.StatusOK, status, "a report's error is kept, replaced: %s", data)
	op, err := b.ledger.Get(ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, "read: conexi\uFFFDn cerrada", op.LastError)
}

// TestMemberNamesExact: encoding/json takes a member name in any case and
// keeps the last of two with one name; the API refuses both, at any depth
// of its own fields, so that what decides a request is what a reader of
// it sees. The caller's own content (a payload) is not looked into.
func TestMemberNamesExact(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	for body, want := range map[string]string{
		`{"action":"refund","destination":"pay","payload":{"n":1},"ACTION":"charge"}`: `unknown field "ACTION": field names are case-sensitive, did you mean "action"?`,
		`{"Action":"refund","destination":"pay","payload":{"n":1}}`:                   `did you mean "action"?`,
		`{"action":"refund","destination":"pay","payload":{"n":1},"action":"charge"}`: `member "action" is given twice`,
		`{"acton":"refund","destination":"pay","payload":{"n":1}}`: `unknown field "acton": it takes action, destination, owner, payload, ` +
			`requires_approval, sensitive_fields, source_event, version`,
	} {
		status, data := b.raw(t, "PUT", "/v1/operations/k1", b.token, []byte(body))
		require.Equal(t, http.StatusBadRequest, status, "%s: %s", body, data)
		require.Contains(t, problemDetail(t, data), want)
	}
	status, data := b.raw(t, "POST", "/v1/operations/k2/claim", b.token,
		[]byte(`{"worker":"w","intent":{"action":"a","destination":"d","payload":{},"Owner":"x"}}`))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	require.Contains(t, problemDetail(t, data), `unknown field "Owner" in intent`)
	status, data = b.raw(t, "POST", "/v1/operations/k2/claim", b.token,
		[]byte(`{"worker":"w","intent":{"action":"a","destination":"d","payload":{},"ownr":"x"}}`))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	require.Contains(t, problemDetail(t, data), `unknown field "ownr" in intent: it takes action, destination, owner,`)
	_, err := b.ledger.Get(context.Background(), "k2")
	require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")

	status, data = b.raw(t, "PUT", "/v1/operations/k3", b.token,
		[]byte(`{"action":"a","destination":"d","payload":{"Name":"x","name":"y","list":[{"A":1}]}}`))
	require.Equal(t, http.StatusCreated, status, "a payload's own names are its own: %s", data)
}

// problemDetail is the detail of a problem body.
func problemDetail(t *testing.T, data []byte) string {
	t.Helper()
	var p struct {
		Detail string `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(data, &p))
	return p.Detail
}

// TestReleaseReasonNotUTF8Kept: a release's reason that is not UTF-8 (a
// worker on its way out quoting a Latin-1 error, a NUL byte) is kept with
// such characters replaced, as documented, and the claim given back; it
// was refused with 400, so the claim stayed held until its lease ended.
// An operator's reason is still refused.
func TestReleaseReasonNotUTF8Kept(t *testing.T) {
	t.Parallel()
	b := startAPI(t, testdb.SQLiteDSN(t), nil)
	ctx := context.Background()
	c, err := b.acme.Claim(ctx, "k1", client.ClaimRequest{Worker: "w", Intent: &client.Intent{Action: "crm.create", Destination: "crm"}})
	require.NoError(t, err)
	status, data := b.raw(t, "POST", "/v1/operations/k1/attempts/"+c.AttemptID+"/release", b.token,
		[]byte(fmt.Sprintf("{\"fencing_token\":%d,\"reason\":\"shutting down: conexi\xf3n cerrada \\u0000 \\ud800\"}", c.FencingToken)))
	require.Equal(t, http.StatusOK, status, "a release's reason is kept, replaced: %s", data)
	d, err := b.acme.Get(ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, opledger.StatePending, d.State)
	last := d.Timeline[len(d.Timeline)-1]
	require.Equal(t, "released before dispatch", last.Event)
	require.Contains(t, last.Evidence, "shutting down: conexi\uFFFDn cerrada")
	require.NotContains(t, last.Evidence, "\x00")

	// Only the members documented as replaced: an operator's reason is
	// refused, naming it.
	_, _, err = b.acme.Record(ctx, "k2", client.Intent{Action: "crm.create", Destination: "crm"})
	require.NoError(t, err)
	status, data = b.raw(t, "POST", "/v1/operations/k2/resolve", b.token, []byte("{\"decision\":\"cancel\",\"reason\":\"dupe of conexi\xf3n\"}"))
	require.Equal(t, http.StatusBadRequest, status, "%s", data)
	require.Equal(t, "invalid_input", problemKind(t, data))
	require.Contains(t, problemDetail(t, data), `in "reason"`)
}

// TestUnencodableAnswerIsAProblem: an answer that cannot be encoded (here
// an operation whose stored payload was damaged into text that is no
// JSON) is a 500 problem like any other internal failure: with its
// instance and request_id, logged with the cause, and named in the
// request's log line (problem=internal).
func TestUnencodableAnswerIsAProblem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testdb.SQLiteDSN(t)
	l, err := opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "test", opledger.ReadWrite)
	require.NoError(t, err)
	const key = "intake:alice.smith"
	_, _, err = l.Record(ctx, opledger.Intent{Key: key, Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	claim, err := l.Claim(ctx, key, opledger.ClaimOptions{Worker: "w"})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	db, err := sql.Open("sqlite", sqlitestore.FileURI(strings.TrimPrefix(dsn, "sqlite:")))
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE operations SET payload = CAST('not json' AS BLOB)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	l, err = opledger.Open(ctx, dsn, opledger.Options{})
	require.NoError(t, err)
	var logs testrig.LogBuffer
	srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})

	// answersInternal sends a request whose answer cannot be encoded:
	// 500, a problem with its request_id, logged under it.
	answersInternal := func(method, path, body string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL()+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		var p httpapi.Problem
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
		require.Equal(t, httpapi.ProblemTypeBase+"internal", p.Type)
		require.NotEmpty(t, p.RequestID)
		require.Contains(t, logs.String(), "request_id="+p.RequestID)
		require.Contains(t, logs.String(), "problem=internal")
		require.Contains(t, logs.String(), "the answer could not be encoded")
	}
	answersInternal(http.MethodGet, "/v1/operations/"+key, "")
	// A report's answer (the operation with stale_report beside it) too.
	answersInternal(http.MethodPost, "/v1/operations/"+key+"/attempts/"+claim.AttemptID+"/outcome",
		fmt.Sprintf(`{"fencing_token":%d,"outcome":"retryable","error":"503"}`, claim.FencingToken))
	require.NotContains(t, logs.String(), "alice")
}
