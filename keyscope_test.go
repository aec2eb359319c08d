package opledger_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// The first pin records a destination's key scope; the same settings
// pass and write nothing; others are refused, naming what changed, and
// leave the record as it was, unless replaced. The record is store-wide.
func TestPinKeyScope(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			l, err := opledger.Open(ctx, st.NewDSN(t), opledger.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			first := map[string]string{"tenant": "default", "credential_header": "X-Api-Key"}
			replaced, err := l.PinKeyScope(ctx, "proxy:crm", first, false)
			require.NoError(t, err)
			require.Nil(t, replaced, "nothing was recorded before")
			replaced, err = l.PinKeyScope(ctx, "proxy:crm", map[string]string{"credential_header": "X-Api-Key", "tenant": "default"}, false)
			require.NoError(t, err, "the same settings, in any order")
			require.Nil(t, replaced)

			other := map[string]string{"tenant": "default", "credential_header": "Authorization", "region": "eu"}
			_, err = l.PinKeyScope(ctx, "proxy:crm", other, false)
			require.ErrorIs(t, err, opledger.ErrKeyScopeChanged)
			var changed *opledger.KeyScopeChangedError
			require.ErrorAs(t, err, &changed)
			require.Equal(t, []string{"credential_header", "region"}, changed.Changed)
			require.Equal(t, first, changed.Recorded.Settings)
			require.Equal(t, "proxy:crm", changed.Recorded.Destination)
			require.False(t, changed.Recorded.RecordedAt.IsZero())
			require.Contains(t, err.Error(), `destination proxy:crm: its operation keys were derived with credential_header "X-Api-Key", now "Authorization"; region (not set), now "eu" (recorded `)
			_, err = l.PinKeyScope(ctx, "proxy:crm", first, false)
			require.NoError(t, err, "a refusal writes nothing: the first settings still pass")

			// Store-wide: another tenant's ledger sees the same record.
			acme, err := l.WithTenant("acme")
			require.NoError(t, err)
			_, err = acme.PinKeyScope(ctx, "proxy:crm", map[string]string{"tenant": "acme", "credential_header": "X-Api-Key"}, false)
			require.ErrorIs(t, err, opledger.ErrKeyScopeChanged)
			_, err = acme.PinKeyScope(ctx, "proxy:mail", nil, false)
			require.NoError(t, err, "another destination has a record of its own")

			replaced, err = l.PinKeyScope(ctx, "proxy:crm", other, true)
			require.NoError(t, err)
			require.NotNil(t, replaced)
			require.Equal(t, first, replaced.Settings, "the replaced settings are returned")
			_, err = l.PinKeyScope(ctx, "proxy:crm", first, false)
			require.ErrorIs(t, err, opledger.ErrKeyScopeChanged, "the new settings are the recorded ones now")
			replaced, err = l.PinKeyScope(ctx, "proxy:crm", other, true)
			require.NoError(t, err)
			require.Nil(t, replaced, "replacing with the same settings replaces nothing")
		})
	}
}

// Bad input is refused before anything is read or written.
func TestPinKeyScopeInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprint("s", i)] = "v"
	}
	for _, c := range []struct {
		destination string
		settings    map[string]string
		want        string
	}{
		{"", nil, "destination names take letters"},
		{"crm <a@b.example>", nil, "destination names take letters"},
		{"crm", map[string]string{"": "x"}, "setting names are 1 to 200 bytes"},
		{"crm", map[string]string{strings.Repeat("n", 201): "x"}, "setting names are 1 to 200 bytes"},
		{"crm", map[string]string{"header": strings.Repeat("v", 1025)}, `the key scope setting "header" is 1025 bytes: at most 1024`},
		// Neither would read back from the store as given.
		{"crm", map[string]string{"header": "a\xffb"}, `the key scope setting "header"`},
		{"crm", map[string]string{"header": "a\x00b"}, `the key scope setting "header"`},
		{"crm", map[string]string{"h\xff": "x"}, "a key scope's setting name"},
		{"crm", many, "a key scope has at most 32 settings, not 33"},
	} {
		_, err := l.PinKeyScope(ctx, c.destination, c.settings, false)
		require.ErrorIs(t, err, opledger.ErrInvalidInput, c.want)
		require.ErrorContains(t, err, c.want)
	}
	_, err = l.PinKeyScope(ctx, "crm", map[string]string{"header": "v"}, false)
	require.NoError(t, err, "nothing was recorded by the refused calls")
}

// Processes that pin one destination's first scope at once, each with
// other settings, record one: every other is refused, on PostgreSQL too,
// where their transactions overlap.
func TestPinKeyScopeConcurrent(t *testing.T) {
	t.Parallel()
	for _, st := range testdb.Stores() {
		t.Run(st.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := st.NewDSN(t)
			const n = 8
			ledgers := make([]*opledger.Ledger, n)
			for i := range ledgers {
				l, err := opledger.Open(ctx, dsn, opledger.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { l.Close() })
				ledgers[i] = l
			}
			for round := range 5 {
				dest := fmt.Sprint("proxy:race", round)
				errs := make([]error, n)
				var wg sync.WaitGroup
				start := make(chan struct{})
				for i, l := range ledgers {
					wg.Go(func() {
						<-start
						_, errs[i] = l.PinKeyScope(ctx, dest, map[string]string{"credential_header": fmt.Sprint("X-Key-", i)}, false)
					})
				}
				close(start)
				wg.Wait()
				winner := -1
				for i, err := range errs {
					if err == nil {
						require.Equal(t, -1, winner, "round %d: two settings were both recorded (%d and %d)", round, winner, i)
						winner = i
						continue
					}
					require.True(t, errors.Is(err, opledger.ErrKeyScopeChanged), "round %d, pin %d: %v", round, i, err)
				}
				require.NotEqual(t, -1, winner, "round %d: one pin is recorded", round)
				_, err := ledgers[0].PinKeyScope(ctx, dest, map[string]string{"credential_header": fmt.Sprint("X-Key-", winner)}, false)
				require.NoError(t, err, "the winner's settings are the recorded ones")
			}
		})
	}
}
