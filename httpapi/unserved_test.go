package httpapi_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/client"
	"github.com/opledger/opledger/httpapi"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// TestUnservedDestinationWarned: an operation recorded through PUT (or a
// workflow's step) for a destination the server's destinations do not
// name is logged at warning level, once per name; a known destination,
// a repeat, and a server without destinations log nothing.
func TestUnservedDestinationWarned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, known := range [][]string{{"crm"}, nil} {
		l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
		require.NoError(t, err)
		token, _, err := l.CreateToken(ctx, "t", opledger.ReadWrite)
		require.NoError(t, err)
		var logs testrig.LogBuffer
		srv := testrig.Serve(t, l, server.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil)), SweepInterval: time.Hour,
			API: httpapi.Options{Destinations: known}})
		c := client.New(srv.URL(), token, nil)
		for _, in := range []struct{ key, dest string }{{"a:1", "crm"}, {"a:2", "crmm"}, {"a:3", "crmm"}, {"a:2", "crmm"}} {
			_, _, err := c.Record(ctx, in.key, client.Intent{Action: "create", Destination: in.dest, Payload: json.RawMessage(`{}`)})
			require.NoError(t, err)
		}
		_, _, err = c.PutWorkflow(ctx, "wf:1", opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
			{Name: "a", Action: "create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			{Name: "b", Action: "send", Destination: "emial", Payload: json.RawMessage(`{}`)},
		}})
		require.NoError(t, err)
		warned := strings.Count(logs.String(), "operation recorded for a destination this server does not send to")
		if known == nil {
			require.Zero(t, warned, "a server without destinations knows none to compare with")
			continue
		}
		require.Equal(t, 2, warned, "crmm once, emial once:\n%s", logs.String())
		require.Contains(t, logs.String(), "destination=crmm destinations=crm")
		require.Contains(t, logs.String(), "destination=emial")
	}
}
