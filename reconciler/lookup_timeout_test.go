package reconciler_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/reconciler"
)

// TestLookupTakesTheDestinationsTimeout: a destination's timeout is how
// long one of its calls or lookups may take (docs/destinations.md). A
// lookup slower than the reconciler's LookupTimeout but within the
// destination's timeout used to be cut at LookupTimeout (30 s by
// default, whatever the destination declared): every lookup of a slow
// search failed and the operation was held after 8 of them.
func TestLookupTakesTheDestinationsTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const slow = 400 * time.Millisecond // the destination's search
	var lookups atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			// The record is made, and the answer lost.
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
			return
		}
		lookups.Add(1)
		select {
		case <-time.After(slow): // a slow destination, not a synchronisation
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items": [{"id": "R1", "external_ref": `+string(mustJSON(t, r.URL.Query().Get("external_ref")))+`}]}`)
	}))
	t.Cleanup(srv.Close)
	set, err := destination.Load([]byte(`destinations:
  - name: slow
    url: `+srv.URL+`/records
    body: '{"external_ref": {{json .Key}}}'
    ref: /id
    timeout: 5s
    lookup:
      url: `+srv.URL+`/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 0s
      match:
        - record: /external_ref
          value: "{{.Key}}"
`), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	d, ok := set.Get("slow")
	require.True(t, ok)
	in := opledger.Intent{Key: "intake:S1:create", Action: "create", Destination: "slow", Payload: json.RawMessage(`{}`)}
	op, err := l.Do(ctx, in, d.Call)
	require.Error(t, err)
	require.Equal(t, opledger.StateUncertain, op.State)

	// LookupTimeout stands for the default 30 s, the destination's 5 s
	// timeout for a longer one.
	rec, err := reconciler.New(l, reconciler.Config{Destinations: set, LookupTimeout: slow / 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	decision, err := rec.Reconcile(ctx, op)
	require.NoError(t, err)
	require.Equal(t, reconciler.Succeeded, decision)
	require.Equal(t, int32(1), lookups.Load())
	got, err := l.Get(ctx, in.Key)
	require.NoError(t, err)
	require.Equal(t, opledger.StateSucceeded, got.State)
	require.Equal(t, "R1", got.DestinationRef)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
