package destination_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
)

// TestHTTPCallNoContentRef: a DELETE whose success carries no body (204)
// used to end uncertain, since a success needs a reference and there was
// none to read. A destination that declares no_content_ref, a template
// over the operation, takes its text as the reference of such a success;
// an answer with a body is still read at ref, and without one there stays
// uncertain. A no_content_ref the operation cannot fill is refused before
// anything is sent.
func TestHTTPCallNoContentRef(t *testing.T) {
	t.Parallel()
	c := &capture{status: http.StatusNoContent}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	yaml := "destinations:\n  - name: crm\n    method: DELETE\n    url: " + srv.URL + "/records/{{pathescape .Key}}\n" +
		"    ref: /id\n    no_content_ref: 'deleted:{{.Payload.id}}'\n"
	set, err := destination.Load([]byte(yaml), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	op := operation("crm:R42:delete", `{"id": "R42"}`)

	res, err := crm.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, "deleted:R42", res.Ref)
	require.Empty(t, res.Response)
	c.mu.Lock()
	require.Equal(t, http.MethodDelete, c.method)
	require.Equal(t, "/records/crm:R42:delete", c.path)
	c.mu.Unlock()

	// An answer with a body is read at ref, as ever.
	c.mu.Lock()
	c.status, c.answer = http.StatusOK, `{"id": "R42", "deleted": true}`
	c.mu.Unlock()
	res, err = crm.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, "R42", res.Ref)
	c.mu.Lock()
	c.answer = `{"deleted": true}`
	c.mu.Unlock()
	_, err = crm.Call(context.Background(), call(op))
	o, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, o, "a body without the reference proves nothing")

	// Nothing to stand for the reference: refused before sending.
	c.mu.Lock()
	c.method = ""
	c.mu.Unlock()
	bad := operation("crm:R43:delete", `{"other": 1}`)
	require.Error(t, crm.(destination.Preparer).Prepare(call(bad)))
	_, err = crm.Call(context.Background(), call(bad))
	o, _ = opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeRejected, o)
	require.ErrorContains(t, err, "no_content_ref")
	c.mu.Lock()
	require.Empty(t, c.method, "nothing was sent")
	c.mu.Unlock()

	// Without no_content_ref, a 204 is uncertain, as before.
	plain, err := destination.Load([]byte("destinations:\n  - name: crm\n    method: DELETE\n    url: "+srv.URL+"/records/x\n    ref: /id\n"), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, plain.Close()) })
	c.mu.Lock()
	c.status, c.answer = http.StatusNoContent, ""
	c.mu.Unlock()
	d, _ := plain.Get("crm")
	_, err = d.Call(context.Background(), call(op))
	o, _ = opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, o)
}

// TestLoadNoContentRefChecked: no_content_ref is checked at load as the
// other templates are, and refused without a value.
func TestLoadNoContentRefChecked(t *testing.T) {
	t.Parallel()
	base := "destinations:\n  - name: crm\n    method: DELETE\n    url: https://crm.example.com/x\n    ref: /id\n"
	for v, want := range map[string]string{
		"'{{.Kee}}'": "line 6: destination crm: no_content_ref: .Kee is not a field of the operation",
		"'${TOKEN}'": "line 6: destination crm: no_content_ref: ${TOKEN} would be kept as written in the reference",
		"":           "line 6: destination crm: no_content_ref: has no value",
		"'{{.Key'":   "line 6: destination crm: no_content_ref: parse template",
	} {
		_, err := destination.Load([]byte(base+"    no_content_ref: "+v+"\n"), destination.LoadOptions{})
		require.ErrorContains(t, err, want, v)
	}
}

// TestHTTPCallNoContentRefWithoutRef: a destination whose successes
// carry no body (a DELETE answered 204) has no reference in any answer,
// yet ref was required, so its file had to name a pointer no answer
// holds. With no_content_ref, ref may be left out: a success without a
// body takes the stand-in, and one with a body, which has no declared
// place for a reference, is uncertain, as a body without the reference
// at ref is. A lookup then needs its own ref; without no_content_ref,
// ref is required as before.
func TestHTTPCallNoContentRefWithoutRef(t *testing.T) {
	t.Parallel()
	c := &capture{status: http.StatusNoContent}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	yaml := "destinations:\n  - name: crm\n    method: DELETE\n    url: " + srv.URL + "/records/{{pathescape .Payload.id}}\n" +
		"    no_content_ref: 'deleted:{{.Payload.id}}'\n"
	set, err := destination.Load([]byte(yaml), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	crm, _ := set.Get("crm")
	op := operation("crm:R42:delete", `{"id": "R42"}`)

	res, err := crm.Call(context.Background(), call(op))
	require.NoError(t, err)
	require.Equal(t, "deleted:R42", res.Ref)

	c.mu.Lock()
	c.status, c.answer = http.StatusOK, `"R42"`
	c.mu.Unlock()
	res, err = crm.Call(context.Background(), call(op))
	o, _ := opledger.OutcomeOf(err)
	require.Equal(t, opledger.OutcomeUncertain, o, "an answer with a body has no declared reference")
	require.ErrorContains(t, err, "declares no ref")
	require.Empty(t, res.Ref)
	_, err = crm.(*destination.HTTP).RefOf([]byte(`"R42"`))
	require.ErrorContains(t, err, "declares no ref")
	_, ok := crm.(*destination.HTTP).ScanRef(strings.NewReader(`"R42"`))
	require.False(t, ok)

	lookup := yaml + "    lookup:\n      url: " + srv.URL + "/records/{{pathescape .Payload.id}}\n      match:\n        - record: /id\n          payload: /id\n"
	_, err = destination.Load([]byte(lookup), destination.LoadOptions{})
	require.ErrorContains(t, err, "line 6: destination crm: lookup.ref: is required")
	_, err = destination.Load([]byte(strings.Replace(lookup, "      match:", "      ref: /id\n      match:", 1)), destination.LoadOptions{})
	require.NoError(t, err)

	_, err = destination.Load([]byte("destinations:\n  - name: crm\n    method: DELETE\n    url: "+srv.URL+"/x\n"), destination.LoadOptions{})
	require.ErrorContains(t, err, "ref: is required")
}
