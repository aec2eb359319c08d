package opledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger"
	"github.com/opledger/opledger/internal/testdb"
)

// TestSensitiveFieldsAddedLaterMaskEarlierText: a repeat that marks a
// field sensitive after an attempt's error quoted its value masks that
// value in what the ledger shows from then on (the operation, its
// attempts and its timeline), not only in text stored afterwards: the
// text stored before keeps it, but Attempts and Timeline, which every
// view of the operation reads, mask it as they return it.
func TestSensitiveFieldsAddedLaterMaskEarlierText(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	l, err := opledger.Open(ctx, testdb.SQLiteDSN(t), opledger.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, l.Close()) })
	const secret = "ana.maria@example.invalid"
	in := doIntent("later:1")
	in.Payload = json.RawMessage(`{"to":"` + secret + `"}`)
	_, err = l.Do(ctx, in, func(context.Context, opledger.Call) (opledger.Result, error) {
		return opledger.Result{}, opledger.Uncertain(errors.New("bad to " + secret))
	})
	require.Error(t, err)
	in.SensitiveFields = []string{"to"}
	_, _, err = l.Record(ctx, in)
	require.NoError(t, err)

	op, err := l.Get(ctx, in.Key)
	require.NoError(t, err)
	require.Equal(t, "bad to ***", op.LastError)
	attempts, err := l.Attempts(ctx, in.Key)
	require.NoError(t, err)
	require.Equal(t, "bad to ***", attempts[0].Error)
	tl, err := l.Timeline(ctx, in.Key)
	require.NoError(t, err)
	var events []string
	for _, e := range tl {
		require.NotContains(t, e.Evidence, secret, "%s", e.Event)
		events = append(events, e.Event)
	}
	require.Contains(t, events, "sensitive fields added")
}
