package opledger_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestCallsAfterClose: after Close every call fails with ErrClosed, on
// this Ledger and on another tenant's view of it, whatever it reads or
// writes; a second Close returns nil, and the store keeps what was
// recorded before (a Ledger opened again reads it).
func TestCallsAfterClose(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			l, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			in := opledger.Intent{Key: "close:1", Action: "crm.create", Destination: "crm", Payload: json.RawMessage(`{}`)}
			_, _, err = l.Record(ctx, in)
			require.NoError(t, err)
			other, err := l.WithTenant("acme")
			require.NoError(t, err)
			require.NoError(t, l.Close())

			calls := map[string]func() error{
				"Record":   func() error { _, _, err := l.Record(ctx, in); return err },
				"Get":      func() error { _, err := l.Get(ctx, in.Key); return err },
				"List":     func() error { _, err := l.List(ctx, opledger.ListOptions{}); return err },
				"Claim":    func() error { _, err := l.Claim(ctx, in.Key, opledger.ClaimOptions{}); return err },
				"Stats":    func() error { _, err := l.Stats(ctx, true); return err },
				"Ping":     func() error { return l.Ping(ctx) },
				"Ready":    func() error { return l.Ready(ctx) },
				"acme Get": func() error { _, err := other.Get(ctx, in.Key); return err },
				"acme Record": func() error {
					_, _, err := other.Record(ctx, in)
					return err
				},
			}
			for name, call := range calls {
				require.ErrorIs(t, call(), opledger.ErrClosed, name)
			}
			require.NoError(t, l.Close(), "a second Close")

			again, err := opledger.Open(ctx, dsn, opledger.Options{})
			require.NoError(t, err)
			defer again.Close()
			op, err := again.Get(ctx, in.Key)
			require.NoError(t, err)
			require.Equal(t, opledger.StatePending, op.State)
		})
	}
}
