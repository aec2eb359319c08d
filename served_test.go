package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestDestinationTenants: a destination that serves some tenants only is
// refused, nothing recorded, in a new operation of another tenant, by
// every way one is recorded; other destinations, and operations recorded
// before the list, are not.
func TestDestinationTenants(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			crm := opledger.Intent{Key: "order:1:create", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{"n":1}`)}

			// Recorded before the destination listed its tenants.
			before, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "globex"})
			require.NoError(t, err)
			_, _, err = before.Record(ctx, crm)
			require.NoError(t, err)
			require.NoError(t, before.Close())

			acme, err := opledger.Open(ctx, dsn, opledger.Options{Tenant: "acme",
				DestinationTenants: map[string][]string{"crm": {"acme", "acme-eu"}}})
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, acme.Close()) })
			globex, err := acme.WithTenant("globex")
			require.NoError(t, err)

			_, created, err := acme.Record(ctx, crm)
			require.NoError(t, err)
			require.True(t, created, "a tenant it lists")
			// A repeat of what globex recorded before is answered as ever.
			op, created, err := globex.Record(ctx, crm)
			require.NoError(t, err)
			require.False(t, created)
			require.Equal(t, opledger.StatePending, op.State)

			refused := func(err error) {
				t.Helper()
				require.ErrorIs(t, err, opledger.ErrDestinationNotServed)
				require.ErrorIs(t, err, opledger.ErrInvalidInput)
				require.ErrorContains(t, err, `destination "crm" does not serve tenant "globex"`)
				require.NotContains(t, err.Error(), "acme", "the tenants it serves are not told to another")
			}
			in := crm
			in.Key = "order:2:create"
			_, _, err = globex.Record(ctx, in)
			refused(err)
			_, err = globex.Claim(ctx, in.Key, opledger.ClaimOptions{Intent: &in})
			refused(err)
			_, err = globex.Get(ctx, in.Key)
			require.ErrorIs(t, err, opledger.ErrNotFound, "nothing recorded")

			// A destination that lists no tenants serves every one.
			mail := in
			mail.Destination = "mail"
			_, created, err = globex.Record(ctx, mail)
			require.NoError(t, err)
			require.True(t, created)

			// A new workflow with such a step is refused whole.
			spec := opledger.WorkflowSpec{Steps: []opledger.WorkflowStep{
				{Name: "mail", Action: "mail.send", Destination: "mail", Payload: json.RawMessage(`{}`)},
				{Name: "crm", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)},
			}}
			_, _, err = globex.PutWorkflow(ctx, "onboard:1", spec)
			refused(err)
			require.ErrorContains(t, err, "step crm: ")
			_, err = globex.GetWorkflow(ctx, "onboard:1")
			require.ErrorIs(t, err, opledger.ErrNotFound)
			_, _, err = acme.PutWorkflow(ctx, "onboard:1", spec)
			require.NoError(t, err)

			// An event mapped to one is refused as a rule that cannot map it.
			rules, err := opledger.ParseRules([]byte(`
rules:
  - name: accepted
    source: forms
    type: accepted
    operations:
      - key: "intake:{data.n}:mail"
        action: mail.send
        destination: mail
      - key: "intake:{data.n}:create"
        action: crm.create
        destination: crm
`))
			require.NoError(t, err)
			ev := opledger.Event{Source: "forms", EventID: "e1", Type: "accepted", Payload: json.RawMessage(`{"n":7}`)}
			_, err = globex.ReceiveEvent(ctx, rules, ev)
			refused(err)
			var re *opledger.RuleError
			require.ErrorAs(t, err, &re)
			require.Equal(t, "accepted", re.Rule)
			require.Equal(t, "operations[1].destination", re.Field)
			_, err = globex.GetEvent(ctx, "forms", "e1")
			require.ErrorIs(t, err, opledger.ErrNotFound, "the event is not recorded")
			_, err = globex.Get(ctx, "intake:7:mail")
			require.ErrorIs(t, err, opledger.ErrNotFound, "nor any of its operations")
			res, err := acme.ReceiveEvent(ctx, rules, ev)
			require.NoError(t, err)
			require.Len(t, res.Operations, 2)
		})
	}
}

// TestDestinationTenantsChecked: Open refuses a list it cannot apply.
func TestDestinationTenantsChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for msg, lists := range map[string]map[string][]string{
		`destination "crm" lists no tenant`:                                 {"crm": {}},
		`destination "crm": invalid input: tenant:`:                         {"crm": {"acme", "a b"}},
		`DestinationTenants: invalid input: destination names take letters`: {"a b": {"acme"}},
	} {
		_, err := opledger.Open(ctx, "sqlite:"+t.TempDir()+"/l.db", opledger.Options{DestinationTenants: lists})
		require.ErrorIs(t, err, opledger.ErrInvalidInput)
		require.ErrorContains(t, err, msg)
	}
	// A retry policy under a name no destination can have would never
	// apply: refused too, and the name not repeated.
	_, err := opledger.Open(ctx, "sqlite:"+t.TempDir()+"/l.db", opledger.Options{
		DestinationRetryPolicies: map[string]opledger.RetryPolicy{"crm": {MaxAttempts: 2}, "ana@example.invalid": {MaxAttempts: 2}}})
	require.ErrorIs(t, err, opledger.ErrInvalidInput)
	require.ErrorContains(t, err, "DestinationRetryPolicies: invalid input: destination names take letters")
	require.NotContains(t, err.Error(), "ana@")
}
