package executor_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testrig"
)

// A destination that lists its tenants is sent operations of those only:
// another tenant's ends rejected with nothing sent and no dispatch mark,
// and its credentials never leave for it.
func TestDestinationServesItsTenantsOnly(t *testing.T) {
	t.Parallel()
	testrig.ForEachStore(t, func(t *testing.T, newDSN func(testing.TB) string) {
		yaml := strings.Replace(testrig.Destinations, "  - name: crm\n", "  - name: crm\n    tenants: [acme]\n", 1)
		require.NotEqual(t, testrig.Destinations, yaml)
		r := testrig.New(t, newDSN, func(o *testrig.Options) { o.YAML = yaml })
		ledgers := map[string]*opledger.Ledger{}
		for _, tenant := range []string{"globex", "acme"} {
			tl, err := r.Ledger.WithTenant(tenant)
			require.NoError(t, err)
			ledgers[tenant] = tl
			_, created, err := tl.Record(r.Ctx, opledger.Intent{Key: "intake:T1:create", Action: "create", Destination: "crm",
				Payload: json.RawMessage(payload), Owner: "ops-team"})
			require.NoError(t, err)
			require.True(t, created)
		}
		require.NotNil(t, r.Step())
		require.NotNil(t, r.Step())
		require.Nil(t, r.Step(), "nothing left to do")

		acme, err := ledgers["acme"].Get(r.Ctx, "intake:T1:create")
		require.NoError(t, err)
		require.Equal(t, opledger.StateSucceeded, acme.State)
		globex, err := ledgers["globex"].Get(r.Ctx, "intake:T1:create")
		require.NoError(t, err)
		require.Equal(t, opledger.StateFailed, globex.State)
		require.Equal(t, "not sent: destination crm does not serve tenant globex", globex.LastError)
		attempts, err := ledgers["globex"].Attempts(r.Ctx, "intake:T1:create")
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Nil(t, attempts[0].DispatchedAt, "nothing was marked sent")
		require.Equal(t, string(opledger.OutcomeRejected), attempts[0].Outcome)
		require.Equal(t, 1, r.Server.Creates(), "only acme's operation reached the destination")
	})
}
