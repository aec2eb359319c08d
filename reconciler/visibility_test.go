package reconciler_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/executor"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/reconciler"
)

// slowCRM keeps working on a create after its caller gave up: the record
// exists only once the test lets the request finish, as with a server
// whose client timed out but whose work was not rolled back.
type slowCRM struct {
	release chan struct{}
	mu      sync.Mutex
	posts   int
	records []string
}

func (s *slowCRM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		var rec struct {
			ExternalRef string `json:"external_ref"`
		}
		_ = json.NewDecoder(r.Body).Decode(&rec)
		s.mu.Lock()
		s.posts++
		s.mu.Unlock()
		<-s.release // the caller's timeout does not stop the work
		s.mu.Lock()
		s.records = append(s.records, rec.ExternalRef)
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]string{"id": "R1"})
	case http.MethodGet:
		s.mu.Lock()
		items := []map[string]string{}
		for _, ref := range s.records {
			if ref == r.URL.Query().Get("external_ref") {
				items = append(items, map[string]string{"id": "R1", "external_ref": ref})
			}
		}
		s.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"items": items})
	}
}

// TestLookupRightAfterTimeoutReleasesNoResend: a create that times out
// while the destination goes on with it must not be sent again because
// a lookup made at once finds nothing yet. The visibility delay counts
// from the end of the call, not its dispatch (counted from the dispatch,
// a delay no longer than the timeout had already passed), and left unset
// it is the destination's timeout (it used to be 0: no wait at all).
func TestLookupRightAfterTimeoutReleasesNoResend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, delay string }{
		{"delay unset", ""},
		{"delay as long as the timeout", "      visibility_delay: 1s\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			crm := &slowCRM{release: make(chan struct{})}
			srv := httptest.NewServer(crm)
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(crm.release) }) // before srv.Close: the handler ends
			set, err := destination.Load([]byte(`
destinations:
  - name: crm
    url: `+srv.URL+`/records
    body: '{"external_ref": {{json .Key}}}'
    ref: /id
    timeout: 1s
    lookup:
      url: `+srv.URL+`/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
`+tc.delay+`      match:
        - record: /external_ref
          value: "{{.Key}}"
`), destination.LoadOptions{})
			require.NoError(t, err)
			t.Cleanup(func() { set.Close() })
			// The ledger's clock stands still: the lookup made at once is
			// within the visibility delay however long a loaded machine
			// takes between the call's end and the lookup (on the wall
			// clock, more than the 1 s delay had passed once).
			frozen := time.Now()
			l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{DestinationRetryPolicies: set.RetryPolicies(),
				Clock: func(time.Time) time.Time { return frozen }})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			ex, err := executor.New(l, executor.Config{Destinations: set, Lease: 3 * time.Second, Logger: quiet})
			require.NoError(t, err)
			rec, err := reconciler.New(l, reconciler.Config{Destinations: set, Logger: quiet})
			require.NoError(t, err)

			_, _, err = l.Record(ctx, opledger.Intent{Key: "intake:I17:create", Action: "crm.create", Destination: "crm"})
			require.NoError(t, err)
			op, err := ex.RunOnce(ctx) // times out after 1 s; the CRM goes on
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State, op.LastError)

			pass, err := rec.RunOnce(ctx) // at once: the record is not there yet
			require.NoError(t, err)
			require.Equal(t, map[reconciler.Decision]int{reconciler.Wait: 1}, pass.Decisions, "nothing proven absent yet")
			op, err = l.Get(ctx, "intake:I17:create")
			require.NoError(t, err)
			require.Equal(t, opledger.StateUncertain, op.State)
			due, err := ex.RunOnce(ctx)
			require.NoError(t, err)
			require.Nil(t, due, "nothing to send again")
			crm.mu.Lock()
			defer crm.mu.Unlock()
			require.Equal(t, 1, crm.posts)
		})
	}
}
