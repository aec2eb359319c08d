package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/fakedest"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/server"
)

const destinationsYAML = `
destinations:
  - name: crm
    url: @URL@/records
    body: '{"external_ref": {{json .Key}}, "units": {{json .Payload.units}}}'
    ref: /id
    lookup:
      url: @URL@/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      visibility_delay: 1ms
      match:
        - record: /external_ref
          value: "{{.Key}}"
    retry: {max_attempts: 3, initial_delay: 10ms, max_delay: 20ms, deadline: 1h}
`

// waitState polls the operation until it reaches want or the deadline.
func waitState(t *testing.T, c *client.Client, key string, want opledger.State) *client.OperationDetail {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		d, err := c.Get(context.Background(), key)
		require.NoError(t, err)
		if d.State == want {
			return d
		}
		require.True(t, time.Now().Before(deadline), "%s is %s, waited for %s", key, d.State, want)
		<-tick.C
	}
}

// TestServeExecutesDestinations: with destinations configured, the server's
// executor performs recorded operations, and its reconciler settles a lost
// response by lookup instead of sending again.
func TestServeExecutesDestinations(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			crm := fakedest.New(t, fakedest.Options{Unique: true})
			dir := t.TempDir()
			path := filepath.Join(dir, "destinations.yaml")
			require.NoError(t, os.WriteFile(path, []byte(strings.ReplaceAll(destinationsYAML, "@URL@", crm.URL())), 0o644))
			set, err := destination.LoadFile(path, destination.LoadOptions{})
			require.NoError(t, err)
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{DestinationRetryPolicies: set.RetryPolicies()})
			require.NoError(t, err)
			token, _, err := l.CreateToken(ctx, "test")
			require.NoError(t, err)
			srv, err := server.New(l, server.Config{Addr: "127.0.0.1:0", Destinations: set, SweepInterval: 50 * time.Millisecond,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			require.NoError(t, err)
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- srv.Run(runCtx) }()
			t.Cleanup(func() {
				stop()
				require.NoError(t, <-done)
				require.NoError(t, l.Close())
			})
			c := client.New(srv.URL(), token, nil)

			_, _, err = c.Record(ctx, "order:1:create", client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":2}`)})
			require.NoError(t, err)
			d := waitState(t, c, "order:1:create", opledger.StateSucceeded)
			require.NotEmpty(t, d.DestinationRef)
			require.Equal(t, 1, crm.Effects())

			crm.Fail(fakedest.LoseResponse)
			_, _, err = c.Record(ctx, "order:2:create", client.Intent{Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"units":3}`)})
			require.NoError(t, err)
			d = waitState(t, c, "order:2:create", opledger.StateSucceeded)
			require.Equal(t, 2, crm.Effects(), "the lost response was found by lookup, nothing sent twice")
			require.Equal(t, 2, crm.Creates())
			var events []string
			for _, e := range d.Timeline {
				events = append(events, e.Event)
			}
			require.Contains(t, events, "lookup found the effect")
		})
	}
}
