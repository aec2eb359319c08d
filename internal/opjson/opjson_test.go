package opjson

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
)

// TestWithFields checks that the operation's encoding, extended in place,
// is one JSON object holding every field of the operation and every extra
// field, the extras in the order of their names after the operation's own.
func TestWithFields(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{Key: "order:1", Action: "create", Destination: "crm", State: opledger.StateSucceeded,
		Payload: json.RawMessage(`{"units":2}`), CreatedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	plain, err := json.Marshal(op)
	require.NoError(t, err)
	var want map[string]any
	require.NoError(t, json.Unmarshal(plain, &want))
	extra := map[string]any{"stale_report": true, "attempts": []int{1, 2}, "timeline": []string{}}
	for k, v := range extra {
		raw, err := json.Marshal(v)
		require.NoError(t, err)
		var decoded any
		require.NoError(t, json.Unmarshal(raw, &decoded))
		want[k] = decoded
	}

	b, err := WithFields(op, extra)
	require.NoError(t, err)
	require.True(t, json.Valid(b), "%s", b)
	var got map[string]any
	require.NoError(t, json.Unmarshal(b, &got))
	require.Equal(t, want, got)
	require.Equal(t, string(plain[:len(plain)-1])+`,"attempts":[1,2],"stale_report":true,"timeline":[]}`, string(b))

	b, err = WithFields(op, nil)
	require.NoError(t, err)
	require.Equal(t, string(plain), string(b), "nothing to add")
}

// TestEncodeAsMarshal checks that encode's one pass gives json.Marshal's
// bytes: HTML-safe escapes, U+2028, sensitive fields masked, a claimant's
// copy, an operation whose payload is not compact, and nil.
func TestEncodeAsMarshal(t *testing.T) {
	t.Parallel()
	op := &opledger.Operation{Key: "order:<1>", Action: "create & send", Destination: "crm", State: opledger.StateSucceeded,
		Payload:         json.RawMessage("{ \"card\" : \"4111 <b>\" ,\n \"note\":\"a\u2028b&c\", \"n\": 1.50 }"),
		Response:        json.RawMessage(`{"card":"4111 <b>","id":"r&1"}`),
		DestinationRef:  "r<1>",
		SensitiveFields: []string{"card"}, CreatedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	for _, o := range []*opledger.Operation{op, op.ForClaimant(), op.Masked(), {Key: "k"}, nil} {
		want, err := json.Marshal(o)
		require.NoError(t, err)
		got, err := encode(o)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
	b, err := WithFields(op, map[string]any{"stale_report": false})
	require.NoError(t, err)
	plain, err := json.Marshal(op)
	require.NoError(t, err)
	require.Equal(t, string(plain[:len(plain)-1])+`,"stale_report":false}`, string(b))
}

// BenchmarkWithFields encodes an outcome's answer, as the API does for
// every report.
//
//	go test -run '^$' -bench BenchmarkWithFields -benchmem ./internal/opjson/
func BenchmarkWithFields(b *testing.B) {
	op := &opledger.Operation{Key: "bench:1", Action: "noop", Destination: "bench", State: opledger.StateSucceeded,
		Payload: json.RawMessage(`{"order":"A-1","amount":120}`), DestinationRef: "noop", SensitiveFields: []string{},
		CreatedAt: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), UpdatedAt: time.Date(2026, 12, 1, 9, 0, 1, 0, time.UTC)}
	extra := map[string]any{"stale_report": false}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := WithFields(op, extra); err != nil {
			b.Fatal(err)
		}
	}
}
