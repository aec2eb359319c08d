package destination

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMaskJSONRepeatedMember: an answer whose member name is given twice
// decodes to the last value only, so masking the decoded tree may change
// nothing; the answer as written still held the secret in the earlier
// member, in any spelling, and is never kept as it is: it is encoded
// again from the masked tree. An answer without a secret is kept as it
// is, byte for byte.
func TestMaskJSONRepeatedMember(t *testing.T) {
	t.Parallel()
	l := newSecretList(secretsOf("Bearer crm-s3cret", []string{"crm-s3cret"}))
	for doc, want := range map[string]string{
		`{"id": "r1", "auth": "Bearer crm-s3cret", "auth": "redacted"}`:       `{"auth":"redacted","id":"r1"}`,
		`{"id": "r1", "auth": "Bearer crm\u002ds3cret", "auth": "redacted"}`:  `{"auth":"redacted","id":"r1"}`,
		`{"id": "r1", "auth": {"crm\u002dS3CRET": 1}, "auth": "redacted"}`:    `{"auth":"redacted","id":"r1"}`,
		`{"id": "r1", "a": [{"t": "crm-s3cret", "t": 1}], "note": "x\u0041"}`: `{"a":[{"t":1}],"id":"r1","note":"xA"}`,
		`{"id": "r1", "auth": "Bearer crm-s3cret", "auth": "crm-s3cret"}`:     `{"auth":"***","id":"r1"}`,
	} {
		got := l.maskJSON(json.RawMessage(doc))
		require.JSONEq(t, want, string(got), doc)
		require.NotContains(t, strings.ToLower(string(got)), "s3cret", doc)
		require.NotContains(t, string(got), `\u002d`, doc)
	}
	for _, doc := range []string{`{"id": "r1", "auth": "redacted", "auth": "none"}`, `{"id": "r\u0031"}`, `{"id":"r1"}`} {
		got := l.maskJSON(json.RawMessage(doc))
		require.Equal(t, doc, string(got), "no secret: kept as the destination wrote it")
	}
}
