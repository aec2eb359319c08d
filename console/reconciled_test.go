package console_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/console"
	"github.com/opledger/opledger/destination"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testrig"
	"github.com/opledger/opledger/server"
)

// uncertainOp records an operation of key for dest, sends it once and
// leaves it uncertain: its attempt timed out after dispatch, and no
// reconciler has looked at it.
func uncertainOp(t *testing.T, l *opledger.Ledger, key, dest string) {
	t.Helper()
	ctx := context.Background()
	cl, err := l.Claim(ctx, key, opledger.ClaimOptions{Intent: &opledger.Intent{Key: key, Action: "create", Destination: dest,
		Payload: json.RawMessage(`{}`)}})
	require.NoError(t, err)
	_, err = l.Dispatch(ctx, key, cl.AttemptID, cl.FencingToken)
	require.NoError(t, err)
	_, err = l.Report(ctx, key, cl.AttemptID, cl.FencingToken, opledger.Report{Outcome: opledger.OutcomeUncertain, Error: "timeout after 10 s"})
	require.NoError(t, err)
}

// Advice of an uncertain operation's page, by what the console knows of
// the reconciler (Options.Reconciled).
const (
	adviceReconciled   = `<p id="guidance">This server’s reconciler examines it:`
	adviceUnreconciled = `<p id="guidance">Nothing here will look it up: no reconciler of this server serves destination <bdi>`
	adviceUnknown      = `<p id="guidance">A reconciler that serves its destination looks it up`
	adviceHeld         = `<p id="guidance">Look at the destination first:`
)

// TestUncertainAdviceSaysWhoLooks: the page of an uncertain operation
// whose destination no reconciler of the server serves (for its tenant)
// used to give the advice of a held one, as if a reconciler might still
// settle it; it now says that nothing here will look it up and a person
// must decide. One whose destination the server's reconciler serves says
// the reconciler examines it; a console that was not told
// (Options.Reconciled nil) says it depends on a reconciler; a held
// operation's advice is the same in every case.
func TestUncertainAdviceSaysWhoLooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var asked []string
	l, token, srv, _ := storeConsoleOptions(t, testdb.SQLiteDSN(t), opledger.Options{}, console.Options{
		Reconciled: func(tenant, dest string) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, tenant+"/"+dest)
			return tenant == "acme" && dest == "crm"
		}})
	uncertainOp(t, l, "u:crm", "crm")
	uncertainOp(t, l, "u:mailer", "mailer")
	heldOp(t, l, opledger.Intent{Key: "h:mailer", Action: "send", Destination: "mailer"}, "timeout", "no lookup")
	s := signIn(t, srv.URL, token)

	page := s.get("/operations/u:mailer")
	require.Contains(t, page, adviceUnreconciled+`mailer</bdi> for this tenant`)
	require.Contains(t, page, "It stays uncertain until a person decides")
	require.NotContains(t, page, adviceHeld)
	page = s.get("/operations/u:crm")
	require.Contains(t, page, adviceReconciled)
	require.NotContains(t, page, "Nothing here will look it up")
	require.Contains(t, s.get("/operations/h:mailer"), adviceHeld, "held: the person decides, wherever its destination is served")
	mu.Lock()
	require.Contains(t, asked, "acme/crm", "asked for the operation's tenant and destination")
	mu.Unlock()

	// Not told: neither promised nor ruled out.
	l, token, srv, _ = storeConsoleOptions(t, testdb.SQLiteDSN(t), opledger.Options{}, console.Options{})
	uncertainOp(t, l, "u:mailer", "mailer")
	page = signIn(t, srv.URL, token).get("/operations/u:mailer")
	require.Contains(t, page, adviceUnknown)
	require.Contains(t, page, "without one it stays uncertain until a person decides")
}

// TestServeTellsTheConsoleWhatItReconciles: opledger serve's console
// knows which destinations its reconciler serves: one of its
// destinations file that serves the tenant, not one the file leaves out
// or one that serves other tenants; a server without destinations runs
// no reconciler, and says so of every uncertain operation.
func TestServeTellsTheConsoleWhatItReconciles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// crm's lookups go to a port nothing listens on: they fail, and the
	// operation stays uncertain while the reconciler backs off.
	set, err := destination.Load([]byte(`
destinations:
  - name: crm
    url: http://127.0.0.1:1/records
    ref: /id
    tenants: [acme]
    lookup:
      url: http://127.0.0.1:1/records?external_ref={{urlquery .Key}}
      results: /items
      authoritative: true
      match:
        - record: /external_ref
          value: "{{.Key}}"
  - name: tickets
    url: http://127.0.0.1:1/tickets
    ref: /id
    tenants: [globex]
`), destination.LoadOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{Tenant: "acme"})
	require.NoError(t, err)
	token, _, err := l.CreateToken(ctx, "console", opledger.ReadWrite)
	require.NoError(t, err)
	srv := testrig.Serve(t, l, server.Config{Destinations: set, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	uncertainOp(t, l, "u:crm", "crm")
	uncertainOp(t, l, "u:tickets", "tickets")
	uncertainOp(t, l, "u:mailer", "mailer")
	s := signIn(t, srv.URL(), token)
	require.Contains(t, s.get("/operations/u:crm"), adviceReconciled)
	require.Contains(t, s.get("/operations/u:tickets"), adviceUnreconciled+`tickets</bdi>`, "serves other tenants only")
	require.Contains(t, s.get("/operations/u:mailer"), adviceUnreconciled+`mailer</bdi>`, "not in the destinations file")

	b := start(t)
	uncertainOp(t, b.ledger, "u:crm", "crm")
	require.Contains(t, signIn(t, b.url, b.token).get("/operations/u:crm"), adviceUnreconciled+`crm</bdi>`, "no destinations: no reconciler")
}
