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
