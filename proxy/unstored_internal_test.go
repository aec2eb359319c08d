package proxy

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A request whose path is words alone, with no query and a body the
// payload keeps, hands the ledger nothing to mask beside its payload:
// the operation is recorded as one without it (no earlier payload
// written, no masking document read at every show). A path segment that
// reads as data, and a query, are handed over.
func TestUnstoredContentOnlyWhatReadsAsData(t *testing.T) {
	t.Parallel()
	words := httptest.NewRequest("POST", "/v1/customers/sendMessage", strings.NewReader(`{}`))
	require.Nil(t, unstoredContent(words, []byte(`{}`), true))

	data := httptest.NewRequest("POST", "/v1/customers/kim@example.com", strings.NewReader(`{}`))
	require.JSONEq(t, `{"path":{"segments":{"kim@example.com":null}}}`, string(unstoredContent(data, []byte(`{}`), true)))

	query := httptest.NewRequest("POST", "/v1/customers?email=kim@example.com", strings.NewReader(`{}`))
	require.JSONEq(t, `{"query":{"email":["kim@example.com"]}}`, string(unstoredContent(query, []byte(`{}`), true)))
}
